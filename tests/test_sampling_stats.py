# SPDX-License-Identifier: Apache-2.0
"""Importance-sampling weights from one sample: `sampling_stats=True` (reverb_tf extension)."""

import numpy as np
import pytest
import tensorflow as tf

import reverb_tf as reverb
from integration import make_server  # noqa: F401 (a fixture)

BOTH_TRANSPORTS = True  # conftest: every test over gRPC and in-process

EXPONENT = 0.8
PRIORITIES = [1.0, 2.0, 4.0, 8.0, 0.0]  # the last is never chosen
SIGNATURE = {"x": tf.TensorSpec([], tf.float32)}


@pytest.fixture
def prioritized(make_server):
    server = make_server(
        reverb.Table(
            "p",
            sampler=reverb.selectors.Prioritized(EXPONENT),
            remover=reverb.selectors.Fifo(),
            max_size=100,
            rate_limiter=reverb.rate_limiters.MinSize(1),
            signature=SIGNATURE,
        )
    )
    client = reverb.Client(f"localhost:{server.port}")
    with client.trajectory_writer(num_keep_alive_refs=1) as writer:
        for i, priority in enumerate(PRIORITIES):
            writer.append({"x": np.float32(i)})
            writer.create_item("p", priority, {"x": writer.history["x"][-1]})
    return server, client


def _expected(priorities):
    """(total weight, min probability, probability by x) of a Prioritized table."""
    weights = np.array(priorities) ** EXPONENT
    total = weights.sum()
    return total, weights[weights > 0].min() / total, weights / total


def _check(info, x, priorities):
    total, min_probability, probability = _expected(priorities)
    assert isinstance(info, reverb.SampleInfoWithStats)
    np.testing.assert_allclose(info.table_weight, total, rtol=1e-12)
    np.testing.assert_allclose(info.min_probability, min_probability, rtol=1e-12)
    np.testing.assert_allclose(info.probability, probability[x], rtol=1e-12)
    # (N·P)^-β / max_j (N·P_j)^-β over the items that can be chosen.
    beta = 0.6
    n = len(priorities)
    chosen = probability[probability > 0]
    want = (n * probability[x]) ** -beta / ((n * chosen) ** -beta).max()
    np.testing.assert_allclose(info.importance_weight(beta), want, rtol=1e-9)


def test_client_sample_with_stats_gives_what_weights_need(prioritized):
    _, client = prioritized
    for sample in client.sample("p", num_samples=50, emit_timesteps=False, sampling_stats=True):
        _check(sample.info, int(sample.data[0]), PRIORITIES)
    # The default is dm-reverb's five fields.
    plain = next(client.sample("p", emit_timesteps=False)).info
    assert type(plain) is reverb.SampleInfo and len(plain) == 5  # noqa: E721


def test_the_minimum_follows_priority_updates(prioritized):
    _, client = prioritized
    keys = {}
    while len(keys) < 4:
        for sample in client.sample("p", num_samples=20, emit_timesteps=False):
            keys[int(sample.data[0])] = int(sample.info.key)
    client.mutate_priorities("p", updates={keys[0]: 16.0})  # the least likely becomes likeliest
    changed = [16.0, 2.0, 4.0, 8.0, 0.0]
    for sample in client.sample("p", num_samples=20, emit_timesteps=False, sampling_stats=True):
        _check(sample.info, int(sample.data[0]), changed)


def test_datasets_carry_the_stats_into_the_graph(prioritized):
    server, _ = prioritized
    address = f"localhost:{server.port}"
    dataset = reverb.TrajectoryDataset.from_table_signature(
        address, "p", max_in_flight_samples_per_worker=8, sampling_stats=True
    ).batch(16)
    assert isinstance(dataset.element_spec.info, reverb.SampleInfoWithStats)

    @tf.function
    def weights(batch):
        return batch.info.importance_weight(0.6), batch.data["x"]

    batch = next(iter(dataset))
    got, xs = weights(batch)
    for i, x in enumerate(xs.numpy().astype(int)):
        _check(reverb.SampleInfoWithStats(*[v.numpy()[i] for v in batch.info]), x, PRIORITIES)
        _, _, probability = _expected(PRIORITIES)
        chosen = probability[probability > 0]
        np.testing.assert_allclose(got.numpy()[i], (probability[x] / chosen.min()) ** -0.6)
    steps = reverb.TimestepDataset.from_table_signature(
        address, "p", max_in_flight_samples_per_worker=8, sampling_stats=True
    )
    step = next(iter(steps))
    _check(
        reverb.SampleInfoWithStats(*[v.numpy() for v in step.info]),
        int(step.data["x"].numpy()),
        PRIORITIES,
    )
    plain = reverb.TrajectoryDataset.from_table_signature(address, "p", 8)
    assert type(plain.element_spec.info) is reverb.SampleInfo  # noqa: E721


def test_tf_client_sample_carries_the_stats(prioritized):
    server, _ = prioritized
    tf_client = reverb.TFClient(f"localhost:{server.port}")

    @tf.function
    def sample():
        return tf_client.sample("p", [tf.float32], sampling_stats=True)

    for _ in range(5):
        got = sample()
        _check(
            reverb.SampleInfoWithStats(*[v.numpy() for v in got.info]),
            int(got.data[0].numpy()),
            PRIORITIES,
        )
    assert type(tf_client.sample("p", [tf.float32]).info) is reverb.SampleInfo  # noqa: E721


def test_uniform_and_queue_tables_weigh_every_sample_one(make_server):
    server = make_server(
        reverb.Table(
            "u",
            sampler=reverb.selectors.Uniform(),
            remover=reverb.selectors.Fifo(),
            max_size=10,
            rate_limiter=reverb.rate_limiters.MinSize(1),
        ),
        reverb.Table.queue("q", 10),
    )
    client = reverb.Client(f"localhost:{server.port}")
    for table in ("u", "q"):
        for i in range(4):
            client.insert(np.float32(i), {table: 1.0 + i})
    for sample in client.sample("u", num_samples=5, emit_timesteps=False, sampling_stats=True):
        assert sample.info.min_probability == pytest.approx(0.25)
        assert sample.info.table_weight == pytest.approx(4.0)
        assert sample.info.importance_weight(1.0) == pytest.approx(1.0)
    sample = next(client.sample("q", emit_timesteps=False, sampling_stats=True))
    assert sample.info.probability == 1.0 and sample.info.min_probability == 1.0
