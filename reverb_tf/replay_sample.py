# SPDX-License-Identifier: Apache-2.0
"""What sampling returns: the item's data and facts about the sample."""

from typing import Any, NamedTuple, Type, Union


class SampleInfo(NamedTuple):
    """Facts about one sampled item.

    Fields:
      key: The item's key, as `Client.mutate_priorities` takes it (`int`).
      probability: Probability with which the sampler chose the item
        (`float`; 1.0 for deterministic selectors).
      table_size: Number of items in the table when it was sampled (`int`).
      priority: The item's priority when it was sampled (`float`).
      times_sampled: How many times the item has been sampled, this time
        included (`int`).
    """

    key: Any
    probability: Any
    table_size: Any
    priority: Any
    times_sampled: Any

    @classmethod
    def tf_dtypes(cls) -> "SampleInfo":
        """Returns the TensorFlow dtype of each field, as datasets emit them.

        Returns:
          `SampleInfo(tf.uint64, tf.float64, tf.int64, tf.float64, tf.int32)`.
        """
        import tensorflow as tf  # pylint: disable=g-import-not-at-top

        return cls(tf.uint64, tf.float64, tf.int64, tf.float64, tf.int32)

    @classmethod
    def tf_shapes(cls) -> "SampleInfo":
        """Returns the TensorFlow shape of each field (all scalars).

        Returns:
          A `SampleInfo` of five `tf.TensorShape([])`.
        """
        import tensorflow as tf  # pylint: disable=g-import-not-at-top

        return cls(*[tf.TensorShape([]) for _ in cls._fields])

    @classmethod
    def zeros(cls) -> "SampleInfo":
        """Returns a `SampleInfo` whose fields are Python zeros.

        Returns:
          `SampleInfo(0, 0.0, 0, 0.0, 0)`.
        """
        return cls(0, 0.0, 0, 0.0, 0)


class SampleInfoWithStats(NamedTuple):
    """A `SampleInfo` and what importance-sampling weights need (reverb_tf extension).

    What `sampling_stats=True` (on `Client.sample` and the trajectory
    datasets) gives instead of a `SampleInfo`; the default keeps dm-reverb's
    five fields.

    Fields:
      key, probability, table_size, priority, times_sampled: As in
        `SampleInfo`.
      table_weight: The table's total sampling weight when the item was
        chosen: its size, or for a prioritized table the sum of
        priority^exponent (`float`).
      min_probability: The smallest probability with which any item of the
        table would have been chosen at that moment (`float`; items of
        priority 0 are never chosen and do not count; 1.0 for deterministic
        selectors). With several shards, this, `probability`,
        `table_size` and `table_weight` are those of one table holding
        every shard's items, so weights need no other call there either
        (queue-like tables keep their shard's).
    """

    key: Any
    probability: Any
    table_size: Any
    priority: Any
    times_sampled: Any
    table_weight: Any
    min_probability: Any

    @classmethod
    def tf_dtypes(cls) -> "SampleInfoWithStats":
        """Returns the TensorFlow dtype of each field, as datasets emit them.

        Returns:
          `SampleInfo.tf_dtypes()` followed by two `tf.float64`.
        """
        import tensorflow as tf  # pylint: disable=g-import-not-at-top

        return cls(*SampleInfo.tf_dtypes(), tf.float64, tf.float64)

    def importance_weight(self, beta: float) -> Any:
        """The importance-sampling weight of this sample, normalised by the largest.

        `(N·P)^-beta / max_i (N·P_i)^-beta`, which is
        `(probability / min_probability)^-beta`: 1 for the least likely
        item, smaller for likelier ones. Works on Python numbers, numpy
        arrays and `tf.Tensor`s alike (e.g. a batch from a dataset).

        Args:
          beta: The correction's exponent, in [0, 1] (0: no correction).

        Returns:
          The weight, of the type of `probability`.
        """
        return (self.probability / self.min_probability) ** -beta


class ReplaySample(NamedTuple):
    """One sampled item (or one timestep of it).

    Fields:
      info: A `SampleInfo`.
      data: The item's data: the flat list of columns, or the nested structure
        of the table's signature when the caller asked for it and the table has
        one.
    """

    info: SampleInfo
    data: Any


def info_type(sampling_stats: bool) -> Type[Union[SampleInfo, SampleInfoWithStats]]:
    """The `info` class of samples taken with or without `sampling_stats`.

    Its fields are a prefix of the native layer's info fields (dm-reverb's
    five first, the two statistics after), so `cls(*fields[:len(cls._fields)])`
    makes one.
    """
    return SampleInfoWithStats if sampling_stats else SampleInfo
