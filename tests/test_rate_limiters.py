# SPDX-License-Identifier: Apache-2.0
"""Rate limiter parameters and validation (no server needed)."""

import math
import sys

import pytest

import reverb_tf as reverb
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


@pytest.mark.parametrize(
    "spi,min_size,buffer,expected",
    [
        # offset = min_size * spi; diffs = offset -/+ buffer (as dm-reverb: no
        # clamping of a small offset, checked by tests/compat).
        (2.0, 10, 5.0, (15.0, 25.0)),
        (4.0, 1000, 2048.0, (4000.0 - 2048.0, 4000.0 + 2048.0)),
        (0.25, 1, 1.0, (-0.75, 1.25)),  # an offset below 1 is kept
        (1.0, 1, 1, (0.0, 2.0)),  # int buffer
    ],
)
def test_sample_to_insert_ratio_with_number_buffer(spi, min_size, buffer, expected):
    limiter = rate_limiters.SampleToInsertRatio(spi, min_size, buffer)
    assert limiter._key() == (spi, min_size) + expected
    assert (limiter.min_diff, limiter.max_diff) == expected


def test_sample_to_insert_ratio_with_pair_buffer_used_verbatim():
    limiter = rate_limiters.SampleToInsertRatio(2.0, 5, (3.0, 30.0))
    assert limiter._key() == (2.0, 5, 3.0, 30.0)
    limiter = rate_limiters.SampleToInsertRatio(1.0, 5, [0, 10])
    assert limiter._key() == (1.0, 5, 0.0, 10.0)


@pytest.mark.parametrize(
    "spi,buffer",
    [
        (1.0, 0.5),  # window 1 < 2
        (3.0, 2.9),  # window 5.8 < 6
        (1.0, (0.0, 1.0)),
    ],
)
def test_sample_to_insert_ratio_rejects_windows_that_can_block_for_good(spi, buffer):
    with pytest.raises(ValueError, match="error_buffer"):
        rate_limiters.SampleToInsertRatio(spi, 10, buffer)


def test_a_window_above_the_start_is_accepted():
    # Sampling then starts later (test_selection_integration shows when); an
    # earlier check refused it, claiming sampling could never start.
    limiter = rate_limiters.SampleToInsertRatio(1.0, 10, (20.0, 40.0))
    assert limiter._key() == (1.0, 10, 20.0, 40.0)


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
    # dm-reverb's spelling: the native limiter's fields, numbers as C++ prints them.
    assert repr(rate_limiters.SampleToInsertRatio(2.0, 1, 10.0)) == (
        "RateLimiter(samples_per_insert=2, min_diff_=-8, max_diff=12, min_size_to_sample=1)"
    )


@pytest.mark.parametrize(
    "limiter, why",
    [
        # diff 1 after the first insert: inserts need diff <= -0.5, samples
        # diff >= 1.5.
        (lambda: rate_limiters.RateLimiter(1.0, 1, 0.5, 1.5), "window of 1 around 1"),
        # The binary's config without diffs: min_diff = max_diff = 0.
        (lambda: rate_limiters.RateLimiter(1.0, 1, 0.0, 0.0), "empty window"),
        # Any window narrower than samples_per_insert deadlocks once sampling
        # has brought diff down to min_diff.
        (lambda: rate_limiters.RateLimiter(3.0, 2, -1.0, 1.0), "window below one insert"),
        # Irrational-looking ratio: diffs come arbitrarily close to every point.
        (lambda: rate_limiters.RateLimiter(0.3, 1, 0.0, 1.0), "dense diffs"),
    ],
)
def test_a_table_refuses_a_limiter_that_can_deadlock(limiter, why):
    with pytest.raises(ValueError, match="can block inserts and samples for good"):
        reverb.Table("t", reverb.selectors.Uniform(), reverb.selectors.Fifo(), 10, limiter())


@pytest.mark.parametrize(
    "limiter",
    [
        # Queue(1)'s window of 1 is narrow but never deadlocks: diffs are 0 or 1.
        lambda: rate_limiters.RateLimiter(1.0, 1, 0.0, 1.0),
        # Narrower than dm-reverb's SampleToInsertRatio rule (2 * spi = 4) but
        # live: the diffs 1, 2 and 3 each allow a call.
        lambda: rate_limiters.RateLimiter(2.0, 1, 0.5, 3.5),
        lambda: rate_limiters.SampleToInsertRatio(1.0, 10, 1.0),
        lambda: rate_limiters.MinSize(5),
    ],
)
def test_a_table_accepts_a_narrow_limiter_that_cannot_deadlock(limiter):
    table = reverb.Table("t", reverb.selectors.Uniform(), reverb.selectors.Fifo(), 10, limiter())
    assert table.can_insert(1)


def test_the_preset_keeps_dm_reverbs_stricter_window_rule():
    # RateLimiter(2.0, 1, 0.5, 3.5) is live, yet dm-reverb refuses the same
    # window as SampleToInsertRatio(2.0, 1, 1.5): programs expect that.
    with pytest.raises(ValueError, match=r"error_buffer must be >= max\(1.0, samples_per_insert\)"):
        rate_limiters.SampleToInsertRatio(2.0, 1, 1.5)


def test_items_that_leave_when_sampled_skip_the_deadlock_check():
    # With max_times_sampled the table shrinks as it samples (inserts then
    # pass below min_size_to_sample), so the same limiter serves a queue of 1.
    table = reverb.Table(
        "t",
        reverb.selectors.Fifo(),
        reverb.selectors.Fifo(),
        10,
        rate_limiters.RateLimiter(1.0, 1, 0.0, 0.5),
        max_times_sampled=1,
    )
    assert table.can_insert(1)
