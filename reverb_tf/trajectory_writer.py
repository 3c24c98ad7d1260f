"""TrajectoryWriter: append steps, then create items that reference them.

Data flows in two stages:

* `append(step)` flattens a (possibly nested) step into columns, one per
  leaf, and hands the row to the native writer (`_core.TrajectoryWriter`), which builds,
  compresses and sends chunks. The caller gets nothing back; instead
  `history` exposes, structured like the steps, the most recent cells of every
  column (the last `num_keep_alive_refs` of them).
* `create_item(table, priority, trajectory)` takes a structure of
  `TrajectoryColumn`s cut from `history` (`history['obs'][-3:]`,
  `history['action'][-1]`, ...) and inserts an item referencing exactly those
  cells. Many items can reference the same cells; the data is sent once.

The structure of the steps may grow: a step may add new fields (their
columns read as missing in earlier steps) and may omit known ones (missing in
that step). A step can be assembled by several `append(..., partial_step=True)`
calls closed by one with `partial_step=False`.

This class is on the hot path of every actor, so it caches what it can: the
flattening plan of the step structure, the `history` structure, and the dict
key order of trajectories.

Thread safety: a TrajectoryWriter must be used by one thread at a time.
"""

import collections
import itertools
from typing import (Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union)

import numpy as np
import tree

from reverb_tf import errors
from reverb_tf import signatures

Path = Tuple[Any, ...]

# Types that are certainly leaves for dm-tree; anything else is asked.
_LEAF_TYPES = frozenset(
    [np.ndarray, int, float, bool, complex, str, bytes]
    + [t for t in np.sctypeDict.values() if isinstance(t, type)])


class _Mismatch(Exception):
    """The step does not have the cached structure: take the general path."""


def _fill(structure: Any, data: Any, out: List[Any]) -> None:
    """Places the leaves of `data` at the column indices `structure` holds.

    `data` may omit fields of `structure` (they stay None: missing in this
    step). Raises _Mismatch if `data` has a field `structure` lacks or a
    different container type; the caller then takes the general path, which
    adds columns.
    """
    kind = type(structure)
    if kind is int:
        if type(data) not in _LEAF_TYPES and data is not None and tree.is_nested(data):
            raise _Mismatch()
        out[structure] = data
    elif data is None:
        # A whole sub-structure omitted in this step: all its columns missing.
        pass
    elif isinstance(structure, dict):
        if type(data) is not kind:
            raise _Mismatch()
        for key, value in data.items():
            try:
                sub = structure[key]
            except KeyError:
                raise _Mismatch() from None
            _fill(sub, value, out)
    elif isinstance(structure, (list, tuple)):
        if type(data) is not kind or len(data) > len(structure):
            raise _Mismatch()
        for sub, item in zip(structure, data):
            _fill(sub, item, out)
    else:
        raise _Mismatch()


def _union(old: Any, new: Any, path: Path = ()) -> Any:
    """Merges two structures whose leaves are column indices.

    Raises:
      InvalidArgumentError: If a field is a leaf in one and a nest in the other.
    """
    if old is None:
        return new
    if new is None:
        return old
    old_leaf, new_leaf = type(old) is int, type(new) is int
    if old_leaf or new_leaf:
        if old_leaf and new_leaf:
            return old
        raise errors.InvalidArgumentError(
            f"append: field '{signatures.column_name(path)}' changed between a single "
            "value and a nested structure; a field's structure cannot change")
    if isinstance(old, dict):
        if not isinstance(new, dict):
            raise errors.InvalidArgumentError(
                f"append: field '{signatures.column_name(path)}' changed container type")
        merged = type(old)((k, _union(v, new.get(k), path + (k,))) for k, v in old.items())
        for k, v in new.items():
            if k not in merged:
                merged[k] = v
        return merged
    if isinstance(old, tuple) and hasattr(old, "_fields"):
        return type(old)(*[_union(a, b, path + (i,))
                           for i, (a, b) in enumerate(zip(old, new))])
    if isinstance(old, (list, tuple)):
        return type(old)(_union(a, b, path + (i,))
                         for i, (a, b) in enumerate(itertools.zip_longest(old, new)))
    raise errors.InvalidArgumentError(
        f"append: field '{signatures.column_name(path)}' has unsupported container "
        f"type {type(old).__name__}")


_new_object = object.__new__


class _ColumnHistory:
    """The most recent cells of one column, indexable like a list.

    Index i counts steps since the episode began (or since the history was
    last cleared), across all columns alike; negative indices count from the
    newest step. Cells older than the column's keep-alive window, or steps in
    which the column had no value, cannot be referenced.

    Each cell is `(step, array)`: the step id the native writer returned and
    the step's value, kept so that `TrajectoryColumn.numpy()` can return it.
    """

    __slots__ = ("_path", "_column", "_cells", "_box", "dtype", "shape")

    def __init__(self, path: Path, column: int, keep_alive: int, box: List[int]) -> None:
        self._path = path
        self._column = column
        # Steps before the column existed read as missing; only the part that
        # fits in the window needs storing.
        self._cells: collections.deque = collections.deque(
            itertools.repeat(None, min(box[0], keep_alive)), maxlen=keep_alive)
        # Shared by all columns of one writer: [number of steps]. Replaced by a
        # new list when the history is cleared, which is how references made
        # before the clear are told apart.
        self._box = box
        self.dtype: Optional[np.dtype] = None
        self.shape: Optional[Tuple[int, ...]] = None

    @property
    def path(self) -> Path:
        """The column's path in the step structure."""
        return self._path

    def __len__(self) -> int:
        return self._box[0]

    def _admit(self, array: np.ndarray) -> np.ndarray:
        """Slow path of `append`: first value, strings, or a mismatch."""
        if array.dtype.kind in "SU":
            array = array.astype(object)
        if self.dtype is None:
            self.dtype, self.shape = array.dtype, array.shape
            return array
        if array.dtype == self.dtype and array.shape == self.shape:
            return array
        raise errors.InvalidArgumentError(
            f"append: column '{signatures.column_name(self._path)}' was "
            f"{signatures.describe(self.dtype, self.shape)} in earlier steps but is "
            f"{signatures.describe(array.dtype, array.shape)} now; every value of a "
            "column must have the same dtype and shape")

    def _cell(self, index: int) -> Tuple[int, np.ndarray]:
        length = self._box[0]
        cells = self._cells
        if index < 0:
            if index < -length:
                raise IndexError(
                    f"history index {index} out of range for {length} steps")
            position = len(cells) + index
        else:
            if index >= length:
                raise IndexError(
                    f"history index {index} out of range for {length} steps")
            position = index - (length - len(cells))
        cell = cells[position] if position >= 0 else None
        if cell is None:
            what = ("is older than the keep-alive window (num_keep_alive_refs="
                    f"{cells.maxlen})" if position < 0 else "has no value in that step")
            raise ValueError(
                f"history['{signatures.column_name(self._path)}'][{index}] cannot be "
                f"referenced: the cell {what}")
        return cell

    def __getitem__(self, index: Union[int, slice, Sequence[int]]) -> "TrajectoryColumn":
        if type(index) is int:
            cells = self._cells
            # Fast path for the common `history[k][-1]`.
            if 0 < -index <= len(cells):
                cell = cells[index]
                if cell is not None:
                    column = _new_object(TrajectoryColumn)
                    column._hist = self
                    column._box = self._box
                    column._cells = (cell,)
                    column._entry = (self._column, [cell[0]], True)
                    return column
            return _make_column(self, (self._cell(index),), True)
        if isinstance(index, slice):
            indices = range(self._box[0])[index]
        elif isinstance(index, (list, tuple, np.ndarray)):
            indices = [int(i) for i in index]
        elif isinstance(index, (int, np.integer)):
            return _make_column(self, (self._cell(int(index)),), True)
        else:
            raise TypeError(
                f"history indices must be integers, slices or lists of integers, not "
                f"{type(index).__name__}")
        return _make_column(self, tuple(self._cell(i) for i in indices), False)

    def __repr__(self) -> str:
        return (f"_ColumnHistory(path={self._path!r}, steps={self._box[0]}, "
                f"keep_alive={self._cells.maxlen})")


class WeakCellRef:
    """One cell of a writer's history (dm-reverb's `pybind.WeakCellRef`).

    What iterating a `TrajectoryColumn` yields. The reference does not keep
    the cell referenceable: once the cell leaves the column's keep-alive
    window, or the episode's history is cleared, it is `expired`.
    """

    __slots__ = ("_hist", "_box", "_cell")

    def __init__(self, hist: "_ColumnHistory", box: List[int],
                 cell: Tuple[int, np.ndarray]) -> None:
        """Not for direct use: iterate a `TrajectoryColumn` instead."""
        self._hist = hist
        self._box = box
        self._cell = cell

    @property
    def expired(self) -> bool:
        """True once the cell can no longer be referenced by new items."""
        return (self._hist._box is not self._box  # pylint: disable=protected-access
                or not any(c is self._cell for c in self._hist._cells))  # pylint: disable=protected-access

    @property
    def dtype(self) -> np.dtype:
        """The cell's numpy dtype."""
        return self._hist.dtype

    @property
    def shape(self) -> List[int]:
        """The cell's shape (one step, no time dimension), as a list."""
        return list(self._hist.shape)

    def numpy(self) -> np.ndarray:
        """Returns a copy of the cell's value."""
        return self._cell[1].copy()

    def __repr__(self) -> str:
        return (f"WeakCellRef(column={signatures.column_name(self._hist.path)!r}, "
                f"step={self._cell[0]})")


class TrajectoryColumn:
    """Cells of one column, cut from `TrajectoryWriter.history`.

    A leaf of the `trajectory` passed to `create_item`. An integer index gives
    a squeezed column (one step, sampled without a time dimension); slices
    and lists give a column with a leading time dimension.
    """

    __slots__ = ("_hist", "_box", "_cells", "_entry")

    def __init__(self) -> None:
        """Not for direct use: index `TrajectoryWriter.history` instead.

        Raises:
          TypeError: Always.
        """
        raise TypeError("TrajectoryColumns are made by indexing TrajectoryWriter.history")

    @property
    def is_squeezed(self) -> bool:
        """True if the column holds one step without a time dimension."""
        return self._entry[2]

    def __len__(self) -> int:
        return len(self._cells)

    def __iter__(self) -> Iterator[WeakCellRef]:
        """Yields a `WeakCellRef` per cell, oldest first."""
        for cell in self._cells:
            yield WeakCellRef(self._hist, self._box, cell)

    def __getitem__(self, index: Union[int, slice, Sequence[int]]) -> "TrajectoryColumn":
        """Selects some of the column's cells.

        Args:
          index: An int (gives a squeezed column), a slice or a list of ints.

        Returns:
          A new `TrajectoryColumn`.

        Raises:
          TypeError: For other index types.
          IndexError: For indices out of range.
        """
        if isinstance(index, (int, np.integer)):
            return self._sub((self._cells[int(index)],), True)
        if isinstance(index, slice):
            return self._sub(self._cells[index], False)
        if isinstance(index, (list, tuple, np.ndarray)):
            return self._sub(tuple(self._cells[int(i)] for i in index), False)
        raise TypeError(
            f"TrajectoryColumn indices must be integers, slices or lists of integers, "
            f"not {type(index).__name__}")

    def _sub(self, cells: Tuple[Tuple[int, np.ndarray], ...], squeeze: bool
             ) -> "TrajectoryColumn":
        column = _make_column(self._hist, cells, squeeze)
        # Cut from this column, so valid exactly as long as this column is.
        column._box = self._box
        return column

    @property
    def shape(self) -> Tuple[int, ...]:
        """Shape of the column as an item holds it (time dimension first)."""
        shape = self._hist.shape
        return shape if self.is_squeezed else (len(self._cells),) + shape

    @property
    def dtype(self) -> np.dtype:
        """The column's numpy dtype (`object` for strings)."""
        return self._hist.dtype

    def numpy(self) -> np.ndarray:
        """Returns the referenced values.

        The writer keeps its own copy of every value it appended, so this is
        what was appended even if the caller has since changed its arrays.

        Returns:
          The value itself for a squeezed column, otherwise the values stacked
          along a new leading time dimension.
        """
        if self.is_squeezed:
            return self._cells[0][1].copy()
        if not self._cells:
            return np.zeros((0,) + self._hist.shape, self._hist.dtype)
        return np.stack([cell[1] for cell in self._cells])

    def __repr__(self) -> str:
        return (f"TrajectoryColumn(path={signatures.column_name(self._hist.path)!r}, "
                f"steps={self._entry[1]}, squeezed={self.is_squeezed})")


def _make_column(hist: _ColumnHistory, cells: Tuple[Tuple[int, np.ndarray], ...],
                 squeeze: bool) -> TrajectoryColumn:
    column = _new_object(TrajectoryColumn)
    column._hist = hist
    column._box = hist._box
    column._cells = cells
    # Exactly what _core.TrajectoryWriter.create_item takes for this column.
    column._entry = (hist._column, [cell[0] for cell in cells], squeeze)
    return column


def _closed_error() -> errors.FailedPreconditionError:
    # A RuntimeError, as dm-reverb raises for any use after close().
    return errors.FailedPreconditionError("the TrajectoryWriter is closed")


class TrajectoryWriter:
    """Writes steps to a server and inserts items that reference them.

    Use `Client.trajectory_writer` to create one. Example:

        with client.trajectory_writer(num_keep_alive_refs=3) as writer:
          for step in episode:
            writer.append({'obs': step.obs, 'action': step.action})
            if writer.episode_steps >= 3:
              writer.create_item('replay', priority=1.0, trajectory={
                  'obs': writer.history['obs'][-3:],
                  'action': writer.history['action'][-1],
              })
          writer.end_episode()
    """

    def __init__(self,
                 core_writer: Any,
                 num_keep_alive_refs: int,
                 get_signature: Optional[Callable[[str], Optional[List[signatures.Column]]]] = None
                 ) -> None:
        """Wraps a native writer. Use `Client.trajectory_writer` instead.

        Args:
          core_writer: A `_core.TrajectoryWriter`.
          num_keep_alive_refs: Default keep-alive window of every column.
          get_signature: Returns a table's flat signature columns (None if the
            table has none); used to check items before they are sent. None
            skips the check (the server still checks).
        """
        self._writer = core_writer
        self._keep_alive = num_keep_alive_refs
        self._get_signature = get_signature
        # table -> (per-position sets of column keys known to fit, signature).
        self._checks: Dict[str, Tuple[Optional[List[set]], Any]] = {}
        # Union of the structures of all steps, leaves = column indices.
        self._structure: Any = None
        # True when _structure is a plain dict of leaves (the fast path).
        self._flat = False
        self._path_to_column: Dict[Path, int] = {}
        self._columns: List[_ColumnHistory] = []
        self._pending_configs: Dict[Path, Tuple[int, Optional[int]]] = {}
        self._box = [0]
        self._history: Any = None
        self._step_open = False
        self._episode_steps = 0
        self._trajectory_key_order: Dict[Tuple[Any, ...], List[Any]] = {}
        self._closed = False

    # -- properties ----------------------------------------------------------

    @property
    def history(self) -> Any:
        """The recent cells of every column, structured like the steps.

        Leaves support list indexing: `history['obs'][-1]` (one step,
        squeezed), `history['obs'][-3:]`, `history['obs'][[0, 2]]`; the result
        is a `TrajectoryColumn` to use in `create_item`.

        Raises:
          RuntimeError: If `append` has not been called yet.
        """
        if self._history is None:
            if not self._columns:
                raise RuntimeError(
                    "history cannot be accessed before append is called at least once")
            columns = self._columns
            self._history = tree.map_structure(lambda c: columns[c], self._structure)
        return self._history

    @property
    def episode_steps(self) -> int:
        """Steps appended since the last `end_episode` (open partial steps excluded)."""
        return self._episode_steps

    # -- appending -----------------------------------------------------------

    def _new_column(self, path: Path) -> int:
        column = len(self._columns)
        keep_alive = self._keep_alive
        config = self._pending_configs.get(path)
        if config is not None:
            keep_alive = config[0]
        self._columns.append(_ColumnHistory(path, column, keep_alive, self._box))
        self._path_to_column[path] = column
        return column

    def _flatten_general(self, data: Any) -> List[Any]:
        """Flattens a step whose structure is new (or unusual); adds columns."""
        flat = tree.flatten_with_path(data)
        known = self._path_to_column
        added = []
        for path, value in flat:
            if path in known:
                continue
            if value is None and any(p[:len(path)] == path for p in known):
                continue  # A known sub-structure omitted as a whole.
            for other in itertools.chain(known, added):
                if other[:len(path)] == path or path[:len(other)] == other:
                    raise errors.InvalidArgumentError(
                        f"append: field '{signatures.column_name(min(path, other, key=len))}'"
                        " changed between a single value and a nested structure; a "
                        "field's structure cannot change")
            added.append(path)
        if added:
            for path in added:
                self._new_column(path)
            columns = self._path_to_column
            structure = tree.map_structure_with_path(
                lambda p, _: columns.get(p), data)
            self._structure = _union(self._structure, structure)
            self._flat = type(self._structure) is dict and all(
                type(v) is int for v in self._structure.values())
            self._history = None
        out = [None] * len(self._columns)
        for path, value in flat:
            column = self._path_to_column.get(path)
            if column is not None:
                out[column] = value
        return out

    def append(self, data: Any, partial_step: bool = False) -> None:
        """Appends one step (or part of one), column by column.

        New fields create new columns (missing in earlier steps); fields
        absent from `data` (or None) are missing in this step. Each column's
        dtype and shape are fixed by its first value. The writer keeps its own
        copy of every value, so the caller may reuse its arrays.

        Args:
          data: The step: a leaf or a nested structure of array-likes.
          partial_step: If True, the step stays open and the next `append`
            adds to the same step (its cells are referenceable at once); the
            last `append` of the step passes False. A column may be given only
            once per step.

        Raises:
          InvalidArgumentError: (a ValueError) If a value's dtype or shape
            differs from the column's earlier values, if a column is given
            twice in one step, or if a field switches between value and
            structure.
          ReverbError: If the native writer fails (e.g. the connection broke).
        """
        if self._closed:
            raise _closed_error()
        columns = self._columns
        num_columns = len(columns)
        out = [None] * num_columns
        structure = self._structure
        try:
            if type(structure) is dict and type(data) is dict and self._flat:
                for key, value in data.items():
                    out[structure[key]] = value
            elif structure is None:
                raise _Mismatch()
            else:
                _fill(structure, data, out)
        except (KeyError, _Mismatch):
            out = self._flatten_general(data)
            columns = self._columns

        for i, value in enumerate(out):
            if value is None:
                continue
            kind = type(value)
            if kind is np.ndarray:
                array = value.copy()
            elif kind in _LEAF_TYPES or not tree.is_nested(value):
                array = np.array(value)
            else:
                # Only the flat-dict fast path lets a nested value get here;
                # the general path reports the structure change.
                self._flatten_general(data)
                raise AssertionError("unreachable: nested value for a leaf column")
            column = columns[i]
            if array.dtype is not column.dtype or array.shape != column.shape:
                array = column._admit(array)
            out[i] = array

        if not (partial_step or self._step_open):
            step = self._writer.append(out)
            self._box[0] += 1
            for column, array in zip(columns, out):
                column._cells.append(None if array is None else (step, array))
            self._episode_steps += 1
        else:
            self._append_partial(columns, out, bool(partial_step))

        if self._pending_configs and num_columns != len(columns):
            self._apply_pending_configs()

    def _append_partial(self, columns: List[_ColumnHistory], out: List[Any],
                        partial_step: bool) -> None:
        if self._step_open:
            for column, array in zip(columns, out):
                if array is not None and column._cells and column._cells[-1] is not None:
                    raise errors.InvalidArgumentError(
                        f"append: column '{signatures.column_name(column.path)}' was "
                        "already given in the open (partial) step; omit it or set it to None")
        # Needs the native writer's partial-step support (see
        # docs/core_module_api.md): the cells of an open step must be
        # referenceable before the step is complete.
        step = self._writer.append(out, partial_step)
        if self._step_open:
            for column, array in zip(columns, out):
                if array is not None:
                    column._cells[-1] = (step, array)
        else:
            self._box[0] += 1
            for column, array in zip(columns, out):
                column._cells.append(None if array is None else (step, array))
        self._step_open = partial_step
        if not partial_step:
            self._episode_steps += 1

    def _apply_pending_configs(self) -> None:
        for path in [p for p in self._pending_configs if p in self._path_to_column]:
            keep_alive, max_chunk_length = self._pending_configs.pop(path)
            self._writer.configure(self._path_to_column[path], keep_alive, max_chunk_length)

    # -- items ---------------------------------------------------------------

    def _flatten_trajectory(self, trajectory: Any) -> List[Any]:
        if type(trajectory) is dict:
            keys = tuple(trajectory)
            order = self._trajectory_key_order.get(keys)
            if order is None:
                order = sorted(keys)
                self._trajectory_key_order[keys] = order
            flat = [trajectory[k] for k in order]
            for value in flat:
                if type(value) is not TrajectoryColumn:
                    return tree.flatten(trajectory)
            return flat
        if type(trajectory) is TrajectoryColumn:
            return [trajectory]
        return tree.flatten(trajectory)

    def _checks_for(self, table: str) -> Optional[List[set]]:
        """Per trajectory position, the column keys known to fit `table`.

        None when items for `table` are not checked (no signature, or the
        writer was created without signature checks).
        """
        if self._get_signature is None:
            checks = None
        else:
            try:
                expected = self._get_signature(table)
            except errors.NotFoundError as e:
                # An item for a table the server lacks is a bad argument of
                # create_item (dm-reverb raises ValueError too).
                raise errors.InvalidArgumentError(str(e)) from None
            checks = None if expected is None else [set() for _ in expected]
        self._checks[table] = (checks, None if checks is None else expected)
        return checks

    def create_item(self, table: str, priority: float, trajectory: Any) -> None:
        """Inserts an item into `table` that references `trajectory`'s cells.

        Does not block: the native writer sends the item (and any data it
        needs) in the background, and the table's rate limiter applies on the
        server. Use `flush` to bound how far the writer runs ahead.

        Args:
          table: Name of the table.
          priority: The item's priority.
          trajectory: A structure of `TrajectoryColumn`s (from `history`);
            flattened (`tree.flatten` order) into the item's columns.

        Raises:
          TypeError: If a leaf of `trajectory` is not a `TrajectoryColumn`.
          ValueError: If a column comes from another writer or from before
            `end_episode(clear_buffers=True)`.
          InvalidArgumentError: (a ValueError) If the table has a signature
            and the trajectory does not match it (the message names the
            column).
          InvalidArgumentError: If the table does not exist (at once when
            signatures are checked, else from flush).
          ReverbError: If the native writer fails.
        """
        if self._closed:
            raise _closed_error()
        flat = self._flatten_trajectory(trajectory)
        box = self._box
        cached = self._checks.get(table)
        checks = cached[0] if cached is not None else self._checks_for(table)
        entries = []
        if checks is None:
            for column in flat:
                if type(column) is not TrajectoryColumn or column._box is not box:
                    self._reject(column)
                entries.append(column._entry)
        else:
            if len(flat) != len(checks):
                self._check_signature(table, flat, trajectory)
            for column, known in zip(flat, checks):
                if type(column) is not TrajectoryColumn or column._box is not box:
                    self._reject(column)
                entry = column._entry
                # Squeezed: the column index; else the column and its length.
                key = entry[0] if entry[2] else (entry[0], len(entry[1]))
                if key not in known:
                    self._check_signature(table, flat, trajectory)
                    known.add(key)
                entries.append(entry)
        self._writer.create_item(table, float(priority), entries)

    def _reject(self, column: Any) -> None:
        if type(column) is not TrajectoryColumn:
            raise TypeError(
                "every leaf of trajectory must be a TrajectoryColumn (cut from "
                f"writer.history), got {type(column).__name__}: {column!r}")
        raise ValueError(
            "trajectory references cells of another writer or from before "
            "end_episode(clear_buffers=True); cut columns from this writer's "
            "current history")

    def _check_signature(self, table: str, flat: List[Any], trajectory: Any) -> None:
        """Raises unless every column of `flat` fits the table's signature."""
        expected = self._checks[table][1]
        actual = []
        for column in flat:
            if type(column) is not TrajectoryColumn:
                self._reject(column)
            actual.append((column.dtype, column.shape))
        paths = [signatures.column_name(p) for p, _ in tree.flatten_with_path(trajectory)]
        signatures.check_columns(actual, expected,
                                 context=f"create_item for table '{table}'", paths=paths)

    # -- flow control --------------------------------------------------------

    def flush(self, block_until_num_items: int = 0, timeout_ms: Optional[int] = None) -> None:
        """Blocks until at most `block_until_num_items` items are unconfirmed.

        Items whose data is still in open chunks are sent first, then the call
        waits for the server to confirm them (which the table's rate limiter
        may delay).

        Args:
          block_until_num_items: How many created items may remain
            unconfirmed when the call returns.
          timeout_ms: Maximum time to wait, in milliseconds; None waits
            forever. The items are still sent after a timeout.

        Raises:
          ValueError: If `block_until_num_items` < 0.
          DeadlineExceededError: If the timeout expires first.
          ReverbError: If the native writer fails (e.g. an item was rejected).
        """
        if self._closed:
            raise _closed_error()
        if block_until_num_items < 0:
            raise ValueError(
                f"block_until_num_items must be >= 0, got {block_until_num_items}")
        self._writer.flush(int(block_until_num_items),
                           None if timeout_ms is None else timeout_ms / 1000.0)

    def end_episode(self, clear_buffers: bool = True, timeout_ms: Optional[int] = None) -> None:
        """Flushes all items and starts a new episode.

        Args:
          clear_buffers: Whether `history` is emptied. Keep it (False) only for
            trajectories that span episodes.
          timeout_ms: Maximum time to wait for the flush, in milliseconds; None
            waits forever. On a timeout the new episode has begun all the same
            and the items are still sent.

        Raises:
          FailedPreconditionError: If a partial step is still open.
          DeadlineExceededError: If the timeout expires first.
          ReverbError: If the native writer fails.
        """
        if self._closed:
            raise _closed_error()
        if self._step_open:
            raise errors.FailedPreconditionError(
                "end_episode called while a partial step is open; complete it with "
                "append(..., partial_step=False) first")
        try:
            self._writer.end_episode(bool(clear_buffers),
                                     None if timeout_ms is None else timeout_ms / 1000.0)
        except errors.DeadlineExceededError:
            self._start_episode(clear_buffers)
            raise
        self._start_episode(clear_buffers)

    def _start_episode(self, clear_buffers: bool) -> None:
        self._episode_steps = 0
        if clear_buffers:
            self._box = [0]
            for column in self._columns:
                column._box = self._box
                column._cells.clear()
            self._history = None

    def configure(self, path: Path, *, num_keep_alive_refs: int,
                  max_chunk_length: Optional[int]) -> None:
        """Overrides the chunking and keep-alive window of one column.

        Args:
          path: The column's path in the step structure, as
            `tree.flatten_with_path` gives it, e.g. `('observation',)`. The
            column may not exist yet; the settings then apply when it appears.
          num_keep_alive_refs: How many of the column's most recent cells stay
            referenceable.
          max_chunk_length: Maximum steps per chunk; None lets the writer
            decide.

        Raises:
          ValueError: If `num_keep_alive_refs` < 1 or `max_chunk_length` is
            not None and not in [1, num_keep_alive_refs].
        """
        if self._closed:
            raise _closed_error()
        if num_keep_alive_refs < 1:
            raise ValueError(
                f"num_keep_alive_refs ({num_keep_alive_refs}) must be a positive integer")
        if max_chunk_length is not None and not 1 <= max_chunk_length <= num_keep_alive_refs:
            raise ValueError(
                f"max_chunk_length ({max_chunk_length}) must be None or a positive "
                f"integer <= num_keep_alive_refs ({num_keep_alive_refs})")
        path = tuple(path)
        column = self._path_to_column.get(path)
        if column is None:
            self._pending_configs[path] = (num_keep_alive_refs, max_chunk_length)
            return
        self._writer.configure(column, num_keep_alive_refs, max_chunk_length)
        hist = self._columns[column]
        hist._cells = collections.deque(hist._cells, maxlen=num_keep_alive_refs)

    def close(self) -> None:
        """Closes the writer; items not yet flushed may be dropped.

        Idempotent. Call `flush` or `end_episode` first to make sure every
        item has reached the server.
        """
        if not self._closed:
            self._closed = True
            self._writer.close()

    def __enter__(self) -> "TrajectoryWriter":
        return self

    def __exit__(self, exc_type: Any, exc_value: Any, exc_traceback: Any) -> None:
        # A ReverbError means the writer (or server) is broken; flushing
        # would only raise again and hide the original error. Either way the
        # stream (and its two native threads) ends with the block.
        try:
            if exc_type is None or not issubclass(exc_type, errors.ReverbError):
                self.flush()
        finally:
            self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # pylint: disable=broad-except
            # Errors cannot propagate out of garbage collection.
            pass
