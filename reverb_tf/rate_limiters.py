# SPDX-License-Identifier: Apache-2.0
"""Rate limiters: when a table lets inserts and samples proceed.

Every limiter is the same mechanism with four parameters. With

    diff = inserts * samples_per_insert - samples

an insert may proceed while the table holds fewer than `min_size_to_sample`
items or while `diff + samples_per_insert <= max_diff`; a sample may proceed
once the table holds at least `min_size_to_sample` items and while
`diff - 1 >= min_diff`. Calls that may not proceed block (with a timeout where
the API offers one) rather than fail. The native core enforces this,
defines the presets and checks their arguments (`_core.RateLimiterOptions`,
which raises ValueError with the core's message); these classes convert
Python arguments and carry the native options (`_core_options`).
"""

from typing import Any, Tuple, Union

from absl import logging

from reverb_tf import _arguments
from reverb_tf import _native


class RateLimiter:
    """Base class of the rate limiters: the four raw parameters.

    Prefer the subclasses; they choose consistent parameters.
    """

    def __init__(
        self, samples_per_insert: float, min_size_to_sample: int, min_diff: float, max_diff: float
    ) -> None:
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
        self._core_options = _native.core().RateLimiterOptions(
            _arguments.number("samples_per_insert", samples_per_insert),
            _arguments.integer("min_size_to_sample", min_size_to_sample),
            _arguments.number("min_diff", min_diff),
            _arguments.number("max_diff", max_diff),
        )

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
        # dm-reverb prints its native limiter's fields, whichever preset made
        # it, in this order and spelling; numbers as C++ prints doubles.
        spi, min_size, min_diff, max_diff = self._key()
        return (
            f"RateLimiter(samples_per_insert={spi:g}, min_diff_={min_diff:g}, "
            f"max_diff={max_diff:g}, min_size_to_sample={min_size})"
        )


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
        self._core_options = _native.core().RateLimiterOptions.min_size(
            _arguments.integer("min_size_to_sample", min_size_to_sample)
        )


class SampleToInsertRatio(RateLimiter):
    """Keeps the ratio of samples to inserts near `samples_per_insert`.

    Until the table holds `min_size_to_sample` items it behaves like
    `MinSize`. After that, inserts block when they run ahead of samples and
    samples block when they run ahead of inserts, by more than `error_buffer`
    samples' worth of slack.
    """

    def __init__(
        self,
        samples_per_insert: float,
        min_size_to_sample: int,
        error_buffer: Union[float, Tuple[float, float]],
    ) -> None:
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
            samples_per_insert)` (dm-reverb's rule: it could block inserts or
            samples for good).
        """
        spi = _arguments.number("samples_per_insert", samples_per_insert)
        min_size = _arguments.integer("min_size_to_sample", min_size_to_sample)
        core = _native.core()
        if isinstance(error_buffer, (tuple, list)):
            if len(error_buffer) != 2:
                raise ValueError(
                    f"error_buffer must be a number or a (min_diff, max_diff) pair, "
                    f"got {error_buffer!r}"
                )
            options = core.RateLimiterOptions.sample_to_insert_ratio_window(
                spi,
                min_size,
                _arguments.number("error_buffer[0]", error_buffer[0]),
                _arguments.number("error_buffer[1]", error_buffer[1]),
            )
        else:
            try:
                buffer = _arguments.number("error_buffer", error_buffer)
            except TypeError as e:
                # A ValueError, as dm-reverb raises for it (unpacking a pair).
                raise ValueError(str(e)) from None
            options = core.RateLimiterOptions.sample_to_insert_ratio(spi, min_size, buffer)
        caveat = options.caveat()
        if caveat:
            logging.warning("SampleToInsertRatio: %s", caveat)
        self._core_options = options


def _single_use(size: int) -> Any:
    """The native options of Queue and Stack: each item sampled exactly once.

    Args:
      size: Maximum number of items waiting to be sampled; inserts block
        beyond it, samples block when nothing is waiting.

    Raises:
      ValueError: If `size` is not a positive integer.
    """
    return _native.core().RateLimiterOptions.queue(_arguments.integer("size", size))


# Queue and Stack derive from RateLimiter alone, as dm-reverb's do (their
# class relationships are compared with its).
class Queue(RateLimiter):
    """Makes a table a queue: every item is sampled exactly once, in order.

    Use `Table.queue` rather than this class directly; it pairs the limiter
    with Fifo selectors and `max_times_sampled=1`.
    """

    def __init__(self, size: int) -> None:
        """Creates the limiter.

        Args:
          size: Maximum number of items waiting to be sampled.

        Raises:
          ValueError: If `size` is not a positive integer.
        """
        self._core_options = _single_use(size)


class Stack(RateLimiter):
    """Makes a table a stack: every item is sampled exactly once, newest first.

    Use `Table.stack` rather than this class directly; it pairs the limiter
    with Lifo selectors and `max_times_sampled=1`.
    """

    __init__ = Queue.__init__


def _rebuild(cls: type, key: Tuple[float, int, float, float]) -> RateLimiter:
    limiter = cls.__new__(cls)
    RateLimiter.__init__(limiter, *key)
    return limiter
