# SPDX-License-Identifier: Apache-2.0
"""PatternDataset: StructuredWriter configs applied to a dataset of steps.

Given a `tf.data.Dataset` of steps, `PatternDataset` produces the
trajectories a `StructuredWriter` with the same configs would insert, as if
the steps had been appended one by one and every item sampled once, in
order. The configs are applied in C++ by the same pattern engine as the
writer's (kernels/pattern_dataset_kernel.cc), without a server.

Mirrors dm-reverb 0.14's `reverb.pattern_dataset`.
"""

from typing import Any, Callable, Sequence

import tree

from reverb_tf import _ops
from reverb_tf import replay_sample
from reverb_tf import structured_writer
from reverb_tf import _tensorflow
from reverb_tf.cc import patterns_pb2

# Before TensorFlow's own modules: their absence gets the clear error.
tf = _tensorflow.import_tensorflow("reverb_tf.PatternDataset")

# pylint: disable=g-direct-tensorflow-import,wrong-import-position
from tensorflow.python.data.ops import dataset_ops
from tensorflow.python.data.ops import structured_function
# pylint: enable=g-direct-tensorflow-import,wrong-import-position


def _add_buffer_length_conditions(configs: Sequence[patterns_pb2.StructuredWriterConfig]) -> None:
    """Adds to each config a `buffer_length >= history` condition, in place.

    dm-reverb's PatternDataset does this (and the callers' configs show it
    afterwards), with `history` the longest history of the nodes seen so far
    over *all* configs, so a config listed after a longer one waits as long
    as that one. Reproduced exactly, as it decides which elements appear.
    """
    history_length = 0
    for config in configs:
        for node in config.flat:
            history_length = max(history_length, abs(min(node.start, node.stop)))
            if not any(
                condition.buffer_length and condition.ge >= history_length
                for condition in config.conditions
            ):
                config.conditions.append(
                    patterns_pb2.Condition(buffer_length=True, ge=history_length)
                )


class PatternDataset(dataset_ops.UnaryDataset):
    """A dataset of the trajectories configs build from a dataset of steps.

    Works in eager mode and inside `tf.function` (not with TF1 sessions, like
    dm-reverb's).
    """

    def __init__(
        self,
        input_dataset: tf.data.Dataset,
        configs: Sequence[patterns_pb2.StructuredWriterConfig],
        respect_episode_boundaries: bool,
        is_end_of_episode: Callable[[Any], bool],
    ):
        """Applies `configs` to the steps of `input_dataset`.

        Args:
          input_dataset: A dataset whose elements are single steps (flatten a
            dataset of episodes first).
          configs: The configs (see `structured_writer.create_config`); all
            must have the same pattern structure. As in dm-reverb, each gets a
            `buffer_length` condition appended (in place).
          respect_episode_boundaries: If True, no trajectory spans two
            episodes.
          is_end_of_episode: Maps a step to a scalar bool tensor: True if the
            step is the last of its episode.

        Raises:
          ValueError: If `is_end_of_episode` does not return a scalar bool, or
            `configs` cannot produce trajectories of one signature (see
            `structured_writer.infer_signature`).
        """
        signature = structured_writer.infer_signature(configs, input_dataset.element_spec)
        self._shapes = tree.map_structure(lambda spec: spec.shape, signature)
        self._dtypes = tree.map_structure(lambda spec: spec.dtype, signature)
        self._input_dataset = input_dataset
        wrapped = structured_function.StructuredFunctionWrapper(
            is_end_of_episode,
            transformation_name="ReverbPatternDataset_IsEndOfEpisode",
            dataset=input_dataset,
            use_legacy_function=False,
        )
        if not wrapped.output_structure.is_compatible_with(tf.TensorSpec([], tf.bool)):
            raise ValueError(
                "Invalid `is_end_of_episode`. `is_end_of_episode` must return `bool`, "
                f"but its return type is {wrapped.output_structure}."
            )
        self._is_end_of_episode = wrapped

        _add_buffer_length_conditions(configs)
        variant_tensor = _ops.load().reverb_tf_pattern_dataset(
            input_dataset._variant_tensor,  # pylint: disable=protected-access
            other_arguments=wrapped.function.captured_inputs,
            is_end_of_episode=wrapped.function,
            dtypes=tree.flatten(self._dtypes),
            shapes=tree.flatten(self._shapes),
            configs=[config.SerializeToString() for config in configs],
            clear_after_episode=respect_episode_boundaries,
        )
        super().__init__(input_dataset, variant_tensor)

    @property
    def element_spec(self) -> Any:
        return tree.map_structure(tf.TensorSpec, self._shapes, self._dtypes)


def pattern_dataset_with_info(
    input_dataset: tf.data.Dataset,
    configs: Sequence[patterns_pb2.StructuredWriterConfig],
    respect_episode_boundaries: bool,
    is_end_of_episode: Callable[[Any], bool],
) -> tf.data.Dataset:
    """A `PatternDataset` whose elements are `ReplaySample`s with zero info.

    Args:
      input_dataset: See `PatternDataset`.
      configs: See `PatternDataset`.
      respect_episode_boundaries: See `PatternDataset`.
      is_end_of_episode: See `PatternDataset`.

    Returns:
      A dataset of `ReplaySample(info=SampleInfo.zeros(), data=trajectory)`.
    """
    dataset = PatternDataset(input_dataset, configs, respect_episode_boundaries, is_end_of_episode)

    @tf.function
    def to_sample(data):
        return replay_sample.ReplaySample(info=replay_sample.SampleInfo.zeros(), data=data)

    return dataset.map(to_sample)
