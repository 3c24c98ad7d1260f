# SPDX-License-Identifier: Apache-2.0
"""A trajectory writer whose calls are TensorFlow ops, for graph-mode actors.

`TFTrajectoryWriter` reads like `Client.trajectory_writer`'s writer, but
`append`, `create_item`, `flush` and `end_episode` are ops on a writer
resource, so a `tf.function` actor (a `tf.while_loop` over an environment
written in TensorFlow, a compiled driver) writes overlapping trajectories
without leaving the graph. Behind the ops is the same native writer the
Python writer uses: the same chunks shared between items, the same checks
against the table's signature, the same errors (as TensorFlow errors)::

    writer = reverb_tf.TFTrajectoryWriter("localhost:8000", num_keep_alive_refs=3)

    @tf.function
    def act(observation, action):
        writer.append({"observation": observation, "action": action})
        writer.create_item(
            "replay", priority=1.0,
            trajectory={
                "observation": writer.history["observation"][-3:],
                "action": writer.history["action"][-3:],
            },
        )

Items name history entries by position, as Python slices do (`[-3:]` is
the last three steps, `[-1]` the newest step without a time dimension), and
the positions resolve when the op runs. The writer belongs to the process
that made it; one writer per actor (per replica under `tf.distribute`).
"""

import uuid
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import tree

from reverb_tf import _address
from reverb_tf import _ops
from reverb_tf import _tensorflow
from reverb_tf import client as client_lib
from reverb_tf import signatures
from reverb_tf import trajectory_writer

tf = _tensorflow.import_tensorflow("reverb_tf.TFTrajectoryWriter")

Path = Tuple[Any, ...]


class HistorySlice:
    """Entries of one column's history, as a slice or index of `history` cut them.

    Not squeezed: entries `start:stop` (Python slice semantics; None is an
    open end). Squeezed: the single entry `start`, without a time dimension.
    The positions count in the writer's history when the op runs.
    """

    __slots__ = ("column", "path", "start", "stop", "squeeze")

    def __init__(
        self, column: int, path: Path, start: Optional[int], stop: Optional[int], squeeze: bool
    ) -> None:
        self.column = column
        self.path = path
        self.start = start
        self.stop = stop
        self.squeeze = squeeze

    def __repr__(self) -> str:
        name = signatures.column_name(self.path)
        if self.squeeze:
            return f"HistorySlice({name!r}[{self.start}])"
        start = "" if self.start is None else self.start
        stop = "" if self.stop is None else self.stop
        return f"HistorySlice({name!r}[{start}:{stop}])"


class HistoryColumn:
    """One column of a `TFTrajectoryWriter`'s history; index or slice it."""

    __slots__ = ("_column", "_path")

    def __init__(self, column: int, path: Path) -> None:
        self._column = column
        self._path = path

    def __getitem__(self, index: Union[int, slice]) -> HistorySlice:
        """Cuts entries of the history.

        Args:
          index: An int (one step, squeezed) or a slice with step 1 or None,
            of Python ints: the item's layout is part of the graph.

        Returns:
          The `HistorySlice`.

        Raises:
          TypeError: For another kind of index (a tensor, a list of steps).
          ValueError: For a slice step other than 1.
        """
        if isinstance(index, (int, np.integer)) and not isinstance(index, bool):
            return HistorySlice(self._column, self._path, int(index), None, True)
        if isinstance(index, slice):
            if index.step not in (None, 1):
                raise ValueError(f"history slices take steps of 1, got step={index.step}")
            for bound in (index.start, index.stop):
                if bound is not None and not isinstance(bound, (int, np.integer)):
                    raise TypeError(
                        "history slice bounds must be Python ints (the item's layout is "
                        f"part of the graph), got {type(bound).__name__}"
                    )
            start = None if index.start is None else int(index.start)
            stop = None if index.stop is None else int(index.stop)
            return HistorySlice(self._column, self._path, start, stop, False)
        raise TypeError(
            "a TFTrajectoryWriter history column takes an int or a slice of ints, got "
            f"{type(index).__name__}"
        )

    def __repr__(self) -> str:
        return f"HistoryColumn({signatures.column_name(self._path)!r})"


class TFTrajectoryWriter(tf.saved_model.experimental.TrackableResource):
    """A trajectory writer whose calls are TensorFlow ops.

    It works eagerly, inside `tf.function` and `tf.while_loop`, and in
    replica functions of `tf.distribute` strategies (give each replica its
    own writer). Within a `tf.function` the ops of one writer run in program
    order (TensorFlow orders stateful ops on one resource).

    It is a `tf.saved_model.experimental.TrackableResource`: a `tf.Module`
    holding it saves functions that write through it, and loading them
    (in a process that has imported reverb_tf, so that the ops are
    registered) makes that process's own writer to the same address.
    """

    def __init__(
        self,
        server_address: Union[client_lib.ServerAddress, Any],
        num_keep_alive_refs: int,
        max_chunk_length: Optional[int] = None,
        max_in_flight_items: int = 128,
        validate_items: bool = True,
    ) -> None:
        """Creates the writer (the resource is made now, outside any graph).

        Args:
          server_address: The server (or a list of shards), as for `Client`,
            or a scalar tf.string tensor holding one target.
          num_keep_alive_refs: How many of the newest steps items may
            reference.
          max_chunk_length: Steps per chunk; None: `num_keep_alive_refs`.
          max_in_flight_items: Items created and not yet confirmed at most;
            `create_item` blocks at the limit.
          validate_items: Check items against the table's signature (on the
            table's first item the writer fetches it); False sends them
            unchecked, and the server does not check them either.

        Raises:
          InvalidArgumentError: For options the writer refuses.
          ReverbError: If the server cannot be reached.
        """
        super().__init__()
        self._ops = _ops.load()
        self._name = f"reverb_tf_trajectory_writer_{uuid.uuid4().hex}"
        self._address = _address.op_address(server_address)
        self._options = {
            "num_keep_alive_refs": int(num_keep_alive_refs),
            "max_chunk_length": int(max_chunk_length or 0),
            "max_in_flight_items": int(max_in_flight_items),
            "validate_items": bool(validate_items),
        }
        self._paths: Dict[Path, int] = {}
        self._structure: Any = None
        with tf.init_scope():
            self._resource_handle = self._create_resource()
            self._eager = tf.executing_eagerly()
        self._closed = False

    # -- the resource, as tf.saved_model sees it -------------------------------

    def _create_resource(self) -> Any:
        """Makes the writer's resource; also what a loaded SavedModel runs.

        `tf.saved_model.save` traces this into the SavedModel, and
        `tf.saved_model.load` runs it in the loading process, which makes that
        process's own writer (same server address, options and shared name).

        Returns:
          The resource handle.
        """
        return self._ops.reverb_tf_trajectory_writer(
            server_address=self._address, shared_name=self._name, **self._options
        )

    def _destroy_resource(self) -> None:
        """Destroys the resource (closing the native writer), if it exists."""
        tf.raw_ops.DestroyResourceOp(resource=self.resource_handle, ignore_lookup_error=True)

    # -- history -------------------------------------------------------------

    @property
    def history(self) -> Any:
        """The columns appended so far, in the structure of the steps.

        Raises:
          RuntimeError: Before the first `append`.
        """
        if self._structure is None:
            raise RuntimeError("history is empty until the first append")
        return tree.map_structure_with_path(
            lambda path, column: None if column is None else HistoryColumn(column, tuple(path)),
            self._structure,
        )

    def _column(self, path: Path) -> int:
        column = self._paths.get(path)
        if column is None:
            column = len(self._paths)
            self._paths[path] = column
        return column

    # -- calls ---------------------------------------------------------------

    def append(self, data: Any, partial_step: bool = False) -> Any:
        """Appends one step (or, with `partial_step`, part of one).

        Fields absent from `data` (or None) are missing in this step; new
        fields add columns. A column's dtype and shape are fixed by its
        first value. Python and numpy values become tensors as numpy types
        them (1.0 is float64), as the Python writer stores them.

        Args:
          data: The step: a tensor or a nested structure of tensors.
          partial_step: Keep the step open for more columns.

        Returns:
          The step's index (an int64 scalar tensor).

        Raises:
          InvalidArgumentError: If a value differs in dtype or shape from its
            column, or a column is given twice in one step.
        """
        flat = [(tuple(p), v) for p, v in tree.flatten_with_path(data) if v is not None]
        if not flat:
            raise ValueError("append needs at least one value that is not None")
        structure = tree.map_structure_with_path(
            lambda path, value: None if value is None else self._column(tuple(path)), data
        )
        self._structure = trajectory_writer.union_structures(self._structure, structure)
        values = [
            v if isinstance(v, tf.Tensor) else tf.convert_to_tensor(np.asarray(v)) for _, v in flat
        ]
        return self._ops.reverb_tf_trajectory_writer_append(
            handle=self.resource_handle,
            values=values,
            columns=[self._paths[p] for p, _ in flat],
            names=[signatures.column_name(p) for p, _ in flat],
            partial_step=bool(partial_step),
        )

    def create_item(self, table: Any, priority: Any, trajectory: Any) -> Any:
        """Queues an item for `table` over history entries.

        Args:
          table: The table's name (a string or a string tensor).
          priority: The item's priority (a number or a float64 tensor).
          trajectory: A structure of `HistorySlice`s cut from `history`,
            flattened (`tree.flatten` order) into the item's columns.

        Returns:
          The op (None when run eagerly).

        Raises:
          TypeError: If a leaf is not a `HistorySlice`.
          ValueError: If `trajectory` is empty.
          InvalidArgumentError: If the item does not match the table's
            signature, the table does not exist, or an entry is outside the
            history or the keep-alive window (when the op runs).
        """
        flat: List[HistorySlice] = tree.flatten(trajectory)
        if not flat:
            # The op cannot be made without a column (its list attributes need
            # one), so the native writer, which checks every item the op gives
            # it (TrajectoryWriter::ValidateItem), never sees this case; left
            # to TensorFlow it would be TensorFlow's error (not a ValueError
            # when eager) in TensorFlow's words.
            raise ValueError("trajectory must not be empty.")
        for leaf in flat:
            if not isinstance(leaf, HistorySlice):
                raise TypeError(
                    "All leaves of `trajectory` must be `HistorySlice` (cut from "
                    f"writer.history) but got {type(leaf).__name__}: {leaf!r}"
                )
        return self._ops.reverb_tf_trajectory_writer_create_item(
            handle=self.resource_handle,
            table=tf.convert_to_tensor(table, tf.string),
            priority=tf.cast(priority, tf.float64),
            columns=[s.column for s in flat],
            starts=[s.start or 0 for s in flat],
            stops=[s.stop or 0 for s in flat],
            has_starts=[s.start is not None for s in flat],
            has_stops=[s.stop is not None for s in flat],
            squeeze=[s.squeeze for s in flat],
        )

    def flush(self, block_until_num_items: Any = 0, timeout_ms: Optional[Any] = None) -> Any:
        """Waits until at most `block_until_num_items` items are unconfirmed.

        Args:
          block_until_num_items: How many items may stay unconfirmed.
          timeout_ms: The most to wait, in milliseconds; None: no limit.

        Raises:
          DeadlineExceededError: If the time runs out first.
        """
        return self._ops.reverb_tf_trajectory_writer_flush(
            handle=self.resource_handle,
            block_until_num_items=tf.cast(block_until_num_items, "int32"),
            timeout_ms=_timeout(timeout_ms),
        )

    def end_episode(self, clear_buffers: Any = True, timeout_ms: Optional[Any] = None) -> Any:
        """Ends the episode and flushes its items.

        Args:
          clear_buffers: Empty the history (keep it only for trajectories
            that span episodes).
          timeout_ms: The most to wait for the flush, in milliseconds; None:
            no limit.

        Raises:
          FailedPreconditionError: If a partial step is open.
          DeadlineExceededError: If the time runs out first.
        """
        return self._ops.reverb_tf_trajectory_writer_end_episode(
            handle=self.resource_handle,
            clear_buffers=tf.cast(clear_buffers, "bool"),
            timeout_ms=_timeout(timeout_ms),
        )

    @property
    def episode_steps(self) -> Any:
        """Steps appended since the episode began (an int32 tensor)."""
        return self._ops.reverb_tf_trajectory_writer_episode_steps(handle=self.resource_handle)

    def close(self) -> None:
        """Destroys the writer's resource, which closes the native writer.

        Items not yet confirmed get a moment to arrive; call `flush` first to
        be sure of them. Only a writer made eagerly can be closed here; in a
        TF1 graph the resource lives as long as its session.
        """
        # The copy tf.saved_model.save makes of the writer holds a handle of
        # the export graph instead (tf.is_symbolic_tensor): it has nothing of
        # its own to close, and must not close this process's writer.
        if self._closed or not self._eager or tf.is_symbolic_tensor(self._resource_handle):
            return
        self._closed = True
        self._destroy_resource()

    def __enter__(self) -> "TFTrajectoryWriter":
        return self

    def __exit__(self, *unused_exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # pylint: disable=broad-except
            pass  # interpreter shutdown: TensorFlow may be gone already


def _timeout(timeout_ms: Optional[Any]) -> Any:
    if timeout_ms is None:
        return tf.constant(-1, tf.int64)
    return tf.cast(timeout_ms, tf.int64)


__all__: Sequence[str] = ["HistoryColumn", "HistorySlice", "TFTrajectoryWriter"]
