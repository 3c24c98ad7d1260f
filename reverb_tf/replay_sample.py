"""What sampling returns: the item's data and facts about the sample."""

from typing import Any, NamedTuple


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
