# SPDX-License-Identifier: Apache-2.0
"""Table signatures checked by writers and by the server, end to end."""

import numpy as np
import pytest
import tensorflow as tf

import reverb_tf
from reverb_tf import errors
from integration import make_server, table  # noqa: F401  (fixtures)


def signed_table():
    return table(
        signature={"obs": tf.TensorSpec([4], tf.float32), "r": tf.TensorSpec([], tf.float32)}
    )


def test_signature_mismatch_at_create_item(make_server):
    server = make_server(signed_table())
    writer = server.localhost_client().trajectory_writer(num_keep_alive_refs=1)
    writer.append({"obs": np.zeros(5, np.float32), "r": np.float32(0)})
    with pytest.raises(errors.InvalidArgumentError, match=r"'obs'.*float32\[4\].*float32\[5\]"):
        writer.create_item(
            "t", 1.0, {"obs": writer.history["obs"][-1], "r": writer.history["r"][-1]}
        )
    writer.close()


def test_signature_mismatch_rejected_by_the_server(make_server):
    server = make_server(signed_table())
    client = server.localhost_client()
    writer = client.trajectory_writer(num_keep_alive_refs=1, get_signature_timeout_ms=None)
    writer.append({"obs": np.zeros(4, np.float64), "r": np.float32(0)})
    with pytest.raises(errors.InvalidArgumentError, match="obs"):
        writer.create_item(
            "t", 1.0, {"obs": writer.history["obs"][-1], "r": writer.history["r"][-1]}
        )
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


def test_validate_items_false_inserts_off_signature_items_and_counts_them():
    """dm-reverb checks signatures in the writer only; its validate_items=False gets through."""
    table = reverb_tf.Table(
        "t",
        reverb_tf.selectors.Fifo(),
        reverb_tf.selectors.Fifo(),
        10,
        reverb_tf.rate_limiters.MinSize(1),
        max_times_sampled=1,
        signature={"a": tf.TensorSpec([], tf.float32)},
    )
    with reverb_tf.Server([table]) as server:
        client = reverb_tf.Client(f"localhost:{server.port}")
        with client.trajectory_writer(1, validate_items=False) as writer:
            writer.append({"a": np.float32(1.5), "b": np.int32(7)})
            writer.create_item(
                "t", 1.0, {"a": writer.history["a"][-1], "b": writer.history["b"][-1]}
            )
            writer.append({"a": np.float32(2.5), "b": np.int32(8)})
            writer.create_item("t", 1.0, {"a": writer.history["a"][-1]})
        with pytest.raises(
            reverb_tf.errors.InvalidArgumentError, match="inconsistent with the table signature"
        ):
            with client.trajectory_writer(1) as writer:
                writer.append({"a": np.int64(3)})
                writer.create_item("t", 1.0, {"a": writer.history["a"][-1]})
        assert table.info.current_size == 2
        sample = next(client.sample("t", emit_timesteps=False))
        assert [a.tolist() for a in sample.data] == [1.5, 7]
        metrics = server.metrics_text()
        # One of the two unchecked items is off the signature (an extra column).
        assert 'reverb_tf_table_off_signature_items_total{table="t"} 1' in metrics, [
            line for line in metrics.splitlines() if "off_signature" in line
        ]
