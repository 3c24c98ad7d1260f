# SPDX-License-Identifier: Apache-2.0
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

import itertools
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import tree

from reverb_tf import _arguments
from reverb_tf import errors
from reverb_tf import signatures

Path = Tuple[Any, ...]

# Types that are certainly leaves for dm-tree; anything else is asked.
_LEAF_TYPES = frozenset(
    [np.ndarray, int, float, bool, complex, str, bytes]
    + [t for t in np.sctypeDict.values() if isinstance(t, type)]
)


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


def union_structures(old: Any, new: Any, path: Path = ()) -> Any:
    """Merges two structures whose leaves are column indices (None: absent).

    The structure of a writer's history: every field any step had. Used by
    both writers (tf_trajectory_writer.py too).

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
            "value and a nested structure; a field's structure cannot change"
        )
    if isinstance(old, dict):
        if not isinstance(new, dict):
            raise errors.InvalidArgumentError(
                f"append: field '{signatures.column_name(path)}' changed container type"
            )
        merged = type(old)(
            (k, union_structures(v, new.get(k), path + (k,))) for k, v in old.items()
        )
        for k, v in new.items():
            if k not in merged:
                merged[k] = v
        return merged
    if isinstance(old, tuple) and hasattr(old, "_fields"):
        return type(old)(
            *[union_structures(a, b, path + (i,)) for i, (a, b) in enumerate(zip(old, new))]
        )
    if isinstance(old, (list, tuple)):
        return type(old)(
            union_structures(a, b, path + (i,))
            for i, (a, b) in enumerate(itertools.zip_longest(old, new))
        )
    raise errors.InvalidArgumentError(
        f"append: field '{signatures.column_name(path)}' has unsupported container "
        f"type {type(old).__name__}"
    )


_new_object = object.__new__


class _Generation:
    """One history of a writer: replaced when `end_episode` clears it.

    Columns cut from a history remember its generation, which is how
    references from before a clear are told apart. Everything else about the
    cells (which exist, their values, the keep-alive window) is the native
    writer's to know.
    """

    __slots__ = ()


class _HistoryOfColumn:
    """What every writer's `history` leaf knows of its column: path, dtype, shape."""

    __slots__ = ("_core", "_path", "_column", "_type")

    def __init__(self, core: Any, path: Path, column: int) -> None:
        self._core = core
        self._path = path
        self._column = column
        # (dtype, step shape) once the native writer knows it; fixed from then on.
        self._type: Optional[Tuple[np.dtype, Tuple[int, ...]]] = None

    def _column_type(self) -> Optional[Tuple[np.dtype, Tuple[int, ...]]]:
        if self._type is None:
            self._type = self._core.column_type(self._column)
        return self._type

    @property
    def path(self) -> Path:
        """The column's path in the step structure."""
        return self._path

    @property
    def dtype(self) -> Optional[np.dtype]:
        """The column's numpy dtype (`object` for strings); None before its first value."""
        column_type = self._column_type()
        return None if column_type is None else column_type[0]

    @property
    def shape(self) -> Optional[Tuple[int, ...]]:
        """The shape of one step of the column; None before its first value."""
        column_type = self._column_type()
        return None if column_type is None else column_type[1]

    def __len__(self) -> int:
        return self._core.history_length


class _ColumnHistory(_HistoryOfColumn):
    """The recent cells of one column, indexable like a list.

    Index i counts steps since the history began (the writer's creation or
    the last `end_episode(clear_buffers=True)`), across all columns alike;
    negative indices count from the newest step. Cells older than the
    column's keep-alive window, or steps in which the column had no value,
    cannot be referenced. The native writer answers every question about the
    cells; this class only names the column.
    """

    __slots__ = ("_generation",)

    def __init__(self, core: Any, path: Path, column: int, generation: _Generation) -> None:
        super().__init__(core, path, column)
        self._generation = generation

    def __getitem__(self, index: Union[int, slice, Sequence[int]]) -> "TrajectoryColumn":
        try:
            return self._cut(index)
        except IndexError as e:
            if str(e).startswith(_NO_CELL):
                raise _HistoryIndexError(str(e)) from None
            # Past the newest step: a list's words (dm-reverb's), then ours.
            raise IndexError(f"list index out of range: {e}") from None

    def _cut(self, index: Union[int, slice, Sequence[int]]) -> "TrajectoryColumn":
        core, column = self._core, self._column
        if type(index) is int:
            return _make_column(self, (core.history_step(column, index),), True)
        if isinstance(index, slice):
            indices = range(core.history_length)[index]
        elif isinstance(index, (list, tuple, np.ndarray)):
            indices = [int(i) for i in index]
        elif isinstance(index, (int, np.integer)):
            return _make_column(self, (core.history_step(column, int(index)),), True)
        else:
            raise TypeError(
                f"_ColumnHistory indices must be integers or slices, not {type(index)} "
                "(lists of integers are accepted too)"
            )
        return _make_column(self, tuple(core.history_step(column, i) for i in indices), False)

    def __repr__(self) -> str:
        return f"_ColumnHistory(path={self._path!r}, steps={len(self)})"


# The native writer's phrase (dm-reverb's) for a history index with no cell.
_NO_CELL = "TrajectoryColumns cannot contain any None data references"


class _HistoryIndexError(IndexError, ValueError):
    """A negative history index before the history's first step.

    An IndexError, as for a Python list, and a ValueError, which dm-reverb
    raises there (its history holds None before the first step).
    """


# dm-reverb's phrases for expired references; our messages start with them.
_EXPIRED_REF = "Cannot access data from expired WeakCellRef"
_EXPIRED_COLUMN = "Cannot convert TrajectoryColumn with expired data references to numpy array."
_EXPIRED_IN_ITEM = "Column contains expired CellRef."


def _expired_error(phrase: str) -> RuntimeError:
    # A plain RuntimeError, as dm-reverb raises.
    return RuntimeError(
        f"{phrase} The cells left the keep-alive window or were cleared by "
        "end_episode(clear_buffers=True); the writer no longer holds their data"
    )


class WeakCellRef:
    """One cell of a writer's history (dm-reverb's `pybind.WeakCellRef`).

    What iterating a `TrajectoryColumn` yields. The reference does not keep
    the cell referenceable: once the cell leaves the column's keep-alive
    window, or the episode's history is cleared, it is `expired`.
    """

    __slots__ = ("_hist", "_generation", "_step")

    def __init__(self, hist: _ColumnHistory, generation: _Generation, step: int) -> None:
        """Not for direct use: iterate a `TrajectoryColumn` instead."""
        self._hist = hist
        self._generation = generation
        self._step = step

    @property
    def expired(self) -> bool:
        """True once the cell can no longer be referenced by new items."""
        hist = self._hist
        return (
            hist._generation is not self._generation  # pylint: disable=protected-access
            or not hist._core.is_referenceable(hist._column, self._step)
        )  # pylint: disable=protected-access

    @property
    def dtype(self) -> np.dtype:
        """The cell's numpy dtype."""
        return self._hist.dtype

    @property
    def shape(self) -> List[int]:
        """The cell's shape (one step, no time dimension), as a list."""
        return list(self._hist.shape)

    def numpy(self) -> np.ndarray:
        """Returns a copy of the cell's value.

        Raises:
          RuntimeError: If the reference has expired.
        """
        if self.expired:
            raise _expired_error(_EXPIRED_REF + ".")
        hist = self._hist
        # `[0, ...]`: an array even for a scalar cell, as dm-reverb returns.
        return hist._core.read_cells(hist._column, [self._step])[0, ...]  # pylint: disable=protected-access

    def __repr__(self) -> str:
        return f"WeakCellRef(column={signatures.column_name(self._hist.path)!r}, step={self._step})"


class _ColumnCells:
    """What every column cut from a history answers from its steps and history.

    Subclasses hold `_hist` (the column's history), `_steps` (step ids) and
    `_entry` (the native writer's reference; its third field: squeezed).
    """

    __slots__ = ()

    @property
    def is_squeezed(self) -> bool:
        """True if the column holds one step without a time dimension."""
        return self._entry[2]

    def __len__(self) -> int:
        return len(self._steps)

    @property
    def shape(self) -> Tuple[int, ...]:
        """Shape of the column as an item holds it (time dimension first)."""
        shape = self._hist.shape
        return shape if self.is_squeezed else (len(self._steps),) + shape

    @property
    def dtype(self) -> np.dtype:
        """The column's numpy dtype (`object` for strings)."""
        return self._hist.dtype


class TrajectoryColumn(_ColumnCells):
    """Cells of one column: a leaf of the `trajectory` given to `create_item`.

    Usually cut from `TrajectoryWriter.history`: an integer index gives a
    squeezed column (one step, sampled without a time dimension); slices and
    lists give a column with a leading time dimension. It can also be built
    from `WeakCellRef`s, e.g. those of other columns:
    `TrajectoryColumn([*history['obs'][-2:], history['obs'][-1]])`.

    References to cells of more than one of the writer's columns make a
    column that can be inspected (`dtype`, `shape`, `numpy()`) but that
    `create_item` does not accept: the native writer slices an item's column
    out of one of its own columns (docs/compatibility.md).
    """

    # `_refs` is None for a column of one writer column (the common case: the
    # native writer's entry says everything); otherwise it holds the given
    # references and `_hist`, `_generation` and `_entry` are unusable.
    __slots__ = ("_hist", "_generation", "_steps", "_entry", "_refs")

    def __init__(
        self,
        data_references: Sequence[WeakCellRef],
        *,
        squeeze: bool = False,
        path: Optional[Tuple[Union[str, int, slice], ...]] = None,
    ) -> None:
        """Builds a column from references to cells.

        Args:
          data_references: The cells, in time order, as iterating a
            `TrajectoryColumn` yields them.
          squeeze: If True, the column holds its one cell without a time
            dimension (as an integer index of `history` gives).
          path: Where the column sits in a trajectory; only used to name it
            in errors.

        Raises:
          ValueError: If `squeeze` is set and there is not exactly one
            reference, or if a reference is None.
        """
        references = tuple(data_references)
        if squeeze and len(references) != 1:
            raise ValueError(
                "Columns must contain exactly one data reference when squeeze set, "
                f"got {len(references)}"
            )
        if any(reference is None for reference in references):
            raise ValueError(
                "TrajectoryColumns cannot contain any None data references: "
                f"TrajectoryColumn at path {path} got {list(references)}."
            )
        hists = {id(getattr(r, "_hist", None)) for r in references}
        first = references[0] if references else None
        if len(hists) == 1 and type(first) is WeakCellRef:
            generations = {id(r._generation) for r in references}  # pylint: disable=protected-access
            self._hist = first._hist  # pylint: disable=protected-access
            # Cells of two episodes of one history: one of them is cleared,
            # and no generation of the writer will match.
            self._generation = (
                first._generation
                if len(generations) == 1  # pylint: disable=protected-access
                else _Generation()
            )
            self._steps = tuple(r._step for r in references)  # pylint: disable=protected-access
            self._entry = (self._hist._column, list(self._steps), bool(squeeze))  # pylint: disable=protected-access
            self._refs = None
        else:
            self._hist = None
            self._generation = None
            self._steps = tuple(range(len(references)))
            # No steps: what an empty column gives the native writer, which
            # refuses it (the references, if any, are checked first).
            self._entry = (0, [], bool(squeeze))
            self._refs = references

    def __iter__(self) -> Iterator[WeakCellRef]:
        """Yields a `WeakCellRef` per cell, oldest first."""
        if self._refs is not None:
            yield from self._refs
            return
        for step in self._steps:
            yield WeakCellRef(self._hist, self._generation, step)

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
            return self._sub((self._steps[int(index)],), True)
        if isinstance(index, slice):
            return self._sub(self._steps[index], False)
        if isinstance(index, (list, tuple, np.ndarray)):
            return self._sub(tuple(self._steps[int(i)] for i in index), False)
        raise TypeError(
            f"TrajectoryColumn indices must be integers or slices, not {type(index).__name__}"
        )

    def _sub(self, steps: Tuple[int, ...], squeeze: bool) -> "TrajectoryColumn":
        if self._refs is not None:
            return TrajectoryColumn([self._refs[i] for i in steps], squeeze=squeeze)
        column = _make_column(self._hist, steps, squeeze)
        # Cut from this column, so valid exactly as long as this column is.
        column._generation = self._generation
        return column

    @property
    def shape(self) -> Tuple[int, ...]:
        """Shape of the column as an item holds it (time dimension first).

        Raises:
          IndexError: If the column holds no cells.
        """
        if self._refs is None:
            return _ColumnCells.shape.fget(self)
        step_shape = tuple(self._refs[0].shape)
        return step_shape if self.is_squeezed else (len(self._refs),) + step_shape

    @property
    def dtype(self) -> np.dtype:
        """The column's numpy dtype (`object` for strings).

        Raises:
          IndexError: If the column holds no cells.
        """
        if self._refs is None:
            return self._hist.dtype
        return self._refs[0].dtype

    def numpy(self) -> np.ndarray:
        """Returns the referenced values, read from the native writer.

        The writer copied every value when it was appended, so this is what
        was appended even if the caller has since changed its arrays.

        Returns:
          The value itself for a squeezed column, otherwise the values stacked
          along a new leading time dimension.

        Raises:
          RuntimeError: If a cell left the keep-alive window or the history
            was cleared since the column was cut.
          ValueError: If the column holds no cells, or cells of different
            shapes.
        """
        if self._refs is not None:
            if any(reference.expired for reference in self._refs):
                raise _expired_error(_EXPIRED_COLUMN)
            values = [reference.numpy() for reference in self._refs]
            return values[0] if self.is_squeezed else np.stack(values)
        hist = self._hist
        if hist._generation is not self._generation:  # pylint: disable=protected-access
            raise _expired_error(_EXPIRED_COLUMN)
        try:
            values = hist._core.read_cells(hist._column, list(self._steps))  # pylint: disable=protected-access
        except RuntimeError as e:
            if type(e) is not RuntimeError:  # a ReverbError: not about expiry
                raise
            raise RuntimeError(f"{_EXPIRED_COLUMN} {e}") from None
        return values[0, ...] if self.is_squeezed else values

    def __repr__(self) -> str:
        if self._refs is not None:
            return f"TrajectoryColumn({list(self._refs)!r}, squeezed={self.is_squeezed})"
        return (
            f"TrajectoryColumn(path={signatures.column_name(self._hist.path)!r}, "
            f"steps={list(self._steps)}, squeezed={self.is_squeezed})"
        )


def _make_column(hist: _ColumnHistory, steps: Tuple[int, ...], squeeze: bool) -> TrajectoryColumn:
    column = _new_object(TrajectoryColumn)
    column._hist = hist
    column._generation = hist._generation
    column._steps = steps
    # Exactly what _core.TrajectoryWriter.create_item takes for this column.
    column._entry = (hist._column, list(steps), squeeze)
    column._refs = None
    return column


def _check_references(column: TrajectoryColumn) -> None:
    """Raises the error `create_item` gives for a column built from references
    that are not cells of one column of one writer.

    Raises:
      TypeError: If a reference is not a `WeakCellRef`.
      InvalidArgumentError: If the cells differ in dtype or shape (the
        checks dm-reverb's writer makes; a column of no cells is the native
        writer's to refuse as empty).
      RuntimeError: If a cell has expired.
      UnimplementedError: Otherwise: cells of compatible columns, which
        reverb_tf's native writer cannot combine in one item column.
    """
    references = column._refs  # pylint: disable=protected-access
    for reference in references:
        if type(reference) is not WeakCellRef:
            raise TypeError(
                f"a TrajectoryColumn must hold WeakCellRefs, got {type(reference).__name__}"
            )
    if any(reference.expired for reference in references):
        raise errors.InvalidArgumentError(
            f"{_EXPIRED_IN_ITEM} A cell left the keep-alive window or was cleared by "
            "end_episode(clear_buffers=True)"
        )
    dtypes = [reference.dtype for reference in references]
    if len(set(dtypes)) > 1:
        raise errors.InvalidArgumentError(
            f"Column references tensors with different dtypes: {', '.join(str(d) for d in dtypes)}"
        )
    shapes = [tuple(reference.shape) for reference in references]
    if len(set(shapes)) > 1:
        raise errors.InvalidArgumentError(
            "Column references tensors with incompatible shapes: "
            f"{', '.join(str(list(s)) for s in shapes)}"
        )
    raise errors.UnimplementedError(
        "a TrajectoryColumn references cells of several of the writer's columns (or of "
        "several writers); reverb_tf items take each column's cells from one column of "
        "the writer"
    )


def _closed_error() -> errors.FailedPreconditionError:
    # A RuntimeError with dm-reverb's words, as it raises for any use after
    # close() (once the arguments have passed their checks).
    return errors.FailedPreconditionError("TrajectoryWriter::Close has been called.")


class _WriterBase:
    """What plain and batched writers share: structures, columns, flow control.

    The native writer owns the steps, cells, chunks, keep-alive windows and
    the checks on them; a writer object owns only what is Python's: the
    mapping between nested structures and flat columns. Subclasses say which
    native columns a column is (one, or one per environment) and how its
    history is indexed.
    """

    # The leaf type of trajectories given to this writer's item creation.
    _column_type: type = TrajectoryColumn

    def __init__(
        self,
        core_writer: Any,
        get_signature: Optional[Callable[[str], Optional[List[signatures.Column]]]] = None,
    ) -> None:
        """Wraps a native writer.

        Args:
          core_writer: A `_core.TrajectoryWriter`.
          get_signature: Returns a table's flat signature columns (None if the
            table has none); used to check items before they are sent. None
            skips the check (the server still checks).
        """
        self._writer = core_writer
        self._get_signature = get_signature
        # Tables whose signature the native writer was given (or told there
        # is none to check).
        self._signed: set = set()
        # Union of the structures of all steps, leaves = column indices.
        self._structure: Any = None
        # True when _structure is a plain dict of leaves (the fast path).
        self._flat = False
        self._path_to_column: Dict[Path, int] = {}
        self._columns: List[Any] = []
        # configure() calls for columns that do not exist yet.
        self._pending_configs: Dict[Path, Tuple[int, Optional[int]]] = {}
        self._generation = _Generation()
        self._history: Any = None
        self._trajectory_key_order: Dict[Tuple[Any, ...], List[Any]] = {}
        self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise _closed_error()

    # -- what subclasses decide ------------------------------------------------

    def _make_history(self, path: Path, column: int) -> Any:
        """The `history` leaf of a new column."""
        return _ColumnHistory(self._writer, path, column, self._generation)

    # -- properties ----------------------------------------------------------

    @property
    def history(self) -> Any:
        """The recent cells of every column, structured like the steps.

        Leaves support list indexing: `history['obs'][-1]` (one step,
        squeezed), `history['obs'][-3:]`, `history['obs'][[0, 2]]`; the result
        is a column to use in item creation.

        Raises:
          RuntimeError: If `append` has not been called yet.
        """
        if self._history is None:
            if not self._columns:
                raise RuntimeError(
                    "history cannot be accessed before `append` is called at least once."
                )
            columns = self._columns
            self._history = tree.map_structure(lambda c: columns[c], self._structure)
        return self._history

    # -- appending -----------------------------------------------------------

    def _new_column(self, path: Path) -> int:
        column = len(self._columns)
        self._columns.append(self._make_history(path, column))
        self._path_to_column[path] = column
        # Messages name the column by its path as a tuple, as dm-reverb's do.
        self._writer.set_column_name(column, signatures.column_name(path), repr(tuple(path)))
        return column

    def _flatten_general(self, data: Any) -> List[Any]:
        """Flattens a step whose structure is new (or unusual); adds columns."""
        flat = tree.flatten_with_path(data)
        known = self._path_to_column
        added = []
        for path, value in flat:
            if path in known:
                continue
            if value is None and any(p[: len(path)] == path for p in known):
                continue  # A known sub-structure omitted as a whole.
            for other in itertools.chain(known, added):
                if other[: len(path)] == path or path[: len(other)] == other:
                    raise errors.InvalidArgumentError(
                        f"append: field '{signatures.column_name(min(path, other, key=len))}'"
                        " changed between a single value and a nested structure; a "
                        "field's structure cannot change"
                    )
            added.append(path)
        if added:
            for path in added:
                self._new_column(path)
            columns = self._path_to_column
            structure = tree.map_structure_with_path(lambda p, _: columns.get(p), data)
            self._structure = union_structures(self._structure, structure)
            self._flat = type(self._structure) is dict and all(
                type(v) is int for v in self._structure.values()
            )
            self._history = None
        out = [None] * len(self._columns)
        for path, value in flat:
            column = self._path_to_column.get(path)
            if column is not None:
                out[column] = value
        return out

    def _step_columns(self, data: Any) -> List[Any]:
        """The values of `data` by column (None: missing), adding new columns."""
        out = [None] * len(self._columns)
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
            return self._flatten_general(data)
        if self._flat:
            # Only the flat-dict fast path can place a nest in a leaf column;
            # the general path reports the structure change.
            for value in out:
                if value is not None and type(value) not in _LEAF_TYPES and tree.is_nested(value):
                    self._flatten_general(data)
                    raise AssertionError("unreachable: nested value for a leaf column")
        return out

    def _apply_pending_configs(self) -> None:
        for path in [p for p in self._pending_configs if p in self._path_to_column]:
            keep_alive, max_chunk_length = self._pending_configs.pop(path)
            self._writer.configure(self._path_to_column[path], keep_alive, max_chunk_length)

    # -- items ---------------------------------------------------------------

    def _flatten_trajectory(self, trajectory: Any) -> List[Any]:
        column_type = self._column_type
        if type(trajectory) is dict:
            keys = tuple(trajectory)
            order = self._trajectory_key_order.get(keys)
            if order is None:
                order = sorted(keys)
                self._trajectory_key_order[keys] = order
            flat = [trajectory[k] for k in order]
            for value in flat:
                if type(value) is not column_type:
                    return tree.flatten(trajectory)
            return flat
        if type(trajectory) is column_type:
            return [trajectory]
        return tree.flatten(trajectory)

    def _sign(self, table: str) -> None:
        """Gives the native writer `table`'s signature to check items against."""
        signature = None
        if self._get_signature is not None:
            try:
                signature = self._get_signature(table)
            except errors.NotFoundError as e:
                # An item for a table the server lacks is a bad argument of
                # create_item (dm-reverb raises ValueError too).
                raise errors.InvalidArgumentError(
                    f"Unable to create item in table {table!r} since the table could not "
                    f"be found. ({e})"
                ) from None
        self._writer.set_table_signature(
            table,
            None if signature is None else [(c.name, c.dtype, list(c.shape)) for c in signature],
        )
        self._signed.add(table)

    def _reject(self, column: Any) -> None:
        name = self._column_type.__name__
        if type(column) is TrajectoryColumn and column._refs is not None:  # pylint: disable=protected-access
            _check_references(column)
        if type(column) is not self._column_type:
            raise TypeError(
                f"All leaves of `trajectory` must be `{name}` but got "
                f"{type(column).__name__}: {column!r} (cut columns from writer.history)"
            )
        hist = column._hist  # pylint: disable=protected-access
        if 0 <= hist._column < len(self._columns) and self._columns[hist._column] is hist:  # pylint: disable=protected-access
            raise errors.InvalidArgumentError(
                f"{_EXPIRED_IN_ITEM} The trajectory references cells from before "
                "end_episode(clear_buffers=True); cut columns from the current history"
            )
        raise ValueError(
            "trajectory references cells of another writer; cut columns from this writer's history"
        )

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
          ValueError: If `block_until_num_items` < 0 (an
            `InvalidArgumentError`).
          DeadlineExceededError: If the timeout expires first.
          ReverbError: If the native writer fails (e.g. an item was rejected).
        """
        block_until_num_items = _arguments.integer("block_until_num_items", block_until_num_items)
        timeout_s = _arguments.timeout_ms_in_s(timeout_ms)
        if self._closed:
            # The native writer's check of the count, as an open one makes it
            # first.
            self._writer.validate_flush(block_until_num_items)
            raise _closed_error()
        self._writer.flush(block_until_num_items, timeout_s)

    def configure(
        self, path: Path, *, num_keep_alive_refs: int, max_chunk_length: Optional[int]
    ) -> None:
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
        num_keep_alive_refs = _arguments.integer("num_keep_alive_refs", num_keep_alive_refs)
        if max_chunk_length is not None:
            max_chunk_length = _arguments.integer("max_chunk_length", max_chunk_length)
            if max_chunk_length < 1:
                raise ValueError(
                    f"max_chunk_length ({max_chunk_length}) must be None or a positive "
                    f"integer <= num_keep_alive_refs ({num_keep_alive_refs})"
                )
        self._writer.validate_column_options(num_keep_alive_refs, max_chunk_length)
        if self._closed:
            # As dm-reverb: the settings of a closed writer are moot.
            return
        # A path that is not a sequence names no column (dm-reverb keeps it
        # all the same, and it never applies).
        path = tuple(path) if isinstance(path, (tuple, list)) else path
        column = self._path_to_column.get(path)
        if column is None:
            self._pending_configs[path] = (num_keep_alive_refs, max_chunk_length)
            return
        self._writer.configure(column, num_keep_alive_refs, max_chunk_length)

    def close(self) -> None:
        """Closes the writer; items not yet flushed may be dropped.

        Idempotent. Call `flush` (or `end_episode`) first to make sure every
        item has reached the server.
        """
        if not self._closed:
            self._closed = True
            self._writer.close()

    def __enter__(self) -> "_WriterBase":
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


class TrajectoryWriter(_WriterBase):
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

    @property
    def episode_steps(self) -> int:
        """Steps appended since the last `end_episode` (open partial steps excluded)."""
        return self._writer.episode_steps

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
          TypeError: If a value is no array-like value (checked before the
            structure, and also when the writer is closed).
          ReverbError: If the native writer fails (e.g. the connection broke).
        """
        if self._closed:
            # A value of the wrong type is reported first, as it would be
            # by an open writer.
            _arguments.array_like_leaves(tree.flatten(data))
            raise _closed_error()
        num_columns = len(self._columns)
        # The common case (a dict of known fields, plain values) in one native
        # call; anything else is the general path's.
        if self._flat and self._writer.try_append(
            data, self._structure, num_columns, bool(partial_step)
        ):
            return
        try:
            out = self._step_columns(data)
        except errors.InvalidArgumentError:
            # A leaf that is no array where the steps had a structure: its
            # type is what is wrong (a TypeError), not the structure.
            _arguments.array_like_leaves(tree.flatten(data))
            raise
        # The native writer copies the values, checks them against their
        # columns (naming the column) and rejects a column given twice in a
        # partial step, all before it changes anything.
        self._writer.append(out, bool(partial_step))
        if self._pending_configs and num_columns != len(self._columns):
            self._apply_pending_configs()

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
          InvalidArgumentError: (a ValueError) If `priority` is NaN, the
            trajectory is empty or has a column without steps (the native
            writer's checks), or the table has a signature and the
            trajectory does not match it (the message names the column).
          InvalidArgumentError: If the table does not exist (at once when
            signatures are checked, else from flush).
          ReverbError: If the native writer fails.
        """
        # The common case (columns cut from the current history, a signed
        # table, a plain priority) in one native call, which also makes the
        # native writer's checks; anything else, and every error Python
        # reports, is the general path's.
        if not self._closed and self._writer.try_create_item(
            table, priority, trajectory, TrajectoryColumn, self._generation, self._signed
        ):
            return
        table = _arguments.string("table", table)
        # NaN is the native writer's to refuse (validate_item).
        priority = _arguments.number("priority", priority, allow_nan=True)
        flat = self._flatten_trajectory(trajectory)
        generation = self._generation
        entries = []
        for column in flat:
            # A column without steps references no cells, of this history
            # or any other: validate_item refuses it as empty.
            if type(column) is not TrajectoryColumn or (
                column._generation is not generation and column._steps
            ):
                self._reject(column)
            entries.append(column._entry)
        # The native writer's rules on the item (a priority that is not NaN,
        # a column, a step in every column), before a closed writer is
        # reported or the table's signature fetched.
        self._writer.validate_item(priority, entries)
        if self._closed:
            raise _closed_error()
        if table not in self._signed:
            self._sign(table)
        self._writer.create_item(table, priority, entries)

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
        clear_buffers = _arguments.boolean("clear_buffers", clear_buffers)
        timeout_s = _arguments.timeout_ms_in_s(timeout_ms)
        if self._closed:
            raise _closed_error()
        # The native writer refuses an open partial step (FailedPreconditionError).
        try:
            self._writer.end_episode(clear_buffers, timeout_s)
        except errors.DeadlineExceededError:
            self._start_episode(clear_buffers)
            raise
        self._start_episode(clear_buffers)

    def _start_episode(self, clear_buffers: bool) -> None:
        if clear_buffers:
            self._generation = _Generation()
            for column in self._columns:
                column._generation = self._generation
