# SPDX-License-Identifier: Apache-2.0
"""TFClient: reverb_tf calls as TensorFlow ops, for tf.function actors and learners.

Each method adds an op whose C++ kernel talks to the server
(`kernels/tf_client_kernels.cc`), so no Python runs when the graph executes.
Executing eagerly, `update_priorities` makes the kernel's call without the op
when it can (`TFClient._update_without_op`): a learner's hottest call then
skips TensorFlow's dispatch of the op.
"""

import numbers
from typing import Any, List, Optional, Sequence, Union

from absl import logging

from reverb_tf import _tensorflow
from reverb_tf import _address
from reverb_tf import _native
from reverb_tf import _ops
from reverb_tf import replay_sample

tf = _tensorflow.import_tensorflow("reverb_tf.TFClient")


class TFClient:
    """Client of a reverb_tf server whose calls are TensorFlow ops."""

    def __init__(
        self,
        server_address: Union[str, Sequence[str], tf.Tensor],
        shared_name: Optional[str] = None,
        name: str = "reverb",
    ) -> None:
        """Creates the client; it connects on first use.

        Args:
          server_address: "host:port" of the server, or its shards as
            `reverb_tf.Client` takes them (reverb_tf extension): inserts go
            to one shard, priority updates to every shard, where the one
            holding each key applies it. A scalar tf.string tensor of
            either works too (reverb_tf extension: dm-reverb's TFClient takes
            a str), also one whose value is only known when the graph runs.
          shared_name: Accepted for dm-reverb compatibility (connections are
            shared per address anyway); a str or None.
          name: Name scope of the ops.

        Raises:
          TypeError: If `server_address` is None or a number, or
            `shared_name` is neither None nor a str.
        """
        # dm-reverb passes both to an op at once, which fails these so.
        if server_address is None or isinstance(server_address, numbers.Number):
            raise TypeError(
                f"Expected string for argument 'server_address' not {server_address!r}."
            )
        if shared_name is not None and not isinstance(shared_name, str):
            raise TypeError(f"Expected string for argument 'shared_name' not {shared_name!r}.")
        # One channel per address is shared by all kernels.
        del shared_name
        self._server_address = _address.op_address(server_address)
        self._name = name
        self._ops = _ops.load()
        # Eager string tensors for the address and table names: building them
        # on every call costs more than the kernel's own work.
        self._eager_strings = {}

    @property
    def server_address(self) -> Union[str, tf.Tensor]:
        """The target the ops talk to ("host:port", or its shards).

        A graph tensor if the client was given one.
        """
        return self._server_address

    def _string(self, value: str) -> Any:
        if not tf.executing_eagerly():
            return value
        if not isinstance(value, (str, bytes)):
            # A tensor as it is; anything else fails as TF fails it (TypeError).
            return tf.convert_to_tensor(value, tf.string)
        tensor = self._eager_strings.get(value)
        if tensor is None:
            tensor = self._eager_strings[value] = tf.constant(value)
        return tensor

    def sample(
        self, table: str, data_dtypes: Any, name: Optional[str] = None, sampling_stats: bool = False
    ) -> replay_sample.ReplaySample:
        """Samples one item and returns its first timestep, as dm-reverb does.

        Blocks while the rate limiter holds sampling back.

        Args:
          table: Name of the table.
          data_dtypes: Dtypes of the item's columns: a `tf.DType` or a
            nested structure of them, in the structure of the item (it is
            flattened in `tf.nest` order, sorted dict keys).
          name: Name of the op.
          sampling_stats: If True (reverb_tf extension), `info` is a
            `SampleInfoWithStats` (importance-sampling weights, as for
            `Client.sample`).

        Returns:
          `ReplaySample(info, data)` with `data` the column tensors of the
          item's first timestep (columns lose their time dimension), in the
          structure of `data_dtypes`.

        Raises:
          tf.errors.InvalidArgumentError: (when run) if the item's columns
            are not `data_dtypes`.
        """
        with _name_scope(name, f"{self._name}_sample"):
            outputs = self._ops.reverb_tf_sample(
                server_address=self._server_address,
                table=table,
                dtypes=[tf.as_dtype(d) for d in tf.nest.flatten(data_dtypes)],
            )
            info_cls = replay_sample.info_type(sampling_stats)
            info = info_cls(*outputs[: len(info_cls._fields)])
            data = tf.nest.pack_sequence_as(data_dtypes, list(outputs[7]))
            return replay_sample.ReplaySample(info=info, data=data)

    def insert(
        self, data: List[Any], tables: Any, priorities: Any, name: Optional[str] = None
    ) -> tf.Operation:
        """Inserts `data` as one single-step item into each of `tables`.

        Args:
          data: Tensors, one per column of the item.
          tables: String vector of table names.
          priorities: float64 vector, one priority per table.
          name: Name of the op.

        Returns:
          The op (runs when executed; returns once the server stored it).

        Raises:
          ValueError: If `data` is empty, `tables` or `priorities` is not a
            vector, or their lengths differ (when known while tracing).
        """
        if not data:
            raise ValueError("insert needs at least one tensor")
        with _name_scope(name, f"{self._name}_insert"):
            # dm-reverb's words for what its checks find. Tensors, and (an
            # extension) sequences and arrays of names and priorities.
            for what, value, dtype in (
                ("tables", tables, tf.string),
                ("priorities", priorities, tf.float64),
            ):
                if value is None or isinstance(value, (dict, str, bytes, numbers.Number)):
                    raise TypeError(
                        f"{what} must be a {dtype.name} tensor of rank 1, got {value!r}"
                    )
                if isinstance(value, (tf.Tensor, tf.Variable)) and value.dtype != dtype:
                    raise ValueError(
                        f"{what} must be a {dtype.name} tensor of rank 1, got {value.dtype.name}"
                    )
            tables = tf.convert_to_tensor(tables, tf.string)
            priorities = tf.convert_to_tensor(priorities, tf.float64)
            for what, tensor in (("tables", tables), ("priorities", priorities)):
                if tensor.shape.rank is not None and tensor.shape.rank != 1:
                    raise ValueError(
                        f"{what} must be a {tensor.dtype.name} tensor of rank 1, "
                        f"got shape {tensor.shape}"
                    )
            if not tables.shape.is_compatible_with(priorities.shape):
                raise ValueError(
                    f"priorities and tables must have the same shape: {priorities.shape} "
                    f"and {tables.shape} (one priority per table)"
                )
            return self._ops.reverb_tf_insert(
                server_address=self._server_address,
                tables=tables,
                priorities=priorities,
                data=[tf.convert_to_tensor(d) for d in data],
            )

    def update_priorities(
        self, table: str, keys: Any, priorities: Any, name: Optional[str] = None
    ) -> tf.Operation:
        """Sets priorities of items of `table`; keys no longer stored are skipped.

        Args:
          table: Name of the table.
          keys: uint64 vector of item keys.
          priorities: float64 vector, one per key.
          name: Name of the op.

        Returns:
          The op.
        """
        # The hot path of learners running eagerly (a name only names ops in
        # a graph; one that is no str still fails below, as in dm-reverb).
        if tf.executing_eagerly() and name is None:
            keys = _as_tensor(keys, tf.uint64)
            priorities = _as_tensor(priorities, tf.float64)
            if self._update_without_op(table, keys, priorities):
                return None  # what the op returns when executing eagerly
            return self._ops.reverb_tf_update_priorities(
                server_address=self._string(self._server_address),
                table=self._string(table),
                keys=keys,
                priorities=priorities,
            )
        with _name_scope(name, f"{self._name}_update_priorities"):
            if tf.executing_eagerly():
                keys, priorities = _as_tensor(keys, tf.uint64), _as_tensor(priorities, tf.float64)
            else:
                # A tensor of another dtype (an eager one captured by the
                # function in particular) would end in TF's internal
                # "AssertionError: Unreachable", as it does in dm-reverb.
                for what, value, dtype in (
                    ("keys", keys, tf.uint64),
                    ("priorities", priorities, tf.float64),
                ):
                    if isinstance(value, (tf.Tensor, tf.Variable)) and value.dtype != dtype:
                        raise TypeError(
                            f"Input '{what}' of 'ReverbTfUpdatePriorities' Op has type "
                            f"{value.dtype.name} that does not match expected type of "
                            f"{dtype.name}."
                        )
            # Other values the op converts itself: its messages name the
            # parameter, as dm-reverb's op's do.
            return self._ops.reverb_tf_update_priorities(
                server_address=self._server_address,
                table=table,
                keys=keys,
                priorities=priorities,
            )

    def _update_without_op(self, table: Any, keys: Any, priorities: Any) -> bool:
        """The eager op's work without TensorFlow's dispatch of the op.

        TensorFlow runs each eager op as a function, which cost about 50 us
        of a 190 us remote update here. The native module makes the update
        through the same shared client as the op's kernel. Anything the op
        would answer differently (an argument it refuses, any error) is left
        to the op, which raises it in its classes and words; making the
        update again is safe, since updates are idempotent.

        Args:
          table: The table argument as given.
          keys: An eager uint64 tensor.
          priorities: An eager float64 tensor.

        Returns:
          True if the update was made; False if the op must make it.
        """
        if (
            type(table) is not str  # pylint: disable=unidiomatic-typecheck
            or not isinstance(self._server_address, str)
            or keys.shape.rank != 1
            or keys.shape != priorities.shape
        ):
            return False
        try:
            *_, warning = _native.core().tf_update_priorities(
                self._server_address, table, keys.numpy(), priorities.numpy()
            )
        except Exception:  # pylint: disable=broad-except
            return False
        if warning:  # worded by the native client, at most once a minute
            logging.warning("reverb_tf: %s", warning)
        return True


def _name_scope(name: Optional[str], default_name: str) -> Any:
    """The ops' name scope: `name`, or `default_name` if it is None or empty.

    TF's v1 name scope, which dm-reverb's TFClient uses: a `name` that is no
    str then fails as it fails there (ValueError eagerly, TypeError in a
    graph).
    """
    return tf.compat.v1.name_scope(name, default_name)


def _as_tensor(value: Any, dtype: tf.DType) -> Any:
    """`tf.convert_to_tensor`, skipped for a tensor that already has `dtype`.

    The check costs less than the conversion call, which matters for eager
    learners calling `update_priorities` thousands of times a second.
    """
    if isinstance(value, tf.Tensor) and value.dtype == dtype:
        return value
    return tf.convert_to_tensor(value, dtype)
