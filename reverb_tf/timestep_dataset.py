# SPDX-License-Identifier: Apache-2.0
"""TimestepDataset: a reverb_tf table as a tf.data source of single timesteps.

Built on the C++ source of `trajectory_dataset.TrajectoryDataset`: each
sampled item is split into its steps by a vectorized tf.data `unbatch`, so
no Python runs per element.
"""

from typing import Any, Sequence, Union

import tree

from reverb_tf import _tensorflow
from reverb_tf import replay_sample
from reverb_tf import trajectory_dataset

tf = _tensorflow.import_tensorflow("reverb_tf.TimestepDataset")


class TimestepDataset(trajectory_dataset._ReplaySource):  # pylint: disable=protected-access
    """Streams sampled items one timestep at a time.

    Each element is `ReplaySample(info, data)` for one step of a sampled item:
    `data` holds that step's values (no time dimension) and `info` is the
    item's, repeated for each of its steps. Steps come in order, item after
    item. Every column of an item must have the same number of steps; items
    of single steps (e.g. from `Client.insert`) give one element each.

    Built on the same C++ source as `TrajectoryDataset`; the split is a
    vectorized tf.data `unbatch`, so no Python runs per element.
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
    ) -> None:
        """Creates the dataset.

        Args:
          server_address: "host:port" of the server, or its shards, or a
            string tensor of either (as in `TrajectoryDataset`).
          table: Name of the table to sample.
          dtypes: Nested structure of `tf.DType` of one timestep.
          shapes: Nested structure of `tf.TensorShape` of one timestep.
          max_in_flight_samples_per_worker: As in `TrajectoryDataset`.
          num_workers_per_iterator: As in `TrajectoryDataset`.
          max_samples_per_stream: As in `TrajectoryDataset` (counts items).
          rate_limiter_timeout_ms: As in `TrajectoryDataset`.
          max_samples: As in `TrajectoryDataset` (counts items).
          sampling_stats: As in `TrajectoryDataset` (reverb_tf extension).

        Raises:
          ValueError: As `TrajectoryDataset`.
        """
        step_shapes = tree.map_structure_up_to(dtypes, tf.TensorShape, shapes)
        item_shapes = tf.nest.map_structure(
            lambda shape: tf.TensorShape([None]).concatenate(shape), step_shapes
        )
        items = trajectory_dataset.TrajectoryDataset(
            server_address,
            table,
            dtypes,
            item_shapes,
            max_in_flight_samples_per_worker,
            num_workers_per_iterator,
            max_samples_per_stream,
            rate_limiter_timeout_ms,
            max_samples,
            sampling_stats=sampling_stats,
            _unsqueeze=True,
        )

        def per_step(sample):
            steps = tf.shape(tf.nest.flatten(sample.data)[0])[0]
            info = tf.nest.map_structure(lambda x: tf.fill([steps], x), sample.info)
            return replay_sample.ReplaySample(info=info, data=sample.data)

        self._dataset = items.map(per_step).unbatch()
        self._element_spec = self._dataset.element_spec
        super().__init__(self._dataset._variant_tensor)  # pylint: disable=protected-access
