# SPDX-License-Identifier: Apache-2.0
"""Table signatures checked by writers and by the server, end to end."""
import numpy as np
import pytest
import tensorflow as tf

from reverb_tf import errors
from integration import make_server, table  # noqa: F401  (fixtures)


def signed_table():
    return table(signature={"obs": tf.TensorSpec([4], tf.float32),
                            "r": tf.TensorSpec([], tf.float32)})


def test_signature_mismatch_at_create_item(make_server):
    server = make_server(signed_table())
    writer = server.localhost_client().trajectory_writer(num_keep_alive_refs=1)
    writer.append({"obs": np.zeros(5, np.float32), "r": np.float32(0)})
    with pytest.raises(errors.InvalidArgumentError, match=r"'obs'.*float32\[4\].*float32\[5\]"):
        writer.create_item("t", 1.0, {"obs": writer.history["obs"][-1],
                                      "r": writer.history["r"][-1]})
    writer.close()


def test_signature_mismatch_rejected_by_the_server(make_server):
    server = make_server(signed_table())
    client = server.localhost_client()
    writer = client.trajectory_writer(num_keep_alive_refs=1, get_signature_timeout_ms=None)
    writer.append({"obs": np.zeros(4, np.float64), "r": np.float32(0)})
    with pytest.raises(errors.InvalidArgumentError, match="obs"):
        writer.create_item("t", 1.0, {"obs": writer.history["obs"][-1],
                                      "r": writer.history["r"][-1]})
        writer.flush(timeout_ms=10_000)
    assert client.server_info()["t"].current_size == 0


def test_unknown_table_in_create_item(make_server):
    server = make_server(table())
    writer = server.localhost_client().trajectory_writer(num_keep_alive_refs=1)
    writer.append({"x": 1})
    with pytest.raises(errors.InvalidArgumentError, match="nope"):
        writer.create_item("nope", 1.0, writer.history["x"][-1])
    writer.close()


def test_insert_checked_by_signature(make_server):
    server = make_server(table(signature={"a": tf.TensorSpec([1, 2], tf.int64)}))
    client = server.localhost_client()
    client.insert({"a": np.zeros(2, np.int64)}, priorities={"t": 1.0})
    with pytest.raises(errors.InvalidArgumentError, match="'a'"):
        client.insert({"a": np.zeros(3, np.int64)}, priorities={"t": 1.0})
    assert client.server_info()["t"].current_size == 1
