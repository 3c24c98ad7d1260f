# SPDX-License-Identifier: Apache-2.0
"""Rate limiters: when a table lets inserts and samples proceed.

Every limiter is the same mechanism with four parameters. With

    diff = inserts * samples_per_insert - samples

an insert may proceed while the table holds fewer than `min_size_to_sample`
items or while `diff + samples_per_insert <= max_diff`; a sample may proceed
once the table holds at least `min_size_to_sample` items and while
`diff - 1 >= min_diff`. Calls that may not proceed block (with a timeout where
the API offers one) rather than fail. The native core enforces this and
defines the presets (`_core.RateLimiterOptions`); these classes check Python
arguments and carry the native options (`_core_options`).
"""

import math
from typing import Any, Tuple, Union

from absl import logging

from reverb_tf import _arguments
from reverb_tf import _native


# dm-reverb's words for an error_buffer too small, which programs match on.
_ERROR_BUFFER_PHRASE = (
    "The size of error_buffer must be >= max(1.0, samples_per_insert) as smaller values "
    "could completely block samples and/or insert calls.")


def _check_positive_int(name: str, value: int) -> int:
    value = _arguments.integer(name, value)
    if value < 1:
        raise ValueError(f"{name} ({value}) must be a positive integer")
    return value


class RateLimiter:
    """Base class of the rate limiters: the four raw parameters.

    Prefer the subclasses; they choose consistent parameters.
    """

    def __init__(self, samples_per_insert: float, min_size_to_sample: int,
                 min_diff: float, max_diff: float) -> None:
        """Creates a limiter from raw parameters.

        Args:
          samples_per_insert: Target number of samples per inserted item.
          min_size_to_sample: Samples block until the table holds this many
            items.
          min_diff: Samples block while `diff - 1 < min_diff`.
          max_diff: Inserts block while `diff + samples_per_insert > max_diff`.

        Raises:
          ValueError: If `samples_per_insert` is not finite and > 0, if
            `min_size_to_sample` is not a positive integer, if a diff is NaN or
            if `min_diff > max_diff`.
        """
        samples_per_insert = _arguments.number("samples_per_insert", samples_per_insert)
        if not math.isfinite(samples_per_insert) or samples_per_insert <= 0:
            raise ValueError(
                f"samples_per_insert ({samples_per_insert}) must be finite and > 0")
        min_size_to_sample = _check_positive_int("min_size_to_sample", min_size_to_sample)
        min_diff = _arguments.number("min_diff", min_diff)
        max_diff = _arguments.number("max_diff", max_diff)
        self._use(_native.core().RateLimiterOptions(
            samples_per_insert, min_size_to_sample, min_diff, max_diff))

    def _use(self, options: Any) -> None:
        """Adopts native options (built directly or by a native preset).

        Raises:
          ValueError: If the native core rejects them (its message says why).
        """
        error = options.error()
        if error is not None:
            raise ValueError(error)
        self._core_options = options

    def _key(self) -> Tuple[float, int, float, float]:
        o = self._core_options
        return (o.samples_per_insert, o.min_size_to_sample, o.min_diff, o.max_diff)

    @property
    def samples_per_insert(self) -> float:
        """Target number of samples per inserted item."""
        return self._core_options.samples_per_insert

    @property
    def min_size_to_sample(self) -> int:
        """Samples block until the table holds this many items."""
        return self._core_options.min_size_to_sample

    @property
    def min_diff(self) -> float:
        """Lower bound of `inserts * samples_per_insert - samples` for sampling."""
        return self._core_options.min_diff

    @property
    def max_diff(self) -> float:
        """Upper bound of `inserts * samples_per_insert - samples` for inserting."""
        return self._core_options.max_diff

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RateLimiter):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __reduce__(self) -> Any:
        # Picklable (to hand tables to other processes, e.g. Ray actors):
        # rebuilt as the same class from the four raw parameters.
        return _rebuild, (type(self), self._key())

    def __repr__(self) -> str:
        spi, min_size, min_diff, max_diff = self._key()
        return (f"{type(self).__name__}(samples_per_insert={spi}, "
                f"min_size_to_sample={min_size}, min_diff={min_diff}, "
                f"max_diff={max_diff})")


class MinSize(RateLimiter):
    """Blocks samples until the table holds `min_size_to_sample` items.

    Once the table is that large, samples and inserts are never limited.
    """

    def __init__(self, min_size_to_sample: int) -> None:
        """Creates the limiter.

        Args:
          min_size_to_sample: Number of items the table must hold before
            samples may proceed.

        Raises:
          ValueError: If `min_size_to_sample` is not a positive integer.
        """
        min_size_to_sample = _check_positive_int("min_size_to_sample", min_size_to_sample)
        self._use(_native.core().RateLimiterOptions.min_size(min_size_to_sample))


class SampleToInsertRatio(RateLimiter):
    """Keeps the ratio of samples to inserts near `samples_per_insert`.

    Until the table holds `min_size_to_sample` items it behaves like
    `MinSize`. After that, inserts block when they run ahead of samples and
    samples block when they run ahead of inserts, by more than `error_buffer`
    samples' worth of slack.
    """

    def __init__(self, samples_per_insert: float, min_size_to_sample: int,
                 error_buffer: Union[float, Tuple[float, float]]) -> None:
        """Creates the limiter.

        Args:
          samples_per_insert: Average number of times each item should be
            sampled over its lifetime.
          min_size_to_sample: Items the table must hold before sampling starts.
          error_buffer: Either a number, the slack on both sides of
            `offset = min_size_to_sample * samples_per_insert` (so
            `min_diff = offset - error_buffer`, `max_diff = offset +
            error_buffer`, as in dm-reverb), or a `(min_diff, max_diff)` pair
            used as is.

        Raises:
          ValueError: If `samples_per_insert` is not finite and > 0, if
            `min_size_to_sample` is not a positive integer, if the window
            `max_diff - min_diff` is smaller than `2 * max(1,
            samples_per_insert)` (it could block inserts or samples for good),
            or if `min_diff` is above `min_size_to_sample * samples_per_insert`
            (sampling could never start).
        """
        spi = _arguments.number("samples_per_insert", samples_per_insert)
        if not math.isfinite(spi) or spi <= 0:
            raise ValueError(f"samples_per_insert ({samples_per_insert}) must be finite and > 0")
        min_size = _check_positive_int("min_size_to_sample", min_size_to_sample)

        if isinstance(error_buffer, (tuple, list)):
            if len(error_buffer) != 2:
                raise ValueError(
                    f"error_buffer must be a number or a (min_diff, max_diff) pair, "
                    f"got {error_buffer!r}")
            min_diff = _arguments.number("error_buffer[0]", error_buffer[0])
            max_diff = _arguments.number("error_buffer[1]", error_buffer[1])
            options = _native.core().RateLimiterOptions(spi, min_size, min_diff, max_diff)
        else:
            try:
                buffer = _arguments.number("error_buffer", error_buffer)
            except TypeError as e:
                # A ValueError, as dm-reverb raises for it (unpacking a pair).
                raise ValueError(str(e)) from None
            if buffer < 0:
                raise ValueError(f"{_ERROR_BUFFER_PHRASE} (error_buffer is {buffer})")
            options = _native.core().RateLimiterOptions.sample_to_insert_ratio(
                spi, min_size, buffer)
            min_diff, max_diff = options.min_diff, options.max_diff

        # One insert moves diff up by spi and one sample down by 1: a narrower
        # window can leave no state from which both are possible.
        if max_diff - min_diff < 2 * max(1.0, spi):
            raise ValueError(
                f"{_ERROR_BUFFER_PHRASE} (error_buffer leaves a window of "
                f"{max_diff - min_diff} between "
                f"min_diff ({min_diff}) and max_diff ({max_diff}); it must be at "
                f"least 2 * max(1.0, samples_per_insert) = {2 * max(1.0, spi)} so "
                "that neither inserts nor samples can block for good)")
        # When sampling starts, diff is min_size * spi: sampling needs
        # diff - 1 >= min_diff, and samples only lower diff.
        start = min_size * spi
        if min_diff > start:
            raise ValueError(
                f"min_diff ({min_diff}) is above min_size_to_sample * "
                f"samples_per_insert ({start}): sampling would be blocked for good "
                "once min_size_to_sample items have been inserted")
        if max_diff < start:
            logging.warning(
                "SampleToInsertRatio: max_diff (%s) is below min_size_to_sample * "
                "samples_per_insert (%s); inserts will block once the table is "
                "full enough to sample until samples catch up, which deadlocks a "
                "single thread that inserts and then samples.", max_diff, start)
        self._use(options)


class _SingleUse(RateLimiter):
    """Shared limiter of Queue and Stack: each item sampled exactly once."""

    def __init__(self, size: int) -> None:
        """Creates the limiter.

        Args:
          size: Maximum number of items waiting to be sampled; inserts block
            beyond it, samples block when nothing is waiting.

        Raises:
          ValueError: If `size` is not a positive integer.
        """
        size = _check_positive_int("size", size)
        self._use(_native.core().RateLimiterOptions.queue(size))


class Queue(_SingleUse):
    """Makes a table a queue: every item is sampled exactly once, in order.

    Use `Table.queue` rather than this class directly; it pairs the limiter
    with Fifo selectors and `max_times_sampled=1`.
    """


class Stack(_SingleUse):
    """Makes a table a stack: every item is sampled exactly once, newest first.

    Use `Table.stack` rather than this class directly; it pairs the limiter
    with Lifo selectors and `max_times_sampled=1`.
    """


def _rebuild(cls: type, key: Tuple[float, int, float, float]) -> RateLimiter:
    limiter = cls.__new__(cls)
    RateLimiter.__init__(limiter, *key)
    return limiter
