# SPDX-License-Identifier: Apache-2.0
"""Rate limiter parameters and validation (no server needed)."""
import math
import sys

import pytest

from reverb_tf import rate_limiters

# Every test twice: over gRPC and in-process (conftest.py).
BOTH_TRANSPORTS = True


def test_min_size():
    limiter = rate_limiters.MinSize(3)
    assert limiter._key() == (1.0, 3, -sys.float_info.max, sys.float_info.max)
    assert limiter.min_size_to_sample == 3


@pytest.mark.parametrize("bad", [0, -1])
def test_min_size_rejects_non_positive_integers(bad):
    with pytest.raises(ValueError):
        rate_limiters.MinSize(bad)


@pytest.mark.parametrize("bad", [1.5, 2.0, "3", None, True])
def test_min_size_rejects_non_integers_with_type_error(bad):
    # dm-reverb's native constructor raises TypeError for these.
    with pytest.raises(TypeError):
        rate_limiters.MinSize(bad)


def test_min_size_takes_numpy_integers():
    import numpy as np  # pylint: disable=g-import-not-at-top
    assert rate_limiters.MinSize(np.int64(4)).min_size_to_sample == 4


@pytest.mark.parametrize("spi,min_size,buffer,expected", [
    # offset = min_size * spi; diffs = offset -/+ buffer (as dm-reverb: no
    # clamping of a small offset, checked by tests/compat).
    (2.0, 10, 5.0, (15.0, 25.0)),
    (4.0, 1000, 2048.0, (4000.0 - 2048.0, 4000.0 + 2048.0)),
    (0.25, 1, 1.0, (-0.75, 1.25)),  # an offset below 1 is kept
    (1.0, 1, 1, (0.0, 2.0)),      # int buffer
])
def test_sample_to_insert_ratio_with_number_buffer(spi, min_size, buffer, expected):
    limiter = rate_limiters.SampleToInsertRatio(spi, min_size, buffer)
    assert limiter._key() == (spi, min_size) + expected
    assert (limiter.min_diff, limiter.max_diff) == expected


def test_sample_to_insert_ratio_with_pair_buffer_used_verbatim():
    limiter = rate_limiters.SampleToInsertRatio(2.0, 5, (3.0, 30.0))
    assert limiter._key() == (2.0, 5, 3.0, 30.0)
    limiter = rate_limiters.SampleToInsertRatio(1.0, 5, [0, 10])
    assert limiter._key() == (1.0, 5, 0.0, 10.0)


@pytest.mark.parametrize("spi,buffer", [
    (1.0, 0.5),    # window 1 < 2
    (3.0, 2.9),    # window 5.8 < 6
    (1.0, (0.0, 1.0)),
])
def test_sample_to_insert_ratio_rejects_windows_that_can_block_for_good(spi, buffer):
    with pytest.raises(ValueError, match="error_buffer"):
        rate_limiters.SampleToInsertRatio(spi, 10, buffer)


def test_sample_to_insert_ratio_rejects_window_above_start():
    # Sampling starts at diff = 10 * 1.0; min_diff 20 would never allow it.
    with pytest.raises(ValueError, match="min_diff"):
        rate_limiters.SampleToInsertRatio(1.0, 10, (20.0, 40.0))


def test_sample_to_insert_ratio_warns_when_window_below_start(caplog):
    with caplog.at_level("WARNING"):
        limiter = rate_limiters.SampleToInsertRatio(1.0, 100, (-10.0, 10.0))
    assert limiter.max_diff == 10.0
    assert any("max_diff" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("spi", [0, -1.0, math.nan, math.inf])
def test_sample_to_insert_ratio_rejects_bad_ratio(spi):
    with pytest.raises(ValueError, match="samples_per_insert"):
        rate_limiters.SampleToInsertRatio(spi, 10, 100.0)


@pytest.mark.parametrize("buffer", [math.nan, -1.0, (1.0,), (1.0, 2.0, 3.0), "x"])
def test_sample_to_insert_ratio_rejects_bad_buffers(buffer):
    with pytest.raises(ValueError):
        rate_limiters.SampleToInsertRatio(1.0, 10, buffer)


def test_sample_to_insert_ratio_rejects_bad_min_size():
    with pytest.raises(ValueError, match="min_size_to_sample"):
        rate_limiters.SampleToInsertRatio(1.0, 0, 10.0)


@pytest.mark.parametrize("cls", [rate_limiters.Queue, rate_limiters.Stack])
def test_queue_and_stack(cls):
    assert cls(7)._key() == (1.0, 1, 0.0, 7.0)
    with pytest.raises(ValueError):
        cls(0)


def test_raw_rate_limiter_validation():
    assert rate_limiters.RateLimiter(2.0, 3, -1.0, 5.0)._key() == (2.0, 3, -1.0, 5.0)
    with pytest.raises(ValueError, match="min_diff"):
        rate_limiters.RateLimiter(1.0, 1, 5.0, 1.0)
    with pytest.raises(ValueError):
        rate_limiters.RateLimiter(1.0, 1, math.nan, 1.0)


def test_equality_and_repr():
    assert rate_limiters.MinSize(2) == rate_limiters.MinSize(2)
    assert rate_limiters.MinSize(2) != rate_limiters.MinSize(3)
    assert "samples_per_insert=2.0" in repr(rate_limiters.SampleToInsertRatio(2.0, 1, 10.0))
