# SPDX-License-Identifier: Apache-2.0
"""ReverbDataset / TrajectoryDataset: a reverb_tf table as a tf.data source.

The dataset is a real tf.data source backed by a C++ kernel
(`kernels/trajectory_dataset_kernel.cc`) that streams samples from the server
with flow-control credits: no Python runs per element, so it works in
`tf.function`, in graph mode and under `tf.distribute`, and it can be
serialized with the rest of the input pipeline.
"""

from typing import Any, Optional, Sequence, Tuple, Union

import tree

from reverb_tf import _tensorflow

# Before TensorFlow's own modules: their absence gets the clear error.
tf = _tensorflow.import_tensorflow("reverb_tf.TrajectoryDataset")

# pylint: disable=g-import-not-at-top,g-direct-tensorflow-import,wrong-import-position
from tensorflow.python.data.ops import dataset_ops

from reverb_tf import _address
from reverb_tf import client as client_lib
from reverb_tf import _ops
from reverb_tf import replay_sample
# pylint: enable=g-import-not-at-top,g-direct-tensorflow-import,wrong-import-position


def _dataset_op():
    return _ops.load().reverb_tf_trajectory_dataset


class _ReplaySource(dataset_ops.DatasetSource):
    """A tf.data source of ReplaySamples: no input datasets, a fixed spec."""

    _element_spec: Any

    def _inputs(self):
        return []

    @property
    def element_spec(self) -> Any:
        """`ReplaySample(info=SampleInfo(...), data=...)` of `tf.TensorSpec`."""
        return self._element_spec

    @classmethod
    def from_table_signature(
        cls,
        server_address: Union[str, Sequence[str], tf.Tensor],
        table: str,
        max_in_flight_samples_per_worker: int,
        num_workers_per_iterator: int = -1,
        max_samples_per_stream: int = -1,
        rate_limiter_timeout_ms: int = -1,
        get_signature_timeout_secs: Optional[float] = None,
        max_samples: int = -1,
        sampling_stats: bool = False,
    ) -> Any:
        """Creates the dataset with the table's signature as its dtypes and shapes.

        For `TrajectoryDataset` the signature is the structure of each item;
        for `TimestepDataset` it must describe one timestep (items written
        without a time dimension, e.g. `history[...][-1]` columns, each one
        element); for multi-step items pass per-step `dtypes`/`shapes` to its
        constructor instead.

        Args:
          server_address: "host:port" of the server, or its shards (as for
            the constructor); the signature is read from them, so a tensor
            must be eager (or a constant).
          table: Name of the table; it must have a signature.
          max_in_flight_samples_per_worker: As in the constructor.
          num_workers_per_iterator: As in the constructor.
          max_samples_per_stream: As in the constructor.
          rate_limiter_timeout_ms: As in the constructor.
          get_signature_timeout_secs: How long to wait for the server to
            answer; None waits forever.
          max_samples: As in the constructor.
          sampling_stats: As in the constructor (reverb_tf extension).

        Returns:
          The dataset.

        Raises:
          ValueError: If the table has no signature, or (InvalidArgumentError)
            the server has no such table.
          DeadlineExceededError: If the server does not answer in time.
          TypeError: If `server_address` is a tensor whose value is only
            known when the graph runs (as dm-reverb: it takes a str here).
        """
        server_address = _address.python_address(server_address, "from_table_signature")
        shapes, dtypes = _signature_shapes_and_dtypes(
            server_address, table, get_signature_timeout_secs
        )
        return cls(
            server_address,
            table,
            dtypes,
            shapes,
            max_in_flight_samples_per_worker,
            num_workers_per_iterator,
            max_samples_per_stream,
            rate_limiter_timeout_ms,
            max_samples,
            sampling_stats=sampling_stats,
        )

    def make_initializable_iterator(self, shared_name: Optional[str] = None) -> Any:
        """A TF1 iterator to run in a `tf.compat.v1.Session` (graph mode).

        Args:
          shared_name: Shares the iterator across sessions on one device.

        Returns:
          A `tf.compat.v1.data.Iterator`; run its `initializer` first.
        """
        return tf.compat.v1.data.make_initializable_iterator(self, shared_name)

    @property
    def output_classes(self) -> Any:
        """TF1: the classes of the elements' components."""
        return tf.compat.v1.data.get_output_classes(self)

    @property
    def output_shapes(self) -> Any:
        """TF1: the shapes of the elements' components."""
        return tf.compat.v1.data.get_output_shapes(self)

    @property
    def output_types(self) -> Any:
        """TF1: the dtypes of the elements' components."""
        return tf.compat.v1.data.get_output_types(self)

    def make_one_shot_iterator(self) -> Any:
        """A TF1 iterator that needs no initialization (graph mode).

        Returns:
          A `tf.compat.v1.data.Iterator`.
        """
        return tf.compat.v1.data.make_one_shot_iterator(self)


class TrajectoryDataset(_ReplaySource):
    """Streams `ReplaySample(info, data)` elements from a table.

    `data` has the nested structure of `dtypes`/`shapes` (for
    `from_table_signature`, the table's signature); `info` is a `SampleInfo`
    of scalars (key uint64, probability float64, table_size int64, priority
    float64, times_sampled int32).
    """

    def __init__(
        self,
        server_address: Union[str, Sequence[str], tf.Tensor],
        table: str,
        dtypes: Any,
        shapes: Any,
        max_in_flight_samples_per_worker: int,
        num_workers_per_iterator: int = -1,
        max_samples_per_stream: int = -1,
        rate_limiter_timeout_ms: int = -1,
        max_samples: int = -1,
        sampling_stats: bool = False,
        _unsqueeze: bool = False,
    ) -> None:
        """Creates the dataset.

        Args:
          server_address: "host:port" of the server, or the shards of the
            table (reverb_tf extension): a list of addresses, a
            comma-separated string of them, or a "dns:///name:port" that
            resolves to several addresses. Samples of all shards are merged
            in proportion to each shard's size (its priority sum for a
            prioritized table), and a shard that goes away is reconnected
            in the background while the others serve (docs/scale_out.md).
            A scalar tf.string tensor of any of these works too, also one
            whose value is only known when the graph runs.
          table: Name of the table to sample.
          dtypes: Nested structure of `tf.DType` of the data.
          shapes: Nested structure of `tf.TensorShape`, as `dtypes` (per item,
            time dimension included for unsqueezed columns).
          max_in_flight_samples_per_worker: Samples each stream requests
            ahead of consumption; bounds the memory a slow consumer can cost.
          num_workers_per_iterator: Streams per iterator, each decoded by a
            thread of its own (more than one speeds up a consumer that
            decoding holds back), at least one per shard; -1 (auto): one per
            shard. A table whose sampler hands items out in order (a queue,
            a stack, a heap) keeps one stream per shard, as dm-reverb
            requires of such tables.
          max_samples_per_stream: After this many samples a stream is ended
            and a new one opened (the iterator goes on); -1: no limit.
          rate_limiter_timeout_ms: End the iterator (end of sequence) if the
            table's rate limiter blocks sampling for this long; -1: never.
          max_samples: End the iterator after this many samples; no more
            are requested from the server. -1: unlimited.
          sampling_stats: If True (reverb_tf extension), `info` is a
            `SampleInfoWithStats`: two more float64 fields, the table's
            total weight and smallest sampling probability when the item was
            chosen, so that `info.importance_weight(beta)` gives each
            sample's normalised importance-sampling weight in the graph.
          _unsqueeze: Internal (TimestepDataset): give single-step columns
            back their time dimension.

        Raises:
          ValueError: If an argument is out of range or `shapes` and `dtypes`
            differ in structure.
        """
        client_lib.check_sampler_arguments(
            max_in_flight_samples_per_worker,
            num_workers_per_iterator,
            max_samples_per_stream,
            max_samples,
            rate_limiter_timeout_ms,
        )
        server_address = _address.op_address(server_address)
        # `dtypes` fixes the structure: a shape given as a list is one leaf.
        shapes = tree.map_structure_up_to(dtypes, tf.TensorShape, shapes)
        data_spec = _lists_to_tuples(
            tf.nest.map_structure(
                lambda shape, dtype: tf.TensorSpec(shape, _dtype(dtype)), shapes, dtypes
            )
        )
        info_type = replay_sample.info_type(sampling_stats)
        info_spec = info_type(*[tf.TensorSpec([], dtype) for dtype in info_type.tf_dtypes()])
        self._element_spec = replay_sample.ReplaySample(info=info_spec, data=data_spec)
        flat_specs = tf.nest.flatten(self._element_spec)
        self._server_address = server_address
        self._table = table
        variant = _dataset_op()(
            server_address=server_address,
            table=table,
            max_in_flight_samples_per_worker=max_in_flight_samples_per_worker,
            num_workers_per_iterator=num_workers_per_iterator,
            max_samples_per_stream=max_samples_per_stream,
            max_samples=max_samples,
            rate_limiter_timeout_ms=rate_limiter_timeout_ms,
            unsqueeze=_unsqueeze,
            sampling_stats=sampling_stats,
            column_names=[
                "/".join(str(k) for k in path) for path, _ in tree.flatten_with_path(data_spec)
            ],
            dtypes=[spec.dtype for spec in flat_specs],
            shapes=[spec.shape for spec in flat_specs],
        )
        super().__init__(variant)


ReverbDataset = TrajectoryDataset


def _dtype(value: Any) -> tf.DType:
    """`value` as a `tf.DType`.

    Raises:
      TypeError: `value` names no dtype; in the words of dm-reverb's dataset
        op, which converts its `dtypes` attribute itself.
    """
    try:
        return tf.as_dtype(value)
    except TypeError:
        raise TypeError(f"Expected DataType for argument 'dtypes' not {value!r}.") from None


def _lists_to_tuples(structure: Any) -> Any:
    """tf.data treats a list as one value, not a structure: make lists tuples.

    (tf.data does the same to the structures a dataset function returns.)
    """
    if isinstance(structure, list):
        return tuple(_lists_to_tuples(v) for v in structure)
    if isinstance(structure, dict):
        return type(structure)((k, _lists_to_tuples(v)) for k, v in structure.items())
    if isinstance(structure, tuple) and hasattr(structure, "_fields"):
        return type(structure)(*[_lists_to_tuples(v) for v in structure])
    if isinstance(structure, tuple):
        return tuple(_lists_to_tuples(v) for v in structure)
    return structure


def _signature_shapes_and_dtypes(
    server_address: Union[str, Sequence[str]], table: str, timeout_secs: Optional[float]
) -> Tuple[Any, Any]:
    from reverb_tf import errors  # pylint: disable=g-import-not-at-top

    client = client_lib.Client(server_address)
    signatures = client._signatures(timeout_secs or None)  # pylint: disable=protected-access
    # dm-reverb's words, which programs match on.
    if table not in signatures:
        raise errors.InvalidArgumentError(
            f"Server at {client.server_address} does not contain any table named {table}. "
            f"Found: {', '.join(sorted(signatures))}."
        )
    if signatures[table] is None:
        raise ValueError(
            f"Table {table} at {client.server_address} does not have a signature. (Create "
            "it with Table(signature=...) or pass shapes and dtypes explicitly.)"
        )
    signature = signatures[table]
    return (
        tf.nest.map_structure(lambda spec: spec.shape, signature),
        tf.nest.map_structure(lambda spec: spec.dtype, signature),
    )
