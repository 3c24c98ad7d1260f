# SPDX-License-Identifier: Apache-2.0
"""server_address as a tf.string tensor where reverb_tf accepts more than dm-reverb.

dm-reverb 0.14's datasets take a tensor address (tests/compat scenario
`tensor_address.*` compares those with it); its `TFClient` and
`from_table_signature` take only a str. reverb_tf's ops take the address as
a tensor input, so these accept tensors too (docs/compatibility.md).
"""

import numpy as np
import pytest
import tensorflow as tf

import reverb_tf as reverb


def _table(name):
    return reverb.Table(
        name,
        sampler=reverb.selectors.Fifo(),
        remover=reverb.selectors.Fifo(),
        max_size=10,
        rate_limiter=reverb.rate_limiters.MinSize(1),
        signature={"x": tf.TensorSpec([1], tf.int64)},
    )


@pytest.fixture
def server():
    with reverb.Server([_table("t")]) as srv:
        reverb.Client(f"localhost:{srv.port}").insert({"x": np.int64(7)}, {"t": 1.0})
        yield srv


def test_tf_client_takes_an_eager_tensor(server):
    client = reverb.TFClient(tf.constant(f"localhost:{server.port}"))
    assert client.server_address == f"localhost:{server.port}"
    assert client.sample("t", {"x": tf.int64}).data["x"].numpy() == 7


def test_tf_client_takes_a_graph_tensor(server):
    @tf.function(input_signature=[tf.TensorSpec([], tf.string)])
    def sample_and_insert(address):
        client = reverb.TFClient(address)
        assert isinstance(client.server_address, tf.Tensor)
        insert = client.insert(
            [tf.constant(8, tf.int64)], tf.constant(["t"]), tf.constant([1.0], tf.float64)
        )
        with tf.control_dependencies([insert]):
            return client.sample("t", {"x": tf.int64}).data["x"]

    assert sample_and_insert(tf.constant(f"localhost:{server.port}")).numpy() == 7
    assert reverb.Client(f"localhost:{server.port}").server_info()["t"].current_size == 2


def test_from_table_signature_takes_an_eager_tensor(server):
    dataset = reverb.TrajectoryDataset.from_table_signature(
        tf.constant(f"localhost:{server.port}"), "t", max_in_flight_samples_per_worker=1
    )
    assert next(iter(dataset)).data["x"].numpy().tolist() == [7]


def test_from_table_signature_rejects_a_graph_tensor_clearly(server):
    @tf.function(input_signature=[tf.TensorSpec([], tf.string)])
    def build(address):
        return next(iter(reverb.TrajectoryDataset.from_table_signature(address, "t", 1))).data

    with pytest.raises(TypeError, match="not a graph tensor"):
        build(tf.constant(f"localhost:{server.port}"))


def test_a_graph_tensor_may_name_several_shards():
    with reverb.Server([_table("t")]) as a, reverb.Server([_table("t")]) as b:
        for srv, value in ((a, 1), (b, 2)):
            reverb.Client(f"localhost:{srv.port}").insert({"x": np.int64(value)}, {"t": 1.0})

        @tf.function(input_signature=[tf.TensorSpec([], tf.string)])
        def first_values(address):
            dataset = reverb.TrajectoryDataset(
                address, "t", {"x": tf.int64}, {"x": tf.TensorShape([1])}, 1
            )
            return dataset.take(20).map(lambda s: s.data["x"][0]).batch(20).get_single_element()

        values = first_values(tf.constant(f"localhost:{a.port},localhost:{b.port}")).numpy()
        assert set(values.tolist()) == {1, 2}


def test_address_tensors_must_be_scalar_strings(server):
    with pytest.raises(TypeError, match="tf.string"):
        reverb.TFClient(tf.constant(3))
    with pytest.raises(ValueError, match="scalar"):
        reverb.TrajectoryDataset(
            tf.constant(["a:1", "b:2"]), "t", {"x": tf.int64}, {"x": tf.TensorShape([1])}, 1
        )
