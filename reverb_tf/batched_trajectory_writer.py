# SPDX-License-Identifier: Apache-2.0
"""BatchedTrajectoryWriter: one writer for the B environments of a vectorised env.

An actor that steps B environments together (gym's vector envs, envpool, a
batched simulator on an accelerator) would otherwise need B TrajectoryWriters
and B Python calls per step and per item. This writer takes a whole batch at
once:

* `append(step)` takes a step whose every leaf has a leading dimension of B
  (row b is environment b) and appends it to all B environments in one call.
* `history['obs'][-3:]` selects the same steps of every environment.
* `create_items(table, priority, trajectory, envs=...)` creates one item per
  chosen environment, each referencing only that environment's cells, in one
  call; the items travel to the server together on the writer's one stream.
* `end_episode(dones)` ends the episodes of some environments only.

Each environment has its own episodes (and so its own episode counts on the
server) and its own cells; all environments share the step index, because
they step together.

Thread safety: a BatchedTrajectoryWriter must be used by one thread at a time.
"""

from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

import numpy as np

from reverb_tf import signatures
from reverb_tf import trajectory_writer as trajectory_writer_lib

Path = Tuple[Any, ...]
_Index = Union[int, slice, Sequence[int], np.ndarray]


def _steps_of(index: _Index, length: int) -> Tuple[Tuple[int, ...], bool]:
    """Resolves a history index to step indices and whether it is squeezed.

    Raises:
      IndexError: For an integer out of range.
      TypeError: For an index that is not an int, slice or list of ints.
    """
    if isinstance(index, (int, np.integer)) and not isinstance(index, bool):
        return (_position(int(index), length),), True
    if isinstance(index, slice):
        return tuple(range(length)[index]), False
    if isinstance(index, (list, tuple, np.ndarray)):
        return tuple(_position(int(i), length) for i in index), False
    raise TypeError(
        f"history indices must be integers, slices or lists of integers, not {type(index).__name__}"
    )


def _position(index: int, length: int) -> int:
    position = index + length if index < 0 else index
    if not 0 <= position < length:
        raise IndexError(f"history index {index} out of range for {length} steps")
    return position


class _BatchedColumnHistory(trajectory_writer_lib._HistoryOfColumn):  # pylint: disable=protected-access
    """The recent cells of one column in every environment.

    Index i is the writer's i-th step (negative indices count from the
    newest), the same step in every environment. Whether an environment
    still holds the cell (it may have left the keep-alive window, or been
    cleared when that environment's episode ended) is checked when items are
    created, per environment.
    """

    __slots__ = ("_num_envs",)

    def __init__(self, core: Any, path: Path, column: int, num_envs: int) -> None:
        super().__init__(core, path, column)
        self._num_envs = num_envs

    def __getitem__(self, index: _Index) -> "BatchedTrajectoryColumn":
        steps, squeeze = _steps_of(index, self._core.history_length)
        return _make_column(self, steps, squeeze)

    def __repr__(self) -> str:
        return f"_BatchedColumnHistory(path={self._path!r}, steps={len(self)})"


class BatchedTrajectoryColumn(trajectory_writer_lib._ColumnCells):  # pylint: disable=protected-access
    """Cells of one column, the same steps in every environment.

    A leaf of the `trajectory` passed to `BatchedTrajectoryWriter.create_items`.
    An integer index gives a squeezed column (one step, sampled without a time
    dimension); slices and lists give a column with a leading time dimension.
    """

    __slots__ = ("_hist", "_steps", "_entry")

    def __init__(self) -> None:
        """Not for direct use: index `BatchedTrajectoryWriter.history` instead.

        Raises:
          TypeError: Always.
        """
        raise TypeError(
            "BatchedTrajectoryColumns are made by indexing BatchedTrajectoryWriter.history"
        )

    def __getitem__(self, index: _Index) -> "BatchedTrajectoryColumn":
        """Selects some of the column's steps (positions within this column).

        Raises:
          TypeError: For an index that is not an int, slice or list of ints.
          IndexError: For indices out of range.
        """
        positions, squeeze = _steps_of(index, len(self._steps))
        return _make_column(self._hist, tuple(self._steps[p] for p in positions), squeeze)

    def numpy(self, envs: Any = None) -> np.ndarray:
        """Returns the referenced values, one row per environment.

        Args:
          envs: Which environments (as `create_items` takes them); None: all.

        Returns:
          An array of shape `[len(envs)] + self.shape`.

        Raises:
          RuntimeError: If an environment no longer holds a cell.
        """
        hist = self._hist
        lanes = _lanes(envs, hist._num_envs)  # pylint: disable=protected-access
        rows = []
        for lane in lanes:
            values = hist._core.read_cells(  # pylint: disable=protected-access
                hist._column,
                list(self._steps),
                int(lane),  # pylint: disable=protected-access
            )
            rows.append(values[0] if self.is_squeezed else values)
        if not rows:
            return np.zeros((0,) + self.shape, dtype=self.dtype)
        return np.stack(rows)

    def __repr__(self) -> str:
        return (
            f"BatchedTrajectoryColumn(path={signatures.column_name(self._hist.path)!r}, "
            f"steps={list(self._steps)}, squeezed={self.is_squeezed})"
        )


def _make_column(
    hist: _BatchedColumnHistory, steps: Tuple[int, ...], squeeze: bool
) -> BatchedTrajectoryColumn:
    column = object.__new__(BatchedTrajectoryColumn)
    column._hist = hist
    column._steps = steps
    # Exactly what _core.TrajectoryWriter.create_items takes for this column.
    column._entry = (hist._column, list(steps), squeeze)  # pylint: disable=protected-access
    return column


def _lanes(envs: Any, num_envs: int) -> np.ndarray:
    """Environment indices (int32) from None, a boolean mask or indices.

    Raises:
      ValueError: For a mask of the wrong length or an index out of range.
      TypeError: For anything but booleans or integers.
    """
    if envs is None:
        return np.arange(num_envs, dtype=np.int32)
    array = np.asarray(envs)
    if array.dtype == np.bool_:
        if array.shape != (num_envs,):
            raise ValueError(
                f"a boolean envs mask must have shape ({num_envs},), got {array.shape}"
            )
        return np.flatnonzero(array).astype(np.int32)
    if array.size == 0:
        return np.zeros(0, dtype=np.int32)
    if array.dtype.kind not in "iu":
        raise TypeError(f"envs must be a boolean mask or integer indices, got {array.dtype}")
    array = array.reshape(-1)
    low, high = int(array.min()), int(array.max())
    if low < 0 or high >= num_envs:
        raise ValueError(f"environment {low if low < 0 else high} is not in [0, {num_envs})")
    return array.astype(np.int32)


class BatchedTrajectoryWriter(trajectory_writer_lib._WriterBase):  # pylint: disable=protected-access
    """Writes the steps of B environments at once and inserts their items.

    Use `Client.batched_trajectory_writer` to create one. Example, with a
    vectorised environment of B environments:

        with client.batched_trajectory_writer(B, num_keep_alive_refs=3) as writer:
          obs = env.reset()
          while training:
            action = policy(obs)
            next_obs, reward, done, _ = env.step(action)
            writer.append({'obs': obs, 'action': action, 'reward': reward})
            writer.create_items('replay', priority=1.0, trajectory={
                'obs': writer.history['obs'][-3:],
                'action': writer.history['action'][-1],
            }, envs=writer.episode_steps >= 3)
            writer.end_episode(done)
            obs = next_obs
    """

    _column_type = BatchedTrajectoryColumn

    def __init__(
        self,
        core_writer: Any,
        get_signature: Optional[Callable[[str], Optional[List[signatures.Column]]]] = None,
    ) -> None:
        """Wraps a native writer. Use `Client.batched_trajectory_writer` instead.

        Args:
          core_writer: A `_core.TrajectoryWriter` with num_lanes >= 1.
          get_signature: As for `TrajectoryWriter`.
        """
        super().__init__(core_writer, get_signature)
        self._num_envs = int(core_writer.num_lanes)
        self._all_lanes = np.arange(self._num_envs, dtype=np.int32)

    def _make_history(self, path: Path, column: int) -> _BatchedColumnHistory:
        return _BatchedColumnHistory(self._writer, path, column, self._num_envs)

    @property
    def num_envs(self) -> int:
        """The number of environments B."""
        return self._num_envs

    @property
    def episode_steps(self) -> np.ndarray:
        """Steps of each environment's current episode, an int32 array of shape [B]."""
        return self._writer.lane_episode_steps

    def append(self, data: Any) -> None:
        """Appends one step to every environment.

        Args:
          data: The step, a leaf or a nested structure of arrays whose leading
            dimension is B: row b is environment b's value. As for
            `TrajectoryWriter.append`, new fields add columns and absent ones
            (or None) are missing in this step, in every environment.

        Raises:
          InvalidArgumentError: (a ValueError) If a value lacks the leading
            dimension B, or its rows' dtype or shape differ from the column's
            earlier values.
          ReverbError: If the native writer fails (e.g. the connection broke).
        """
        self._check_open()
        num_columns = len(self._columns)
        self._writer.append_batch(self._step_columns(data))
        if self._pending_configs and num_columns != len(self._columns):
            self._apply_pending_configs()

    def create_items(self, table: str, priority: Any, trajectory: Any, envs: Any = None) -> None:
        """Inserts one item per environment in `envs`, each of its own cells.

        All items are checked before any is queued: if one environment cannot
        reference a cell (its episode ended and was cleared, or the cell left
        the keep-alive window), nothing is queued and the error names it.
        Does not wait for the server; `flush` does.

        Args:
          table: Name of the table.
          priority: A scalar for every item, one value per chosen environment,
            or one per environment (B values, of which the chosen are used).
          trajectory: A structure of `BatchedTrajectoryColumn`s (from
            `history`), flattened (`tree.flatten` order) into the items'
            columns.
          envs: Which environments: None (all), a boolean mask of shape [B]
            (e.g. `writer.episode_steps >= 3`) or environment indices.

        Raises:
          TypeError: If a leaf of `trajectory` is not a
            `BatchedTrajectoryColumn` or `envs` is neither booleans nor
            integers.
          ValueError: If a column comes from another writer, `envs` names an
            environment out of range or twice, or `priority` has the wrong
            length.
          InvalidArgumentError: (a ValueError) If a priority is NaN, the
            trajectory is empty or has a column without steps, an
            environment cannot reference a cell, or the trajectory does not
            match the table's signature (the native writer's checks).
          ReverbError: If the native writer fails.
        """
        self._check_open()
        lanes = self._all_lanes if envs is None else _lanes(envs, self._num_envs)
        priorities = np.asarray(priority, dtype=np.float64)
        if priorities.ndim == 0:
            priorities = np.full(len(lanes), float(priorities))
        elif priorities.shape == (len(lanes),):
            pass
        elif priorities.shape == (self._num_envs,):
            priorities = priorities[lanes]
        else:
            raise ValueError(
                f"priority must be a scalar or have {len(lanes)} (chosen environments) or "
                f"{self._num_envs} (all environments) values, got shape {priorities.shape}"
            )
        flat = self._flatten_trajectory(trajectory)
        core = self._writer
        entries = []
        for column in flat:
            if type(column) is not BatchedTrajectoryColumn or column._hist._core is not core:  # pylint: disable=protected-access
                self._reject(column)
            entries.append(column._entry)  # pylint: disable=protected-access
        if table not in self._signed:
            self._sign(table)
        if len(lanes):
            core.create_items(table, priorities, entries, lanes)

    def end_episode(self, envs: Any = None, clear_buffers: bool = True) -> None:
        """Ends the current episode of some environments; the others go on.

        Unlike `TrajectoryWriter.end_episode`, this does not wait for the
        items to be stored (with B environments, some episode ends every few
        steps); call `flush` for that.

        Args:
          envs: Which environments: None (all), a boolean mask of shape [B]
            (e.g. the vectorised environment's `done`) or indices.
          clear_buffers: Whether those environments' earlier cells become
            unreferenceable. Keep them (False) only for trajectories that span
            episodes.

        Raises:
          TypeError, ValueError: For a bad `envs` (see `create_items`).
          ReverbError: If the native writer fails.
        """
        self._check_open()
        lanes = self._all_lanes if envs is None else _lanes(envs, self._num_envs)
        if len(lanes):
            self._writer.end_lane_episodes(lanes, bool(clear_buffers))
