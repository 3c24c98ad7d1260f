# SPDX-License-Identifier: Apache-2.0
"""ReplaySample and SampleInfo as dm-reverb 0.14 defines them."""

import tensorflow as tf

from reverb_tf import replay_sample


def test_sample_info_fields():
    assert replay_sample.SampleInfo._fields == (
        "key",
        "probability",
        "table_size",
        "priority",
        "times_sampled",
    )
    info = replay_sample.SampleInfo(1, 0.5, 10, 2.0, 3)
    assert info.key == 1 and info.times_sampled == 3


def test_sample_info_helpers():
    assert replay_sample.SampleInfo.zeros() == (0, 0.0, 0, 0.0, 0)
    assert replay_sample.SampleInfo.tf_dtypes() == (
        tf.uint64,
        tf.float64,
        tf.int64,
        tf.float64,
        tf.int32,
    )
    assert all(s == tf.TensorShape([]) for s in replay_sample.SampleInfo.tf_shapes())


def test_replay_sample_fields():
    sample = replay_sample.ReplaySample(info=replay_sample.SampleInfo.zeros(), data=[1])
    assert replay_sample.ReplaySample._fields == ("info", "data")
    assert sample.data == [1]
