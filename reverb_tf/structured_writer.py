# SPDX-License-Identifier: Apache-2.0
"""StructuredWriter: insert trajectories described by static patterns.

Instead of cutting every item out of the history by hand (as with
`TrajectoryWriter`), the caller declares once, as configs, which items to
build from the stream of steps, and only appends steps:

    ref = structured_writer.create_reference_step(step_structure)
    config = structured_writer.create_config(
        pattern={'obs': ref['obs'][-3:], 'action': ref['action'][-1]},
        table='replay',
        conditions=[structured_writer.Condition.step_index() >= 2])
    writer = client.structured_writer([config])
    writer.append(step)  # inserts an item whenever `config` applies

A config is a `reverb_tf.cc.patterns_pb2.StructuredWriterConfig`: the
pattern's leaves (`PatternNode`: a flat column of the step and a step or a
slice of steps counted back from the most recent), the structure they are
unflattened into, the target table, a priority function and conditions. The
configs are evaluated in C++ (reverb_tf/cc/patterns/pattern_engine.h, which
states the semantics) after every append; the data of each step is sent to
the server once, however many items reference it.

This module mirrors dm-reverb 0.14's `reverb.structured_writer`: the same
names, signatures and config messages (field for field), so configs built by
either can be used by both.
"""

import copy
import datetime
import operator
import re
import sys
from typing import Any, Callable, Dict, NewType, Optional, Sequence, Tuple

import numpy as np
import tree

from reverb_tf import _arguments
from reverb_tf import _tensorflow
from reverb_tf import errors
from reverb_tf import signatures
from reverb_tf.cc import patterns_pb2

Config = patterns_pb2.StructuredWriterConfig
ConditionProto = patterns_pb2.Condition

Pattern = tree.Structure[patterns_pb2.PatternNode]
ReferenceStep = NewType("ReferenceStep", Any)
PatternTransform = Callable[[ReferenceStep], Pattern]

# dm-reverb's reverb_types.SpecNest: a nest of tf.TensorSpec.
_SpecNest = Any

_COLUMN_IN_MESSAGE = re.compile(r"\bcolumn (\d+)\b")
# The native writer's messages for a value unlike its column's first (in
# dm-reverb's words, TF dtype names included), which `_with_path` gives the
# column's path, keeping the native explanation after them.
_WRONG_DTYPE = re.compile(
    r"^Tensor of wrong dtype provided for column (\d+)\. Got (\S+) but expected (\S+?)"
    r"\.?(?=$| \()(.*)$",
    re.S,
)
_WRONG_SHAPE = re.compile(
    r"^Tensor of incompatible shape provided for column (\d+)\. Got (\[[^\]]*\]) which is "
    r"incompatible with (\[[^\]]*\])\.?(.*)$",
    re.S,
)
# numpy's dtype names that TensorFlow (and so dm-reverb's messages) spells
# otherwise; every other name is the same in both.
_TF_DTYPE_NAMES = {"float64": "double", "float32": "float", "float16": "half"}
_DUPLICATE_IN_STEP = "provided by more than one append in the same step"


def _tf_dtype_name(name: str) -> str:
    """TensorFlow's name of the dtype numpy (and the native writer) calls `name`."""
    return _TF_DTYPE_NAMES.get(name, name)


def _column_spec(value: Any) -> Tuple[str, Tuple[int, ...]]:
    """The (dtype name, shape) the native writer gives `value` as a cell.

    The native writer converts a value as np.asarray would, and stores every
    kind of text (str, bytes, object arrays of them) as TF strings.
    """
    array = np.asarray(value)
    name = "string" if array.dtype.kind in "USO" else _tf_dtype_name(array.dtype.name)
    return name, tuple(array.shape)


def _deadline_message(call: str, timeout_ms: int, error: Exception) -> str:
    """dm-reverb's words for a flush or end of episode that timed out.

    The duration is printed as Python prints a `datetime.timedelta` (what
    programs matching dm-reverb's message see), then the native detail.
    """
    duration = datetime.timedelta(milliseconds=operator.index(timeout_ms))
    return f"{call} call did not complete within provided timeout of {duration} ({error})"


def _timeout_s(timeout_ms: Any) -> Optional[float]:
    """`timeout_ms` in seconds for the native writer; None waits forever.

    A timeout of zero or less does not wait at all (dm-reverb checks once
    and raises DeadlineExceededError if items are still pending), whereas
    the native layer takes a negative timeout as no timeout.

    Raises:
      TypeError: `timeout_ms` is neither None nor an integer.
    """
    seconds = _arguments.timeout_ms_in_s(timeout_ms)
    return None if seconds is None else max(seconds, 0.0)


def _call_with_timeout(
    call: str, timeout_ms: Any, native_call: Callable[[Optional[float]], None]
) -> None:
    """Runs `native_call(timeout_s)`, a timeout reported in dm-reverb's words.

    Raises:
      TypeError: `timeout_ms` is neither None nor an integer.
      DeadlineExceededError: The call timed out (with `call`'s message when
        a timeout was given).
    """
    timeout_s = _timeout_s(timeout_ms)
    try:
        native_call(timeout_s)
    except errors.DeadlineExceededError as e:
        if timeout_ms is None:
            raise
        raise errors.DeadlineExceededError(_deadline_message(call, timeout_ms, e)) from None


class StructuredWriter:
    """Appends steps and inserts the items its configs describe.

    Created by `Client.structured_writer(configs)`. After every `append` (and
    at `end_episode`) each config is checked; every config that applies
    inserts one item into its table. Must be used by one thread at a time.
    """

    def __init__(self, cpp_writer: Any):
        """Wraps the native writer (`reverb_tf._core.StructuredWriter`).

        Args:
          cpp_writer: The native writer, made by `Client.structured_writer`.
        """
        self._writer = cpp_writer
        self._data_structure = None
        self._flat_data_length = None
        # Column index -> (dtype name, shape) of its first value, recorded
        # until every column has one. Only read on an error: a column given
        # twice in an open step is reported as dm-reverb reports it, a wrong
        # dtype or shape first.
        self._column_specs: Dict[int, Tuple[str, Tuple[int, ...]]] = {}

    def append(self, data: Any, *, partial_step: bool = False):
        """Adds data to the current step and inserts the items that apply.

        Every step must flatten (`tree.flatten`) to the same number of leaves
        as the first one; a leaf may be None (that column is missing in the
        step). With `partial_step=True` the step stays open: later calls add
        the columns that were None, until a call without it closes the step.
        A column must not be given twice in one step. Configs are checked
        after every call, so an item can be inserted as soon as the columns
        it needs have arrived (each config applies at most once per step).

        Args:
          data: The (possibly nested) data of the step.
          partial_step: Leave the step open for more columns. Defaults to
            False.

        Raises:
          ValueError: If the number of flattened leaves differs from the first
            step's, or a column's dtype or shape changed (the message names
            the column's index and path, as dm-reverb's does; also when the
            column was given before in the open step).
          RuntimeError: If a column was already given in the open step.
        """
        flat_data = tree.flatten(data)
        if self._flat_data_length is None:
            self._flat_data_length = len(flat_data)
            self._data_structure = tree.map_structure(lambda _: None, data)
        if len(flat_data) != self._flat_data_length:
            raise ValueError(
                f"Flattened data has an unexpected length, got {len(flat_data)} "
                f"but wanted {self._flat_data_length}."
            )
        try:
            # The native writer converts each leaf as np.asarray would.
            self._writer.append(flat_data, bool(partial_step))
        except errors.InvalidArgumentError as e:
            raise self._with_path(e) from None
        except errors.FailedPreconditionError as e:
            if _DUPLICATE_IN_STEP not in str(e):
                raise
            # The native writer checks for a column given twice before the
            # values' dtypes and shapes; dm-reverb reports those first.
            mismatch = self._mismatch(flat_data)
            if mismatch is None:
                raise
            raise mismatch from None
        if len(self._column_specs) < len(flat_data):
            for index, value in enumerate(flat_data):
                if value is not None and index not in self._column_specs:
                    self._column_specs[index] = _column_spec(value)

    def _path(self, index: int) -> Optional[Any]:
        """The step path of flat column `index`, or None if there is none."""
        paths = [path for path, _ in tree.flatten_with_path(self._data_structure)]
        return paths[index] if index < len(paths) else None

    def _mismatch(self, flat_data: Sequence[Any]) -> Optional[errors.InvalidArgumentError]:
        """The error for the first value unlike its column's first, if any."""
        for index, value in enumerate(flat_data):
            if value is None or index not in self._column_specs:
                continue
            dtype, shape = self._column_specs[index]
            try:
                got_dtype, got_shape = _column_spec(value)
            except Exception:  # pylint: disable=broad-except
                # Not convertible at all: the native writer's error stands.
                return None
            where = f"column {index} (path={self._path(index)})"
            if got_dtype != dtype:
                return errors.InvalidArgumentError(
                    f"Tensor of wrong dtype provided for {where}. Got {got_dtype} but "
                    f"expected {dtype}."
                )
            if got_shape != shape:
                return errors.InvalidArgumentError(
                    f"Tensor of incompatible shape provided for {where}. Got "
                    f"{list(got_shape)} which is incompatible with {list(shape)}."
                )
        return None

    def _with_path(self, error: errors.InvalidArgumentError) -> Exception:
        """The native error with the step path of the column it names.

        A wrong dtype or shape is worded as dm-reverb words it (programs may
        match its message); any other message gets the path appended.
        """
        message = str(error)
        dtype = _WRONG_DTYPE.match(message)
        shape = _WRONG_SHAPE.match(message)
        if dtype or shape:
            index, got, want, detail = (dtype or shape).groups()
            path = self._path(int(index))
            if path is None:
                return error
            where = f"column {index} (path={path})"
            if dtype:
                return type(error)(
                    f"Tensor of wrong dtype provided for {where}. Got {got} "
                    f"but expected {want}.{detail}"
                )
            return type(error)(
                f"Tensor of incompatible shape provided for {where}. Got {got} which is "
                f"incompatible with {want}.{detail}"
            )
        match = _COLUMN_IN_MESSAGE.search(message)
        if match is None:
            return error
        index = int(match.group(1))
        path = self._path(index)
        if path is None:
            return error
        return type(error)(f"{error} (column {index} is path={path} of the step)")

    def flush(self, block_until_num_items: int = 0, timeout_ms: Optional[int] = None):
        """Waits until at most `block_until_num_items` items are unconfirmed.

        Items whose data is still being chunked are sent first; then the call
        waits (without the GIL) for the server to confirm them.

        Args:
          block_until_num_items: How many items may remain unconfirmed.
          timeout_ms: Maximum milliseconds to wait; None waits forever, zero
            or less not at all. The items keep being inserted in the
            background after a timeout.

        Raises:
          ValueError: If `block_until_num_items` < 0 (an
            `InvalidArgumentError`).
          TypeError: If `timeout_ms` is neither None nor an integer.
          DeadlineExceededError: If the items were not confirmed in time.
        """
        # The native writer checks block_until_num_items before anything.
        _call_with_timeout(
            "Flush", timeout_ms, lambda s: self._writer.flush(block_until_num_items, s)
        )

    def end_episode(self, clear_buffers: bool = True, timeout_ms: Optional[int] = None):
        """Applies the end-of-episode configs, flushes and starts an episode.

        Configs with a `Condition.is_end_episode()` condition are checked
        (with the last step as the most recent) and their items inserted;
        then every pending item is flushed. The step index restarts at 0.

        Args:
          clear_buffers: Forget the steps of the ended episode. Keep them
            (False) only for trajectories that span episodes.
          timeout_ms: Maximum milliseconds to wait for the flush; None waits
            forever, zero or less not at all. The episode ends (and buffers
            are cleared) even when the flush times out; the items keep being
            inserted in the background.

        Raises:
          TypeError: If `timeout_ms` is neither None nor an integer.
          DeadlineExceededError: If the flush did not complete in time.
        """
        _call_with_timeout(
            "End episode", timeout_ms, lambda s: self._writer.end_episode(clear_buffers, s)
        )

    @property
    def step_is_open(self) -> bool:
        """True if the most recent `append` had `partial_step=True`."""
        return self._writer.step_is_open


class _RefNode:
    """A column of the reference step; indexing it makes a `PatternNode`."""

    def __init__(self, idx: int):
        self._idx = idx

    def __getitem__(self, key):
        # An int k selects one step, stored as the slice [:k] whose stop says
        # which: PatternNode(stop=k) without start.
        if isinstance(key, int):
            key = slice(key)
        elif not isinstance(key, slice):
            raise ValueError(f"Key must be int or slice by got {key} (type {type(key)}).")
        return patterns_pb2.PatternNode(
            flat_source_index=self._idx, start=key.start, stop=key.stop, step=key.step
        )


def create_reference_step(step_structure: tree.Structure[Any]) -> ReferenceStep:
    """Returns a structure like the step whose leaves build pattern nodes.

    Indexing a leaf of the result like a history (`ref['obs'][-1]`,
    `ref['obs'][-3:]`, `ref['obs'][-5::2]`) gives the `PatternNode` that
    takes those steps of that column.

    Args:
      step_structure: The structure of the steps that will be appended (the
        leaves' values do not matter).

    Returns:
      `step_structure` with each leaf replaced by a node builder.
    """
    return tree.unflatten_as(
        step_structure, [_RefNode(i) for i in range(len(tree.flatten(step_structure)))]
    )


def pattern_from_transform(
    step_structure: tree.Structure[Any], transform: Callable[[ReferenceStep], Pattern]
) -> Pattern:
    """Builds a pattern by applying `transform` to a reference step.

    Args:
      step_structure: The structure of the steps that will be appended.
      transform: Maps a reference step (see `create_reference_step`) to the
        structure of the items to insert.

    Returns:
      The structure `transform` returns, with `PatternNode` leaves.
    """
    return transform(create_reference_step(step_structure))


def create_config(
    pattern: Pattern,
    table: str,
    conditions: Sequence[ConditionProto] = (),
    priority: Optional[patterns_pb2.Priority] = None,
) -> Config:
    """Builds a `StructuredWriterConfig`.

    Args:
      pattern: A structure with `PatternNode` leaves (see
        `create_reference_step`); items have this structure.
      table: The table the items are inserted into.
      conditions: Conditions that must all hold for the config to apply.
      priority: The priority function; None means `constant_priority_fn(1.0)`.

    Returns:
      The config.
    """
    structure = tree.map_structure(lambda _: None, pattern)
    if priority is None:
        priority = constant_priority_fn(1.0)
    return patterns_pb2.StructuredWriterConfig(
        flat=tree.flatten(pattern),
        pattern_structure=signatures.encode_structured_value(structure),
        table=table,
        priority=priority,
        conditions=conditions,
    )


def unpack_pattern(config: Config) -> Pattern:
    """Returns the pattern of `config` in its original structure.

    Args:
      config: A config.

    Returns:
      The pattern's `PatternNode`s in the structure it was created with
      (dicts with sorted keys), or `config.flat` itself if the config has no
      `pattern_structure`.
    """
    if not config.HasField("pattern_structure"):
        return config.flat
    structure = signatures.decode_structured_value(config.pattern_structure)
    return tree.unflatten_as(structure, config.flat)


def _shapes_string(spec: Any, shapes: Sequence[Sequence[Any]]) -> str:
    """Shapes for a message, as TensorShapes where the specs are TensorFlow's."""
    if signatures._is_tf_spec(spec):  # pylint: disable=protected-access
        shape_type = type(spec.shape)
        return str([shape_type(shape) for shape in shapes])
    return str([tuple(shape) for shape in shapes])


def _value_spec(leaf: Any) -> Any:
    """A numpy value of a step spec as the spec of its shape and dtype.

    dm-reverb's `infer_signature` takes a step of values (what
    `create_reference_step` was given) as well as a step of specs, and
    answers with `tf.TensorSpec`s; without TensorFlow the answer is
    `ArraySpec`s. Other leaves are left as they are.
    """
    if not isinstance(leaf, (np.ndarray, np.generic)):
        return leaf
    if _tensorflow.is_imported():
        return sys.modules["tensorflow"].TensorSpec(leaf.shape, leaf.dtype)
    return signatures.ArraySpec(leaf.shape, leaf.dtype)


def infer_signature(configs: Sequence[Config], step_spec: _SpecNest) -> _SpecNest:
    """Infers the signature of a table from the configs that fill it.

    The leading dimension of a slice node is `(stop - start) // step`, as in
    dm-reverb (for slices whose length is not a multiple of `step` that is one
    less than the number of steps they take, which dm-reverb shares).

    Args:
      configs: Every config that inserts into the table.
      step_spec: A structure of `tf.TensorSpec` (or, without TensorFlow,
        `reverb_tf.ArraySpec`) like the appended steps, or of numpy values
        standing for their shapes and dtypes.

    Returns:
      A structure of specs of the same kind like the items, each named by its path
      ('/'-joined); the leading dimension is None where configs disagree on
      it.

    Raises:
      ValueError: If `configs` is empty, if they have different pattern
        structures or tables, or if they put different dtypes or shapes
        (beyond the leading dimension) at the same place.
    """
    if not configs:
        raise ValueError("At least one config must be provided.")
    first = configs[0]
    if any(config.pattern_structure != first.pattern_structure for config in configs):
        raise ValueError("All configs must have exactly the same pattern_structure.")
    if any(config.table != first.table for config in configs):
        tables = ", ".join(sorted(set(config.table for config in configs)))
        raise ValueError(
            f"All configs must target the same table but provided configs included {tables}."
        )

    flat_step_spec = [_value_spec(leaf) for leaf in tree.flatten(step_spec)]

    def spec_at(path, *nodes):
        step_specs = [flat_step_spec[node.flat_source_index] for node in nodes]
        dtypes = [spec.dtype for spec in step_specs]
        if any(dtype != dtypes[0] for dtype in dtypes):
            raise ValueError(
                f"Configs produce trajectories with multiple dtypes at {path}. Got {dtypes}."
            )
        shapes = []
        for node, spec in zip(nodes, step_specs):
            dims = list(signatures.spec_shape(spec))
            if node.HasField("start"):
                dims = [(node.stop - node.start) // (node.step or 1)] + dims
            shapes.append(dims)
        rank = len(shapes[0])
        if any(len(shape) != rank for shape in shapes) or (
            rank > 1 and any(shape[1:] != shapes[0][1:] for shape in shapes)
        ):
            raise ValueError(
                f"Configs produce trajectories with incompatible shapes at {path}. "
                f"Got {_shapes_string(step_specs[0], shapes)}."
            )
        if all(shape == shapes[0] for shape in shapes):
            shape = shapes[0]
        else:
            shape = [None] + list(shapes[0][1:])
        name = "/".join(str(part) for part in path)
        if signatures._is_tf_spec(step_specs[0]):  # pylint: disable=protected-access
            # tf.TensorSpec in, tf.TensorSpec out (as dm-reverb).
            return type(step_specs[0])(shape=shape, dtype=dtypes[0], name=name)
        return signatures.ArraySpec(shape, signatures.spec_dtype(step_specs[0]), name)

    patterns = [unpack_pattern(config) for config in configs]
    return tree.map_structure_with_path(spec_at, *patterns)


def _as_operand(cmp: Any) -> Any:
    """A boolean right-hand side as the integer the condition proto holds.

    A `data` condition on a bool column compares with True or False (as in
    dm-reverb, `== True` is `eq: 1`); protobuf refuses a bool for an int
    field, and numpy's bool has no `__index__`.
    """
    if isinstance(cmp, (bool, np.bool_)):
        return int(cmp)
    return cmp


class _ConditionBuilder:
    """A condition's left-hand side; comparing it gives a `Condition` proto.

    `builder % m` sets a modulus first, so `step_index() % 3 == 1` is a
    `mod_eq` condition. `>`, `<`, `<=` and `!=` are expressed with `ge`, `eq`
    and `inverse`.
    """

    def __init__(self, incomplete_condition: ConditionProto):
        self._incomplete_condition = incomplete_condition

    def __mod__(self, cmp: int) -> "_ConditionBuilder":
        condition = copy.deepcopy(self._incomplete_condition)
        condition.mod_eq.mod = cmp
        return _ConditionBuilder(condition)

    # pytype: disable=signature-mismatch
    def __eq__(self, cmp: int) -> ConditionProto:
        cmp = _as_operand(cmp)
        condition = copy.deepcopy(self._incomplete_condition)
        if condition.mod_eq.mod:
            condition.mod_eq.eq = cmp
        else:
            condition.eq = cmp
        return condition

    def __ne__(self, cmp: int) -> ConditionProto:
        condition = self == cmp
        condition.inverse = True
        return condition

    def __gt__(self, cmp: int) -> ConditionProto:
        return self >= cmp + 1

    def __ge__(self, cmp: int) -> ConditionProto:
        cmp = _as_operand(cmp)
        condition = copy.deepcopy(self._incomplete_condition)
        condition.ge = cmp
        return condition

    def __lt__(self, cmp: int) -> ConditionProto:
        return self <= cmp - 1

    def __le__(self, cmp: int) -> ConditionProto:
        condition = self > cmp
        condition.inverse = True
        return condition

    # pytype: enable=signature-mismatch


class Condition:
    """The left-hand sides conditions are built from."""

    @staticmethod
    def step_index():
        """The 0-based index of the most recent step within its episode."""
        return _ConditionBuilder(ConditionProto(step_index=True))

    @staticmethod
    def steps_since_applied():
        """Steps appended since the config last inserted an item (1 at first)."""
        return _ConditionBuilder(ConditionProto(steps_since_applied=True))

    @staticmethod
    def is_end_episode():
        """A complete condition: true only while `end_episode` is called."""
        return ConditionProto(is_end_episode=True, eq=1)

    @staticmethod
    def data(step_structure: tree.Structure[Any]):
        """The value of a scalar integer or bool column in the most recent step.

        Args:
          step_structure: The structure of the appended steps.

        Returns:
          `step_structure` with each leaf replaced by a condition builder for
          that column (`Condition.data(s)['done'] == 1`).
        """
        builders = [
            _ConditionBuilder(ConditionProto(flat_source_index=i))
            for i in range(len(tree.flatten(step_structure)))
        ]
        return tree.unflatten_as(step_structure, builders)


def constant_priority_fn(value: float) -> patterns_pb2.Priority:
    """Returns a priority function that always gives `value`.

    Args:
      value: The priority of every item.

    Returns:
      A `Priority` proto.
    """
    return patterns_pb2.Priority(constant_fn=patterns_pb2.Priority.ConstantPriorityFn(value=value))


def td_error(
    max_priority_weight: float,
    step_structure: tree.Structure[Any],
    get_field_from_step_fn: Callable[[tree.Structure[Any]], Any],
) -> patterns_pb2.Priority:
    """Returns a priority function computed from per-step TD errors.

    With `td` the values of the TD-error column in the item (the last
    pattern node, in flattened order, that reads that column):
    `max_priority_weight * max(|td|) + (1 - max_priority_weight) * mean(|td|)`
    (see https://openreview.net/pdf?id=r1lyTjAqYX). Items that do not read
    the column get priority 0. The column's values must be scalars.

    Args:
      max_priority_weight: Weight of the maximum against the mean.
      step_structure: The structure of the appended steps.
      get_field_from_step_fn: Picks the TD-error field from a step-shaped
        structure (e.g. `lambda step: step['td_error']`).

    Returns:
      A `Priority` proto.
    """
    indices = tree.unflatten_as(step_structure, list(range(len(tree.flatten(step_structure)))))
    index = get_field_from_step_fn(indices)
    return patterns_pb2.Priority(
        td_error=patterns_pb2.Priority.TDError(
            max_priority_weight=max_priority_weight, flat_source_index=index
        )
    )
