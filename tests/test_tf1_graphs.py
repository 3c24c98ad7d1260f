# SPDX-License-Identifier: Apache-2.0
"""Every dataset class in TF1-style graphs, read through Session-run iterators.

Not a differential scenario: dm-reverb 0.14 itself blocks for good in
Session.run on these programs now and then (its in-process sampler, seen in
one of three suite runs on 2026-12-02, and every time for a TimestepDataset),
so the comparison cannot be made reliably. Run by hand the same day, the
trajectory datasets (initializable and one-shot iterators, after .batch()
and .map(), and with a placeholder address) gave dm-reverb's results.
"""

import numpy as np
import pytest
import tensorflow as tf

import reverb_tf as reverb


@pytest.fixture(scope="module")
def address():
    table = reverb.Table(
        "t",
        reverb.selectors.Uniform(),
        reverb.selectors.Fifo(),
        100,
        reverb.rate_limiters.MinSize(1),
        signature={"x": tf.TensorSpec([2], tf.float32)},
    )
    with reverb.Server([table]) as server:
        with reverb.Client(f"localhost:{server.port}").trajectory_writer(1) as writer:
            for i in range(20):
                writer.append({"x": np.full(2, i, np.float32)})
                writer.create_item("t", 1.0, {"x": writer.history["x"][-1]})
        yield f"localhost:{server.port}"


CASES = {
    "trajectory": lambda a: reverb.TrajectoryDataset.from_table_signature(a, "t", 10),
    "batch_map": lambda a: (
        reverb.TrajectoryDataset.from_table_signature(a, "t", 10)
        .batch(3)
        .map(lambda s: s.data["x"] * 2)
    ),
    "timestep": lambda a: reverb.TimestepDataset.from_table_signature(a, "t", 10),
    "constructor": lambda a: reverb.TrajectoryDataset(
        a, "t", {"x": tf.float32}, {"x": tf.TensorShape([2])}, 10
    ),
    "reverb_dataset": lambda a: reverb.ReverbDataset(
        a, "t", (tf.float32,), (tf.TensorShape([2]),), 10
    ),
    "constant_address": lambda a: reverb.TrajectoryDataset(
        tf.constant(a), "t", {"x": tf.float32}, {"x": tf.TensorShape([2])}, 10
    ),
}


@pytest.mark.parametrize("kind", ["initializable", "one_shot"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_dataset_in_a_tf1_graph(address, name, kind):
    with tf.Graph().as_default():
        dataset = CASES[name](address)
        if kind == "initializable":
            iterator = tf.compat.v1.data.make_initializable_iterator(dataset)
        else:
            iterator = tf.compat.v1.data.make_one_shot_iterator(dataset)
        element = iterator.get_next()
        with tf.compat.v1.Session() as session:
            if kind == "initializable":
                session.run(iterator.initializer)
            values = [session.run(element) for _ in range(3)]
    for value in values:
        x = (
            value
            if isinstance(value, np.ndarray)
            else (value.data[0] if isinstance(value.data, (list, tuple)) else value.data["x"])
        )
        assert x.dtype == np.float32 and x.shape[-1] == 2
        if name == "batch_map":
            assert x.shape == (3, 2) and np.all(x % 2 == 0)
