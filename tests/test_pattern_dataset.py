# SPDX-License-Identifier: Apache-2.0
"""PatternDataset: StructuredWriter configs applied to a tf.data dataset.

Expected elements are those dm-reverb 0.14 produces for the same input
(observed with it; tests/compat/ compares the two directly).
"""

import numpy as np
import pytest
import tensorflow as tf

import reverb_tf as reverb
from reverb_tf import pattern_dataset
from reverb_tf import structured_writer as sw
from reverb_tf.cc import patterns_pb2

STEP = {"a": None, "f": None}
REF = sw.create_reference_step(STEP)
C = sw.Condition


def _steps():
    # Episodes end where f == 1: [0..3], [4..6], [7].
    return tf.data.Dataset.from_tensor_slices(
        {"a": np.arange(8, dtype=np.int32), "f": np.array([0, 0, 0, 1, 0, 0, 1, 0], np.int32)}
    )


def _eoe(step):
    return tf.equal(step["f"], 1)


def _elements(dataset):
    return [tf.nest.map_structure(lambda t: t.numpy().tolist(), x) for x in dataset]


def test_transitions_within_and_across_episodes():
    config = sw.create_config({"x": REF["a"][-2:], "y": REF["a"][-1]}, "t")
    dataset = reverb.PatternDataset(_steps(), [config], True, _eoe)
    assert dataset.element_spec == {
        "x": tf.TensorSpec([2], tf.int32),
        "y": tf.TensorSpec([], tf.int32),
    }
    assert _elements(dataset) == [
        {"x": [0, 1], "y": 1},
        {"x": [1, 2], "y": 2},
        {"x": [2, 3], "y": 3},
        {"x": [4, 5], "y": 5},
        {"x": [5, 6], "y": 6},
    ]
    config = sw.create_config({"x": REF["a"][-2:], "y": REF["a"][-1]}, "t")
    across = reverb.PatternDataset(_steps(), [config], False, _eoe)
    assert [e["y"] for e in _elements(across)] == [1, 2, 3, 4, 5, 6, 7]


def test_configs_get_buffer_length_conditions_in_place():
    configs = [sw.create_config(REF["a"][-3:], "t"), sw.create_config(REF["a"][-1:], "t")]
    dataset = reverb.PatternDataset(_steps(), configs, True, _eoe)
    # As in dm-reverb: the second config waits for the first one's history.
    assert [list(c.conditions) for c in configs] == [
        [patterns_pb2.Condition(buffer_length=True, ge=3)]
    ] * 2
    assert _elements(dataset) == [[0, 1, 2], [2], [1, 2, 3], [3], [4, 5, 6], [6]]


@pytest.mark.parametrize(
    "condition,respect,expected",
    [
        (C.is_end_episode(), True, [[2, 3], [5, 6]]),
        (C.is_end_episode(), False, [[2, 3], [5, 6]]),
    ],
)
def test_end_of_episode_configs(condition, respect, expected):
    config = sw.create_config(REF["a"][-2:], "t", conditions=[condition])
    assert _elements(reverb.PatternDataset(_steps(), [config], respect, _eoe)) == expected


@pytest.mark.parametrize(
    "condition,expected",
    [
        (C.step_index() == 1, [1, 5]),
        (C.steps_since_applied() >= 3, [2, 5]),
        (C.data(STEP)["f"] == 1, [3, 6]),
        (C.step_index() % 2 == 0, [0, 2, 4, 6, 7]),
    ],
)
def test_conditions(condition, expected):
    for respect in (True, False):
        config = sw.create_config(REF["a"][-1], "t", conditions=[condition])
        assert _elements(reverb.PatternDataset(_steps(), [config], respect, _eoe)) == expected


def test_several_configs_interleave_per_step():
    configs = [
        sw.create_config(REF["a"][-1], "t", conditions=[C.step_index() % 2 == 0]),
        sw.create_config(REF["a"][-1], "t", conditions=[C.step_index() % 2 == 1]),
    ]
    assert _elements(reverb.PatternDataset(_steps(), configs, True, _eoe)) == list(range(8))


def test_strided_slices_of_vectors_and_with_info():
    steps = tf.data.Dataset.from_tensor_slices(
        {"a": np.arange(12, dtype=np.float32).reshape(6, 2), "f": np.zeros(6, np.int32)}
    )
    config = sw.create_config(REF["a"][-5:-1:2], "t")
    assert _elements(reverb.PatternDataset(steps, [config], True, _eoe)) == [
        [[0, 1], [4, 5]],
        [[2, 3], [6, 7]],
    ]
    with_info = pattern_dataset.pattern_dataset_with_info(
        steps, [sw.create_config(REF["a"][-1], "t")], True, _eoe
    )
    first = next(iter(with_info))
    assert isinstance(first, reverb.ReplaySample)
    assert first.data.numpy().tolist() == [0, 1]
    assert [int(x) for x in first.info] == [0, 0, 0, 0, 0]


def test_strided_slice_length_follows_infer_signature():
    steps = tf.data.Dataset.from_tensor_slices(
        {"a": np.arange(12, dtype=np.float32).reshape(6, 2), "f": np.zeros(6, np.int32)}
    )
    # dm-reverb declares (stop - start) // step = 1 step but takes 2.
    dataset = reverb.PatternDataset(steps, [sw.create_config(REF["a"][-3::2], "t")], True, _eoe)
    assert dataset.element_spec.shape == [1, 2]
    with pytest.raises(tf.errors.InvalidArgumentError, match="Incompatible shapes"):
        _elements(dataset)


def test_inside_tf_function_and_batched():
    config = sw.create_config(REF["a"][-2:], "t")
    dataset = reverb.PatternDataset(_steps(), [config], True, _eoe).batch(2)

    @tf.function
    def total(ds):
        result = tf.constant(0, tf.int32)
        for batch in ds:
            result += tf.reduce_sum(batch)
        return result

    assert int(total(dataset)) == sum([0, 1, 1, 2, 2, 3, 4, 5, 5, 6])


def test_strings_and_captured_tensors():
    steps = tf.data.Dataset.from_tensor_slices(
        {"a": tf.constant(["x", "y", "z", "w"]), "f": tf.constant([0, 5, 0, 5])}
    )
    threshold = tf.constant(5)
    config = sw.create_config(REF["a"][-2:], "t")
    dataset = reverb.PatternDataset(
        steps, [config], True, lambda s: tf.greater_equal(s["f"], threshold)
    )
    assert _elements(dataset) == [[b"x", b"y"], [b"z", b"w"]]


def test_bad_arguments():
    config = sw.create_config(REF["a"][-1], "t")
    with pytest.raises(ValueError, match="must return `bool`"):
        reverb.PatternDataset(_steps(), [config], True, lambda s: s["f"])
    with pytest.raises(ValueError, match="At least one config"):
        reverb.PatternDataset(_steps(), [], True, _eoe)
    bad = sw.create_config(REF["a"][-1], "t")
    bad.flat[0].stop = 1
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match="`stop` must be"):
        _elements(reverb.PatternDataset(_steps(), [bad], True, _eoe))
