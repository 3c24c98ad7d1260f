# SPDX-License-Identifier: Apache-2.0
"""dm-reverb's raw op wrappers (`reverb.cc.ops.gen_reverb_ops`) over reverb_tf's ops.

Programs normally use the datasets and `TFClient`; a few call the raw ops.
Each dm-reverb op function is mapped onto the reverb_tf op that does the same
work, with dm-reverb's arguments:

* `reverb_client(server_address)` returns the handle the other client ops
  take. reverb_tf's ops connect by address (one shared channel per address),
  so the handle is the address as a scalar string tensor.
* `reverb_client_sample` returns `(key, probability, table_size, priority,
  times_sampled, outputs)` as dm-reverb's does (reverb_tf's op also returns
  the table's weight and smallest probability, dropped here).
* `reverb_client_insert` and `reverb_client_update_priorities` as dm-reverb's.
* `reverb_trajectory_dataset` and `reverb_timestep_dataset` return the
  dataset's variant tensor; `dtypes`/`shapes` cover the sample info fields
  (key, probability, table_size, priority, times_sampled) and then the data
  columns, flat, as in dm-reverb.
* `reverb_pattern_dataset` takes `configs` as serialized
  `patterns_pb2.StructuredWriterConfig`s of `reverb_tf.cc.patterns_pb2`.

The CamelCase names (`ReverbClientSample`, ...) take keyword arguments only,
as `tf.raw_ops` functions do. reverb_tf's own op functions
(`reverb_tf_sample`, ...) are here too.

Importing this module imports TensorFlow and loads the op library.
"""

import collections
from typing import Any, Callable, Optional, Sequence

from reverb_tf import _ops
from reverb_tf import _tensorflow

tf = _tensorflow.import_tensorflow("reverb_tf.cc.ops.gen_reverb_ops")

_LIBRARY = _ops.load()

# The five SampleInfo fields lead a dataset's flat dtypes and shapes.
_NUM_INFO_FIELDS = 5

# What `reverb_client_sample` returns, as dm-reverb's generated wrapper does.
_ReverbClientSampleOutput = collections.namedtuple(
    "ReverbClientSample",
    ["key", "probability", "table_size", "priority", "times_sampled", "outputs"],
)

# reverb_tf's raw op functions, under their own names.
for _name in dir(_LIBRARY):
    if _name.startswith("reverb_tf_") or _name.startswith("ReverbTf"):
        globals()[_name] = getattr(_LIBRARY, _name)


def reverb_client(
    server_address: str, container: str = "", shared_name: str = "", name: Optional[str] = None
) -> Any:
    """The handle the client ops take: the server's address as a string tensor.

    Args:
      server_address: "host:port" of the server (or its shards).
      container: Accepted for dm-reverb compatibility; unused.
      shared_name: Accepted for dm-reverb compatibility; unused (channels
        are shared per address).
      name: Name of the op.

    Returns:
      A scalar tf.string tensor.
    """
    del container, shared_name
    from reverb_tf import _address  # pylint: disable=g-import-not-at-top

    return tf.constant(_address.op_address(server_address), tf.string, name=name or "reverb_client")


def reverb_client_sample(
    handle: Any,
    table: Any,
    Toutput_list: Sequence[Any],  # pylint: disable=invalid-name
    name: Optional[str] = None,
) -> _ReverbClientSampleOutput:
    """Samples one item of `table`; returns its first timestep.

    Args:
      handle: From `reverb_client`.
      table: Name of the table (a scalar string or tensor).
      Toutput_list: Dtypes of the item's flat columns.
      name: Name of the op.

    Returns:
      `(key, probability, table_size, priority, times_sampled, outputs)`,
      `outputs` the list of the item's column tensors.
    """
    outputs = _LIBRARY.reverb_tf_sample(
        server_address=handle, table=table, dtypes=list(Toutput_list), name=name
    )
    return _ReverbClientSampleOutput(*outputs[:_NUM_INFO_FIELDS], list(outputs[-1]))


def reverb_client_insert(
    handle: Any, data: Sequence[Any], tables: Any, priorities: Any, name: Optional[str] = None
) -> Any:
    """Inserts `data` as a one-step item into each of `tables`.

    Args:
      handle: From `reverb_client`.
      data: The item's column tensors.
      tables: String vector of table names.
      priorities: float64 vector, one per table.
      name: Name of the op.

    Returns:
      The op.
    """
    return _LIBRARY.reverb_tf_insert(
        server_address=handle, tables=tables, priorities=priorities, data=list(data), name=name
    )


def reverb_client_update_priorities(
    handle: Any, table: Any, keys: Any, priorities: Any, name: Optional[str] = None
) -> Any:
    """Sets the priorities of items of `table`; unknown keys are skipped.

    Args:
      handle: From `reverb_client`.
      table: Name of the table.
      keys: uint64 vector of item keys.
      priorities: float64 vector, one per key.
      name: Name of the op.

    Returns:
      The op.
    """
    return _LIBRARY.reverb_tf_update_priorities(
        server_address=handle, table=table, keys=keys, priorities=priorities, name=name
    )


def reverb_trajectory_dataset(
    server_address: Any,
    table: Any,
    dtypes: Sequence[Any],
    shapes: Sequence[Any],
    max_in_flight_samples_per_worker: int = 100,
    num_workers_per_iterator: int = -1,
    max_samples_per_stream: int = -1,
    rate_limiter_timeout_ms: int = -1,
    max_samples: int = -1,
    name: Optional[str] = None,
) -> Any:
    """The variant tensor of a dataset of whole items (a `TrajectoryDataset`).

    Args:
      server_address: "host:port" of the server (a string or string tensor).
      table: Name of the table.
      dtypes: Flat dtypes: the five info fields, then the data columns.
      shapes: Flat shapes, as `dtypes`.
      max_in_flight_samples_per_worker: As in `TrajectoryDataset`.
      num_workers_per_iterator: As in `TrajectoryDataset`.
      max_samples_per_stream: As in `TrajectoryDataset`.
      rate_limiter_timeout_ms: As in `TrajectoryDataset`.
      max_samples: As in `TrajectoryDataset`.
      name: Name of the op.

    Returns:
      A scalar variant tensor.
    """
    return _LIBRARY.reverb_tf_trajectory_dataset(
        server_address=server_address,
        table=table,
        dtypes=list(dtypes),
        shapes=list(shapes),
        max_in_flight_samples_per_worker=max_in_flight_samples_per_worker,
        num_workers_per_iterator=num_workers_per_iterator,
        max_samples_per_stream=max_samples_per_stream,
        max_samples=max_samples,
        rate_limiter_timeout_ms=rate_limiter_timeout_ms,
        name=name,
    )


def reverb_timestep_dataset(
    server_address: Any,
    table: Any,
    dtypes: Sequence[Any],
    shapes: Sequence[Any],
    max_in_flight_samples_per_worker: int = 100,
    num_workers_per_iterator: int = -1,
    max_samples_per_stream: int = -1,
    rate_limiter_timeout_ms: int = -1,
    max_samples: int = -1,
    name: Optional[str] = None,
) -> Any:
    """The variant tensor of a dataset of single timesteps (a `TimestepDataset`).

    Args:
      server_address: "host:port" of the server (a string or string tensor).
      table: Name of the table.
      dtypes: Flat dtypes: the five info fields, then one step's columns.
      shapes: Flat shapes, as `dtypes` (the info fields' are scalars).
      max_in_flight_samples_per_worker: As in `TimestepDataset`.
      num_workers_per_iterator: As in `TimestepDataset`.
      max_samples_per_stream: As in `TimestepDataset`.
      rate_limiter_timeout_ms: As in `TimestepDataset`.
      max_samples: As in `TimestepDataset`.
      name: Accepted for dm-reverb compatibility (the dataset is several ops).

    Returns:
      A scalar variant tensor.
    """
    del name
    from reverb_tf import timestep_dataset  # pylint: disable=g-import-not-at-top

    dataset = timestep_dataset.TimestepDataset(
        server_address,
        table,
        list(dtypes)[_NUM_INFO_FIELDS:],
        [tf.TensorShape(s) for s in list(shapes)[_NUM_INFO_FIELDS:]],
        max_in_flight_samples_per_worker,
        num_workers_per_iterator,
        max_samples_per_stream,
        rate_limiter_timeout_ms,
        max_samples,
    )
    return dataset._variant_tensor  # pylint: disable=protected-access


def reverb_pattern_dataset(
    dataset: Any,
    other_arguments: Sequence[Any],
    clear_after_episode: bool,
    configs: Sequence[Any],
    is_end_of_episode: Any,
    dtypes: Sequence[Any],
    shapes: Sequence[Any],
    metadata: str = "",
    name: Optional[str] = None,
) -> Any:
    """The variant tensor of a dataset that applies patterns to steps.

    Args:
      dataset: The variant tensor of the dataset of steps.
      other_arguments: Captured inputs of `is_end_of_episode`.
      clear_after_episode: Whether the step buffer is cleared after an
        episode's end.
      configs: Serialized `StructuredWriterConfig`s.
      is_end_of_episode: The function (a concrete function) giving a step's
        end-of-episode flag.
      dtypes: Flat dtypes of the produced elements.
      shapes: Flat shapes of the produced elements.
      metadata: Accepted for dm-reverb compatibility; unused.
      name: Name of the op.

    Returns:
      A scalar variant tensor.
    """
    del metadata
    return _LIBRARY.reverb_tf_pattern_dataset(
        input_dataset=dataset,
        other_arguments=list(other_arguments),
        is_end_of_episode=is_end_of_episode,
        dtypes=list(dtypes),
        shapes=list(shapes),
        configs=list(configs),
        clear_after_episode=clear_after_episode,
        name=name,
    )


def _keyword_only(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function` taking keyword arguments only, as `tf.raw_ops` functions do."""

    def raw_op(**kwargs: Any) -> Any:
        return function(**kwargs)

    raw_op.__name__ = function.__name__
    raw_op.__doc__ = function.__doc__
    return raw_op


ReverbClient = _keyword_only(reverb_client)
ReverbClientSample = _keyword_only(reverb_client_sample)
ReverbClientInsert = _keyword_only(reverb_client_insert)
ReverbClientUpdatePriorities = _keyword_only(reverb_client_update_priorities)
ReverbTrajectoryDataset = _keyword_only(reverb_trajectory_dataset)
ReverbTimestepDataset = _keyword_only(reverb_timestep_dataset)
ReverbPatternDataset = _keyword_only(reverb_pattern_dataset)
