# SPDX-License-Identifier: Apache-2.0
"""Item selectors: how a table picks the item to sample or to evict.

A `Table` takes two selectors: the `sampler` decides which item a sample
returns, the `remover` which item is evicted when an insert finds the table
full. These classes only describe the strategy; the native core implements
them and names the kinds (`_core.SelectorKind`); `_core_options` is the
`_core.SelectorOptions` a table hands it.

Also importable as `reverb_tf.selectors`, as in dm-reverb.
"""

import functools
from typing import Any, Dict, Tuple

from reverb_tf import _arguments
from reverb_tf import _native


class ItemSelector:
    """Base class of the item selection strategies.

    Attributes:
      _core_options: The `_core.SelectorOptions` (kind and priority
        exponent; the exponent only matters for `Prioritized`).
    """

    _kind: str = ""

    def __init__(self) -> None:
        """Creates a selector without parameters.

        Raises:
          TypeError: If called on the base class itself.
        """
        if not self._kind:
            raise TypeError("ItemSelector is abstract: use one of its subclasses")
        self._set_exponent(1.0)

    def _set_exponent(self, exponent: float) -> None:
        core = _native.core()
        self._core_options = core.SelectorOptions(getattr(core.SelectorKind, self._kind), exponent)

    def _key(self) -> Tuple[str, float]:
        return (self._kind, self._core_options.priority_exponent)

    @property
    def kind(self) -> str:
        """The strategy's name as the core knows it, e.g. "fifo"."""
        return self._kind

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ItemSelector):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __reduce__(self) -> Any:
        # Picklable (to hand tables to other processes, e.g. Ray actors):
        # rebuilt from the kind's class and the exponent.
        return _rebuild, (type(self), self._core_options.priority_exponent)

    def __repr__(self) -> str:
        # dm-reverb's native selectors print their class name (and parameters).
        return type(self).__name__


def _rebuild(cls: type, exponent: float) -> ItemSelector:
    selector = cls.__new__(cls)
    selector._set_exponent(exponent)  # pylint: disable=protected-access
    return selector


class UniformSelector(ItemSelector):
    """Samples every item with the same probability (O(1))."""

    _kind = "uniform"


class PrioritizedSelector(ItemSelector):
    """Samples items with probability proportional to priority**exponent."""

    _kind = "prioritized"

    def __init__(self, priority_exponent: float) -> None:
        """Creates a prioritized selector.

        Args:
          priority_exponent: Exponent applied to every priority; 0 samples
            uniformly, 1 proportionally to the priority.

        Raises:
          ValueError: If `priority_exponent` is not a finite number >= 0.
        """
        super().__init__()
        # NaN passes the conversion: the core refuses it with the other bad
        # values, in one message.
        self._set_exponent(
            _arguments.number("priority_exponent", priority_exponent, allow_nan=True)
        )

    @property
    def priority_exponent(self) -> float:
        """The exponent applied to priorities."""
        return self._core_options.priority_exponent

    def __repr__(self) -> str:
        return f"PrioritizedSelector(priority_exponent={self.priority_exponent:g})"


class FifoSelector(ItemSelector):
    """Selects the oldest item (first in, first out)."""

    _kind = "fifo"


class LifoSelector(ItemSelector):
    """Selects the newest item (last in, first out)."""

    _kind = "lifo"


class HeapSelector(ItemSelector):
    """Selects the item of lowest (`min_heap=True`) or highest priority.

    Ties go to the oldest item. `MinHeap()` and `MaxHeap()` make one, as
    dm-reverb's do.
    """

    def __init__(self, min_heap: bool) -> None:
        """Creates the selector.

        Args:
          min_heap: True selects the lowest priority, False the highest.
        """
        self._kind = "min_heap" if min_heap else "max_heap"
        super().__init__()

    def __repr__(self) -> str:
        return f"HeapSelector(sign={1 if self._kind == 'min_heap' else -1})"

    def __reduce__(self) -> Any:
        return HeapSelector, (self._kind == "min_heap",)


# The names programs use. dm-reverb's selector classes are its native
# classes (`reverb.selectors.Uniform is reverb.pybind.UniformSelector`), and
# its MinHeap and MaxHeap are partial applications of HeapSelector: what
# they make is a HeapSelector, and `type(...)`, `isinstance` and `repr` say
# so here too.
Uniform = UniformSelector
Prioritized = PrioritizedSelector
Fifo = FifoSelector
Lifo = LifoSelector
MinHeap = functools.partial(HeapSelector, True)
MinHeap.__doc__ = "Selects the item with the lowest priority (oldest first on ties)."
MaxHeap = functools.partial(HeapSelector, False)
MaxHeap.__doc__ = "Selects the item with the highest priority (oldest first on ties)."


# The kinds of dm-reverb's KeyDistributionOptions whose option is a bool,
# by the field's name.
_FLAG_KINDS: Dict[str, type] = {"fifo": Fifo, "lifo": Lifo, "uniform": Uniform}


def from_options_proto(options: Any) -> ItemSelector:
    """The selector a `schema_pb2.KeyDistributionOptions` message describes.

    The inverse of what a table's info reports (`TableInfo.sampler_options`,
    which the native core fills in).

    Args:
      options: The message.

    Returns:
      The selector.

    Raises:
      ValueError: If the chosen boolean option (fifo, lifo, uniform) is false.
      NotImplementedError: If no distribution is set.
    """
    kind = options.WhichOneof("distribution")
    if kind in _FLAG_KINDS:
        if not getattr(options, kind):
            raise ValueError(f"selector option {kind!r} is chosen but set to false")
        return _FLAG_KINDS[kind]()
    if kind == "heap":
        return MinHeap() if options.heap.min_heap else MaxHeap()
    if kind == "prioritized":
        return Prioritized(options.prioritized.priority_exponent)
    raise NotImplementedError(f"distribution={kind}")


# What describe() prints for the selectors without parameters.
_SHORT_NAMES = {
    "uniform": "Uniform",
    "fifo": "Fifo",
    "lifo": "Lifo",
    "min_heap": "MinHeap",
    "max_heap": "MaxHeap",
}


def describe(options: Any) -> str:
    """A short name for a `KeyDistributionOptions` message, e.g. "Fifo" or
    "Prioritized(0.8)" (what `reverb_tf` command-line tools print).

    Args:
      options: The message.

    Returns:
      The name; an unset or unknown distribution prints as its field name.
    """
    try:
        selector = from_options_proto(options)
    except (ValueError, NotImplementedError):
        return str(options.WhichOneof("distribution"))
    if isinstance(selector, Prioritized):
        return f"Prioritized({selector.priority_exponent:g})"
    return _SHORT_NAMES[selector.kind]
