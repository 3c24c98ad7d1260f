# SPDX-License-Identifier: Apache-2.0
"""BatchedTrajectoryWriter end to end: B environments through one writer, real servers."""

import threading

import numpy as np
import pytest

import reverb_tf as reverb
from reverb_tf import errors
from integration import (  # noqa: F401  (fixtures)
    make_server,
    metric_value,
    port_outside_ephemeral_range,
    scrape_metrics,
    table,
    uniform_table_config,
)

B = 4
# Over gRPC a writer's first items go as single items, later ones as item
# batches once the server said it takes them; in-process, batches at once.
BOTH_TRANSPORTS = True


def _obs(t):
    """Environment b's observation at step t: [10 * b + t, -(10 * b + t)]."""
    base = 10 * np.arange(B, dtype=np.float32) + t
    return np.stack([base, -base], axis=1)


def _sample_all(client, name="t"):
    """Every item of a table (sampled with a uniform sampler until all keys are seen)."""
    size = client.server_info()[name].current_size
    seen = {}
    for _ in range(100):
        for sample in client.sample(name, 64, emit_timesteps=False):
            seen[sample.info.key] = sample
        if len(seen) == size:
            return list(seen.values())
    raise AssertionError(f"sampled {len(seen)} of {size} items")


def test_each_environment_gets_its_own_cells_and_priority(make_server):
    server = make_server(table(max_size=1000))
    client = server.localhost_client()
    with client.batched_trajectory_writer(B, num_keep_alive_refs=3) as writer:
        assert writer.num_envs == B
        for t in range(3):
            writer.append({"obs": _obs(t), "info": {"t": np.full(B, t, np.int64)}})
        np.testing.assert_array_equal(writer.episode_steps, [3] * B)
        history = writer.history
        column = history["obs"][-2:]
        assert column.shape == (2, 2) and column.dtype == np.float32
        np.testing.assert_array_equal(column.numpy(), np.stack([_obs(1), _obs(2)], axis=1))
        # Priority b + 1 tells the items apart once sampled.
        writer.create_items("t", np.arange(B) + 1.0, {"obs": column, "t": history["info"]["t"][-1]})
    items = _sample_all(client)
    assert len(items) == B
    for item in items:
        env = int(item.info.priority) - 1
        obs, step = item.data
        np.testing.assert_array_equal(obs, np.stack([_obs(1)[env], _obs(2)[env]]))
        assert step.shape == () and step == 2
    assert client.server_info()["t"].num_episodes == B


def test_envs_select_items_by_mask_or_index_and_priorities_follow(make_server):
    server = make_server(table(max_size=1000))
    client = server.localhost_client()
    with client.batched_trajectory_writer(B, 1) as writer:
        writer.append({"obs": _obs(0)})
        last = writer.history["obs"][-1]
        writer.create_items("t", 5.0, last, envs=np.array([True, False, True, False]))
        # One priority per chosen environment, or one per environment.
        writer.create_items("t", [7.0, 8.0], last, envs=[3, 1])
        writer.create_items("t", [1.0, 2.0, 3.0, 4.0], last, envs=[0])
        writer.create_items("t", 1.0, last, envs=[])
    got = sorted((float(s.data[0][0]), s.info.priority) for s in _sample_all(client))
    assert got == [(0.0, 1.0), (0.0, 5.0), (10.0, 8.0), (20.0, 5.0), (30.0, 7.0)]


def test_ending_one_environments_episode_leaves_the_others(make_server):
    server = make_server(table(max_size=1000))
    client = server.localhost_client()
    writer = client.batched_trajectory_writer(B, num_keep_alive_refs=2)
    for t in range(2):
        writer.append({"obs": _obs(t)})
    writer.create_items("t", 1.0, writer.history["obs"][-1], envs=[1])
    writer.end_episode(np.array([False, True, False, False]))
    np.testing.assert_array_equal(writer.episode_steps, [2, 0, 2, 2])
    writer.append({"obs": _obs(2)})
    pair = writer.history["obs"][-2:]
    # Environment 1 cleared its step 1: the whole batch is refused, nothing queued.
    with pytest.raises(errors.InvalidArgumentError, match="environment 1"):
        writer.create_items("t", 1.0, pair)
    writer.flush()
    assert client.server_info()["t"].current_size == 1
    with pytest.raises(RuntimeError):
        pair.numpy()
    np.testing.assert_array_equal(pair.numpy(envs=[0])[0], [_obs(1)[0], _obs(2)[0]])
    writer.create_items("t", 1.0, pair, envs=writer.episode_steps >= 2)
    writer.create_items("t", 1.0, writer.history["obs"][-1], envs=[1])
    writer.flush()
    info = client.server_info()["t"]
    assert info.current_size == B + 1
    # Environment 1's second episode is an episode of its own.
    assert info.num_episodes == B + 1
    writer.close()


def test_clear_buffers_false_lets_a_trajectory_span_episodes(make_server):
    server = make_server(table())
    client = server.localhost_client()
    with client.batched_trajectory_writer(B, num_keep_alive_refs=2) as writer:
        writer.append({"obs": _obs(0)})
        writer.end_episode(clear_buffers=False)
        np.testing.assert_array_equal(writer.episode_steps, [0] * B)
        writer.append({"obs": _obs(1)})
        writer.create_items("t", 1.0, writer.history["obs"][-2:], envs=[2])
    (item,) = _sample_all(client)
    np.testing.assert_array_equal(item.data[0], [_obs(0)[2], _obs(1)[2]])


def test_configure_widens_a_column_in_every_environment(make_server):
    server = make_server(table())
    client = server.localhost_client()
    with client.batched_trajectory_writer(B, num_keep_alive_refs=1) as writer:
        writer.configure(("obs",), num_keep_alive_refs=3, max_chunk_length=None)
        for t in range(3):
            writer.append({"obs": _obs(t), "a": np.zeros(B, np.int32)})
        with pytest.raises(errors.InvalidArgumentError, match="environment 0"):
            writer.create_items("t", 1.0, writer.history["a"][-2:])
        writer.create_items("t", 1.0, writer.history["obs"][-3:])
    items = _sample_all(client)
    assert sorted(float(i.data[0][0, 0]) for i in items) == [0.0, 10.0, 20.0, 30.0]


def test_strings_and_a_signature(make_server):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    signature = {"name": tf.TensorSpec([], tf.string), "obs": tf.TensorSpec([2, 2], tf.float32)}
    server = make_server(table(signature=signature))
    client = server.localhost_client()
    with client.batched_trajectory_writer(B, 2) as writer:
        for t in range(2):
            writer.append(
                {
                    "name": np.array([f"env{b}-{t}".encode() for b in range(B)], dtype=object),
                    "obs": _obs(t),
                }
            )
        history = writer.history
        with pytest.raises(errors.InvalidArgumentError, match="obs"):
            writer.create_items("t", 1.0, {"name": history["name"][-1], "obs": history["obs"][-1]})
        writer.create_items(
            "t", np.arange(B) + 1.0, {"name": history["name"][-1], "obs": history["obs"][-2:]}
        )
    for item in _sample_all(client):
        env = int(item.info.priority) - 1
        assert item.data[0] == f"env{env}-1".encode()


def test_bad_batches_and_arguments_are_clear_errors(make_server):
    server = make_server(table())
    client = server.localhost_client()
    with pytest.raises(ValueError, match="num_envs"):
        client.batched_trajectory_writer(0, 1)
    writer = client.batched_trajectory_writer(B, 1)
    with pytest.raises(errors.InvalidArgumentError, match="leading dimension of 4"):
        writer.append({"obs": np.zeros((B + 1, 2), np.float32)})
    with pytest.raises(errors.InvalidArgumentError, match="leading dimension"):
        writer.append({"obs": np.float32(1)})
    writer.append({"obs": _obs(0)})
    with pytest.raises(errors.InvalidArgumentError, match="obs"):
        writer.append({"obs": np.zeros((B, 3), np.float32)})
    last = writer.history["obs"][-1]
    with pytest.raises(ValueError, match="shape"):
        writer.create_items("t", 1.0, last, envs=[True, False])
    with pytest.raises(ValueError, match="not in"):
        writer.create_items("t", 1.0, last, envs=[B])
    with pytest.raises(ValueError, match="twice"):
        writer.create_items("t", 1.0, last, envs=[1, 1])
    with pytest.raises(TypeError):
        writer.create_items("t", 1.0, last, envs=[0.5])
    with pytest.raises(ValueError, match="priority"):
        writer.create_items("t", [1.0, 2.0, 3.0], last)
    with pytest.raises(IndexError):
        writer.history["obs"][-2]
    with pytest.raises(TypeError, match="BatchedTrajectoryColumn"):
        writer.create_items("t", 1.0, np.zeros(2))
    other = client.batched_trajectory_writer(B, 1)
    other.append({"obs": _obs(0)})
    with pytest.raises(ValueError, match="another writer"):
        writer.create_items("t", 1.0, other.history["obs"][-1])
    other.close()
    # Still usable after every refusal.
    writer.create_items("t", 1.0, last)
    writer.flush()
    assert client.server_info()["t"].current_size == B
    writer.close()
    with pytest.raises(errors.FailedPreconditionError):
        writer.append({"obs": _obs(1)})


def test_a_batch_larger_than_the_window_waits_for_it_to_drain(make_server):
    # A window of 2 items: a batch of 8 goes in only when nothing is in
    # flight. The queue of 8 holds the second batch on the server (in
    # flight) until samples make room, so the third batch must wait.
    server = make_server(reverb.Table.queue("q", 8))
    client = server.localhost_client()
    writer = client.batched_trajectory_writer(8, 1, max_in_flight_items=2)
    for start in (0, 8):
        writer.append({"x": np.arange(8, dtype=np.int32) + start})
        writer.create_items("q", 1.0, writer.history["x"][-1])
    writer.append({"x": np.arange(8, dtype=np.int32) + 16})
    done = threading.Event()

    def third_batch():
        writer.create_items("q", 1.0, writer.history["x"][-1])
        done.set()

    blocked = threading.Thread(target=third_batch, daemon=True)
    blocked.start()
    assert not done.wait(0.5), "the third batch did not wait for the window"
    got = [int(s.data[0]) for s in client.sample("q", 8, emit_timesteps=False)]
    assert done.wait(30)
    blocked.join()
    got += [int(s.data[0]) for s in client.sample("q", 8, emit_timesteps=False)]
    writer.flush()
    got += [int(s.data[0]) for s in client.sample("q", 8, emit_timesteps=False)]
    assert got == list(range(24))
    writer.close()


def test_an_item_that_waited_for_the_window_keeps_its_data(make_server):
    # Regression: an item created while the writer's in-flight window was
    # full lost its chunk ("references chunk ... which this stream has not
    # sent") once the window had room.
    server = make_server(reverb.Table.queue("q", 1))
    client = server.localhost_client()
    writer = client.writer(max_sequence_length=1, max_in_flight_items=1)
    got = []
    sampler = threading.Thread(
        target=lambda: got.extend(int(next(client.sample("q", 1))[0].data[0]) for _ in range(3)),
        daemon=True,
    )
    sampler.start()
    for i in range(3):
        writer.append(np.int32(i))
        writer.create_item("q", 1, 1.0)
    writer.flush()
    sampler.join(30)
    assert got == [0, 1, 2]
    writer.close()


def _all_rows(client):
    """{(environment, step): (obs, t)} of every item, environment told by priority."""
    return {
        (int(s.info.priority) - 1, int(s.data[1])): s.data[0].tolist() for s in _sample_all(client)
    }


def test_a_step_of_every_environment_is_one_chunk_and_survives_restarts(tmp_path):
    # B environments' step of a column is one chunk on the server (not B), and
    # both the checkpoint and the write-ahead log keep each environment's rows
    # and episodes.
    from reverb_tf import _native  # pylint: disable=g-import-not-at-top

    def server():
        return reverb.Server(
            [table(max_size=1000)],
            checkpointer=reverb.checkpointers.DefaultCheckpointer(str(tmp_path / "ckpt")),
            wal=reverb.checkpointers.WriteAheadLog(str(tmp_path / "wal"), sync="every_write"),
        )

    steps = 3
    first = server()
    client = reverb.Client(f"localhost:{first.port}")
    with client.batched_trajectory_writer(B, num_keep_alive_refs=1) as writer:
        for t in range(steps):
            writer.append({"obs": _obs(t), "t": np.full(B, t, np.int64)})
            writer.create_items(
                "t", np.arange(B) + 1.0, [writer.history["obs"][-1], writer.history["t"][-1]]
            )
            if t == 0:
                writer.end_episode(np.array([False, False, True, False]))
    expected = {(b, t): _obs(t)[b].tolist() for b in range(B) for t in range(steps)}
    assert _all_rows(client) == expected
    before = client.server_info()["t"]
    assert before.num_episodes == B + 1  # environment 2 began a second one
    path = client.checkpoint()
    summary = _native.core().inspect_checkpoint(path, None)
    assert summary["num_chunks"] == steps * 2  # per column and step, not per environment
    # One more step after the checkpoint lives in the log only.
    with client.batched_trajectory_writer(B, num_keep_alive_refs=1) as writer:
        writer.append({"obs": _obs(steps), "t": np.full(B, steps, np.int64)})
        writer.create_items(
            "t", np.arange(B) + 1.0, [writer.history["obs"][-1], writer.history["t"][-1]]
        )
    expected.update({(b, steps): _obs(steps)[b].tolist() for b in range(B)})
    first.stop()
    second = server()
    try:
        assert second.wal_replay["damage"] == "", second.wal_replay
        restored = reverb.Client(f"localhost:{second.port}")
        assert _all_rows(restored) == expected
        info = restored.server_info()["t"]
        assert info.current_size == B * (steps + 1)
        # The new writer's environments are new episodes.
        assert info.num_episodes == before.num_episodes + B
    finally:
        second.stop()


def test_a_remote_writer_sends_item_batches_once_the_server_takes_them(start_server, server_binary):
    # Before the server's first acknowledgement a batched writer cannot know
    # that it takes item batches, and sends single items; after it, one
    # batch per create_items call (the server counts both by message).
    metrics_port = port_outside_ephemeral_range()
    process, port = start_server(
        server_binary,
        "--config=" + uniform_table_config(0, max_size=1000),
        f"--metrics_port={metrics_port}",
    )
    steps = 5
    try:
        client = reverb.Client(f"localhost:{port}")
        with client.batched_trajectory_writer(B, num_keep_alive_refs=1) as writer:
            for t in range(steps):
                writer.append({"obs": _obs(t)})
                writer.create_items("t", np.ones(B), [writer.history["obs"][-1]])
                if t == 0:
                    writer.flush()  # the first acknowledgement
        samples, _ = scrape_metrics(metrics_port)
        received = {
            message: metric_value(samples, "reverb_tf_insert_items_received_total", message=message)
            for message in ("item", "item_batch")
        }
        assert received == {"item": B, "item_batch": (steps - 1) * B}
        rows = {tuple(np.asarray(s.data[0]).tolist()) for s in _sample_all(client)}
        assert rows == {tuple(_obs(t)[b].tolist()) for b in range(B) for t in range(steps)}
    finally:
        process.kill()
        process.communicate()
