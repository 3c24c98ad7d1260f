# SPDX-License-Identifier: Apache-2.0
"""Types shared across the API: `TableInfo`, selector aliases, `SpecNest`.

`TableInfo` is what `Client.server_info()` returns per table. As in dm-reverb,
its option and limiter fields are protocol buffer messages
(`reverb_tf.cc.schema_pb2`), so `info.sampler_options.WhichOneof(
'distribution')`, `info.sampler_options.prioritized.priority_exponent` and
`info.rate_limiter_info.insert_stats.completed` work as they do there.
"""

import dataclasses
from typing import Any, Iterable, Mapping, Optional, Union

from reverb_tf import item_selectors
from reverb_tf.cc import schema_pb2

Fifo = item_selectors.Fifo
Heap = item_selectors.HeapSelector
Lifo = item_selectors.Lifo
Prioritized = item_selectors.Prioritized
Uniform = item_selectors.Uniform

SelectorType = Union[
    item_selectors.FifoSelector,
    item_selectors.HeapSelector,
    item_selectors.LifoSelector,
    item_selectors.PrioritizedSelector,
    item_selectors.UniformSelector,
]

# A nest of `tf.TensorSpec` (TensorFlow is not imported for a type alias).
SpecNest = Union[Any, Iterable["SpecNest"], Mapping[str, "SpecNest"]]


@dataclasses.dataclass
class TableInfo:
    """Metadata and live counters of one table.

    Attributes:
      name: The table's name.
      sampler_options: The sampler, a `schema_pb2.KeyDistributionOptions`.
      remover_options: The remover, a `schema_pb2.KeyDistributionOptions`.
      max_size: Maximum number of items.
      max_times_sampled: Samples after which an item is removed (0: no limit).
      rate_limiter_info: A `schema_pb2.RateLimiterInfo`: the limiter's
        parameters, call statistics and (reverb_tf's addition) its counters.
      signature: The table's signature as nested `tf.TensorSpec`, or None.
      current_size: Number of items in the table.
      num_episodes: Episodes with at least one item in the table.
      num_deleted_episodes: Episodes whose last item has left the table.
      num_unique_samples: Number of items sampled at least once.
      table_worker_time: A `schema_pb2.TableWorkerTime`; all zeros, since
        reverb_tf tables have no worker thread to time.
    """

    name: str
    sampler_options: schema_pb2.KeyDistributionOptions
    remover_options: schema_pb2.KeyDistributionOptions
    max_size: int
    max_times_sampled: int
    rate_limiter_info: schema_pb2.RateLimiterInfo
    signature: Optional[SpecNest]
    current_size: int
    num_episodes: int
    num_deleted_episodes: int
    num_unique_samples: int
    table_worker_time: schema_pb2.TableWorkerTime

    @classmethod
    def from_serialized_proto(cls, proto_string: bytes) -> "TableInfo":
        """Builds a TableInfo from a serialized `schema_pb2.TableInfo`.

        Args:
          proto_string: The serialized message (e.g. `to_serialized_proto()`).

        Returns:
          The TableInfo, its signature decoded into nested `tf.TensorSpec`.
        """
        from reverb_tf import signatures  # pylint: disable=g-import-not-at-top

        proto = schema_pb2.TableInfo.FromString(proto_string)
        nested = proto.signature.nested_structure
        return cls.from_proto(proto, signatures.decode_structure(nested) if nested else None)

    @classmethod
    def from_proto(cls, proto: schema_pb2.TableInfo, signature: Optional[SpecNest]) -> "TableInfo":
        """Builds a TableInfo from a `schema_pb2.TableInfo` message.

        Args:
          proto: The message (the native core's conversion fills it in).
          signature: The table's signature, already decoded (callers cache
            the decoding), or None.

        Returns:
          The TableInfo; its option and limiter fields are the message's own.
        """
        return cls(
            name=proto.name,
            sampler_options=proto.sampler_options,
            remover_options=proto.remover_options,
            max_size=proto.max_size,
            max_times_sampled=proto.max_times_sampled,
            rate_limiter_info=proto.rate_limiter_info,
            signature=signature,
            current_size=proto.current_size,
            num_episodes=proto.num_episodes,
            num_deleted_episodes=proto.num_deleted_episodes,
            num_unique_samples=proto.num_unique_samples,
            table_worker_time=proto.table_worker_time,
        )
