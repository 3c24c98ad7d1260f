"""Item selectors: how a table picks the item to sample or to evict.

A `Table` takes two selectors: the `sampler` decides which item a sample
returns, the `remover` which item is evicted when an insert finds the table
full. These classes only describe the strategy; the native core implements
them (`_core_options` is what it receives).

Also importable as `reverb_tf.selectors`, as in dm-reverb.
"""

import math
from typing import Tuple


class ItemSelector:
    """Base class of the item selection strategies.

    Attributes:
      _core_options: `(kind, priority_exponent)` as `_core.TableConfig`
        expects; the exponent only matters for `Prioritized`.
    """

    _kind: str = ""

    def __init__(self) -> None:
        """Creates a selector without parameters.

        Raises:
          TypeError: If called on the base class itself.
        """
        if not self._kind:
            raise TypeError("ItemSelector is abstract: use one of its subclasses")
        self._core_options: Tuple[str, float] = (self._kind, 1.0)

    @property
    def kind(self) -> str:
        """The strategy's name as the core knows it, e.g. "fifo"."""
        return self._kind

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ItemSelector):
            return NotImplemented
        return self._core_options == other._core_options

    def __hash__(self) -> int:
        return hash(self._core_options)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Uniform(ItemSelector):
    """Samples every item with the same probability (O(1))."""

    _kind = "uniform"


class Prioritized(ItemSelector):
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
        try:
            exponent = float(priority_exponent)
        except (TypeError, ValueError):
            raise ValueError(
                f"priority_exponent must be a number, got {priority_exponent!r}"
            ) from None
        if not math.isfinite(exponent) or exponent < 0:
            raise ValueError(
                f"priority_exponent must be finite and >= 0, got {priority_exponent!r}")
        self._core_options = (self._kind, exponent)

    @property
    def priority_exponent(self) -> float:
        """The exponent applied to priorities."""
        return self._core_options[1]

    def __repr__(self) -> str:
        return f"Prioritized(priority_exponent={self.priority_exponent!r})"


class Fifo(ItemSelector):
    """Selects the oldest item (first in, first out)."""

    _kind = "fifo"


class Lifo(ItemSelector):
    """Selects the newest item (last in, first out)."""

    _kind = "lifo"


class MinHeap(ItemSelector):
    """Selects the item with the lowest priority (oldest first on ties)."""

    _kind = "min_heap"


class MaxHeap(ItemSelector):
    """Selects the item with the highest priority (oldest first on ties)."""

    _kind = "max_heap"


_BY_KIND = {cls._kind: cls for cls in (Uniform, Prioritized, Fifo, Lifo, MinHeap, MaxHeap)}


class SelectorOptions:
    """A table's selector as `Client.server_info` reports it.

    dm-reverb reports selectors as a `KeyDistributionOptions` proto; this class
    answers the same attribute questions (`.uniform`, `.fifo`, `.lifo`,
    `.prioritized.priority_exponent`, `.heap.min_heap`, `.is_deterministic`)
    and can rebuild the selector object.
    """

    class _Prioritized:
        def __init__(self, priority_exponent: float) -> None:
            self.priority_exponent = priority_exponent

    class _Heap:
        def __init__(self, min_heap: bool) -> None:
            self.min_heap = min_heap

    def __init__(self, kind: str, priority_exponent: float) -> None:
        """Wraps the core's `(kind, priority_exponent)` pair.

        Args:
          kind: One of "uniform", "prioritized", "fifo", "lifo", "min_heap",
            "max_heap".
          priority_exponent: The exponent (only meaningful for "prioritized").

        Raises:
          ValueError: If `kind` is unknown.
        """
        if kind not in _BY_KIND:
            raise ValueError(f"unknown selector kind {kind!r}")
        self.kind = kind
        self.priority_exponent = float(priority_exponent)

    @property
    def uniform(self) -> bool:
        """True for the uniform selector."""
        return self.kind == "uniform"

    @property
    def fifo(self) -> bool:
        """True for the fifo selector."""
        return self.kind == "fifo"

    @property
    def lifo(self) -> bool:
        """True for the lifo selector."""
        return self.kind == "lifo"

    @property
    def prioritized(self) -> "SelectorOptions._Prioritized":
        """Holds `priority_exponent` (0.0 unless the selector is prioritized)."""
        return self._Prioritized(
            self.priority_exponent if self.kind == "prioritized" else 0.0)

    @property
    def heap(self) -> "SelectorOptions._Heap":
        """Holds `min_heap` (True only for the min-heap selector)."""
        return self._Heap(self.kind == "min_heap")

    @property
    def is_deterministic(self) -> bool:
        """True when the choice does not involve randomness."""
        return self.kind not in ("uniform", "prioritized")

    def to_selector(self) -> ItemSelector:
        """Returns the `ItemSelector` these options describe."""
        if self.kind == "prioritized":
            return Prioritized(self.priority_exponent)
        return _BY_KIND[self.kind]()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ItemSelector):
            other = SelectorOptions(*other._core_options)
        if not isinstance(other, SelectorOptions):
            return NotImplemented
        return self.to_selector() == other.to_selector()

    def __hash__(self) -> int:
        return hash(self.to_selector())

    def __repr__(self) -> str:
        return f"SelectorOptions({self.to_selector()!r})"
