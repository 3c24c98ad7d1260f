# SPDX-License-Identifier: Apache-2.0
"""dm-reverb's native names (`reverb.pybind`), backed by reverb_tf's classes.

Programs reach for `reverb.pybind` mostly for the selector classes, the
chunker options and `Sampler.NUM_INFO_TENSORS`. Each name here is the
reverb_tf object that plays the same part: the selectors and rate limiter
are the Python classes `Table` takes, `Client`/`Server`/`Writer` are the
classes of the native module `reverb_tf._core`, the chunker options record
what a writer should do. Table extensions do not exist in reverb_tf:
`TableExtension` refuses to be created, with an error that says so.
"""

from typing import Any, Optional

from reverb_tf import _native
from reverb_tf import checkpointers as _checkpointers
from reverb_tf import item_selectors as _item_selectors
from reverb_tf import rate_limiters as _rate_limiters
from reverb_tf import replay_sample as _replay_sample
from reverb_tf import server as _server
from reverb_tf import trajectory_writer as _trajectory_writer
from reverb_tf.cc import schema_pb2 as _schema_pb2

_core = _native.core()

ItemSelector = _item_selectors.ItemSelector
FifoSelector = _item_selectors.FifoSelector
LifoSelector = _item_selectors.LifoSelector
UniformSelector = _item_selectors.UniformSelector
PrioritizedSelector = _item_selectors.PrioritizedSelector
HeapSelector = _item_selectors.HeapSelector


class RateLimiter(_rate_limiters.RateLimiter):
    """dm-reverb's native rate limiter, from the four raw parameters.

    A class of its own, as in dm-reverb: the limiters of `reverb.rate_limiters`
    (MinSize, Queue, ...) are not instances of it, while tables take both.
    """


Table = _server.Table
Checkpointer = _checkpointers.CheckpointerBase
WeakCellRef = _trajectory_writer.WeakCellRef

Client = _core.Client
Server = _core.Server
# One native writer serves the legacy and the trajectory API.
Writer = _core.TrajectoryWriter
TrajectoryWriter = _core.TrajectoryWriter
StructuredWriter = _core.StructuredWriter


class ChunkerOptions:
    """Base of the chunker options: how a writer groups steps into chunks."""


class ConstantChunkerOptions(ChunkerOptions):
    """Chunks of a fixed number of steps.

    Attributes:
      max_chunk_length: Steps per chunk.
      num_keep_alive_refs: Most recent steps that stay referenceable.
    """

    def __init__(self, max_chunk_length: int, num_keep_alive_refs: int) -> None:
        """Records the options.

        Args:
          max_chunk_length: Steps per chunk (>= 1).
          num_keep_alive_refs: Most recent steps that stay referenceable
            (>= max_chunk_length).

        Raises:
          ValueError: If the values are out of range.
        """
        if max_chunk_length < 1 or num_keep_alive_refs < max_chunk_length:
            raise ValueError(
                f"need 1 <= max_chunk_length ({max_chunk_length}) <= num_keep_alive_refs "
                f"({num_keep_alive_refs})"
            )
        self.max_chunk_length = int(max_chunk_length)
        self.num_keep_alive_refs = int(num_keep_alive_refs)

    def __repr__(self) -> str:
        return (
            f"ConstantChunkerOptions(max_chunk_length={self.max_chunk_length}, "
            f"num_keep_alive_refs={self.num_keep_alive_refs})"
        )


class AutoTunedChunkerOptions(ChunkerOptions):
    """Chunk lengths the writer chooses itself.

    reverb_tf's writer closes a column's chunk when an item references it, so
    chunks adapt to the items without tuning; `throughput_weight` is recorded
    for dm-reverb code and does not change that.

    Attributes:
      num_keep_alive_refs: Most recent steps that stay referenceable.
      throughput_weight: dm-reverb's trade-off between throughput and chunk
        size.
    """

    def __init__(self, num_keep_alive_refs: int, throughput_weight: float) -> None:
        """Records the options.

        Args:
          num_keep_alive_refs: Most recent steps that stay referenceable (>= 1).
          throughput_weight: dm-reverb's tuning weight (>= 0).

        Raises:
          ValueError: If the values are out of range.
        """
        if num_keep_alive_refs < 1 or throughput_weight < 0:
            raise ValueError(
                f"need num_keep_alive_refs >= 1 (got {num_keep_alive_refs}) and "
                f"throughput_weight >= 0 (got {throughput_weight})"
            )
        self.num_keep_alive_refs = int(num_keep_alive_refs)
        self.throughput_weight = float(throughput_weight)

    def __repr__(self) -> str:
        return (
            f"AutoTunedChunkerOptions(num_keep_alive_refs={self.num_keep_alive_refs}, "
            f"throughput_weight={self.throughput_weight})"
        )


class Sampler:
    """dm-reverb's native sampler; in reverb_tf, `Client.sample` and the datasets.

    Attributes:
      NUM_INFO_TENSORS: Fields of `SampleInfo` (key, probability, table_size,
        priority, times_sampled), i.e. the info tensors before the data.
    """

    NUM_INFO_TENSORS = len(_replay_sample.SampleInfo._fields)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        del args, kwargs
        raise TypeError(
            "reverb_tf has no stand-alone Sampler object: sample with Client.sample, "
            "TrajectoryDataset or TFClient.sample"
        )


class TableExtension:
    """dm-reverb's native table extension; reverb_tf tables have no extensions."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        del args, kwargs
        raise NotImplementedError("reverb_tf does not support table extensions")


def create_default_checkpointer(
    path: str, group: str = "", fallback_checkpoint_path: Optional[str] = None
) -> _checkpointers.DefaultCheckpointer:
    """Returns the checkpointer a Server writes to `path` with.

    Args:
      path: Root directory of the checkpoints.
      group: Group that should own the files written ("" keeps the default).
      fallback_checkpoint_path: Checkpoint loaded when `path` holds none.

    Returns:
      A `checkpointers.DefaultCheckpointer`.
    """
    return _checkpointers.DefaultCheckpointer(
        path, group=group, fallback_checkpoint_path=fallback_checkpoint_path
    )


def selector_from_proto(serialized: bytes) -> ItemSelector:
    """Returns the selector a serialized `KeyDistributionOptions` describes.

    Args:
      serialized: The message, serialized.

    Returns:
      The selector.

    Raises:
      ValueError: If the message is not valid or chooses a false option.
      NotImplementedError: If it chooses no distribution.
    """
    from reverb_tf.server_executable import server_from_proto  # pylint: disable=g-import-not-at-top

    options = _schema_pb2.KeyDistributionOptions.FromString(serialized)
    return server_from_proto.selector_from_proto(options)
