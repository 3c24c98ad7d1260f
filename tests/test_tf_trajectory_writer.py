# SPDX-License-Identifier: Apache-2.0
"""TFTrajectoryWriter: graph-mode writing, against a real server.

The graph writer must store what the Python writer stores for the same
steps (compared item by item, byte for byte), check items against the
table's signature as it does, and work eagerly, in tf.function, in
tf.while_loop and in tf.distribute replica functions.
"""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
import tree

import reverb_tf as reverb

# Every test twice: over gRPC and in-process (conftest.py).
BOTH_TRANSPORTS = True

N = 3  # steps per item


def _table(name, signature=None):
    # Sampled once each, oldest first: sampling a table's size reads every
    # item in insertion order (and empties it).
    return reverb.Table(
        name=name,
        sampler=reverb.selectors.Fifo(),
        remover=reverb.selectors.Fifo(),
        max_size=10_000,
        max_times_sampled=1,
        rate_limiter=reverb.rate_limiters.MinSize(1),
        signature=signature,
    )


@pytest.fixture
def server():
    spec = {
        "obs": tf.TensorSpec([N, 2], tf.float32),
        "reward": tf.TensorSpec([N], tf.float64),
        "last": tf.TensorSpec([], tf.int32),
    }
    tables = [_table("py", spec), _table("tf", spec), _table("free"), _table("free2")]
    with reverb.Server(tables) as srv:
        yield srv


def _steps(count):
    return [
        {
            "obs": np.full([2], i, np.float32),
            "reward": np.float64(i) / 4,  # exact in binary, however divided
            "last": np.int32(i),
        }
        for i in range(count)
    ]


def _trajectory(history):
    return {
        "obs": history["obs"][-N:],
        "reward": history["reward"][-N:],
        "last": history["last"][-1],
    }


def _items(client, table):
    size = client.server_info()[table].current_size
    samples = client.sample(table, num_samples=size, emit_timesteps=False)
    return [(s.info.priority, s.data) for s in samples]


def _same(left, right):
    assert len(left) == len(right) and left
    for (p1, d1), (p2, d2) in zip(left, right):
        assert p1 == p2
        assert tree.assert_same_structure(d1, d2) is None
        for a, b in zip(tree.flatten(d1), tree.flatten(d2)):
            a, b = np.asarray(a), np.asarray(b)
            assert a.dtype == b.dtype and a.shape == b.shape
            assert a.tobytes() == b.tobytes()


def _python_writer_items(address, steps):
    client = reverb.Client(address)
    with client.trajectory_writer(num_keep_alive_refs=N) as writer:
        for i, step in enumerate(steps):
            writer.append(step)
            if i >= N - 1:
                writer.create_item("py", priority=float(i), trajectory=_trajectory(writer.history))
        writer.end_episode()
    return _items(client, "py")


def test_eager_writer_stores_what_the_python_writer_stores(server):
    address = f"localhost:{server.port}"
    steps = _steps(7)
    expected = _python_writer_items(address, steps)
    writer = reverb.TFTrajectoryWriter(address, num_keep_alive_refs=N)
    for i, step in enumerate(steps):
        index = writer.append(step)
        assert int(index) == i
        if i >= N - 1:
            writer.create_item("tf", priority=float(i), trajectory=_trajectory(writer.history))
    assert int(writer.episode_steps) == 7
    writer.end_episode()
    assert int(writer.episode_steps) == 0
    writer.close()
    _same(expected, _items(reverb.Client(address), "tf"))


def test_tf_function_writer_stores_what_the_python_writer_stores(server):
    address = f"localhost:{server.port}"
    steps = _steps(6)
    expected = _python_writer_items(address, steps)
    writer = reverb.TFTrajectoryWriter(address, num_keep_alive_refs=N)

    @tf.function
    def act(step, priority, create):
        writer.append(step)
        if create:  # a Python bool: two traces
            writer.create_item("tf", priority, _trajectory(writer.history))

    for i, step in enumerate(steps):
        act(tf.nest.map_structure(tf.constant, step), tf.constant(float(i), tf.float64), i >= N - 1)
    writer.end_episode()
    _same(expected, _items(reverb.Client(address), "tf"))


def test_while_loop_actor_writes_overlapping_items_and_ends_episodes(server):
    address = f"localhost:{server.port}"
    steps = _steps(9)
    expected = _python_writer_items(address, steps)
    writer = reverb.TFTrajectoryWriter(address, num_keep_alive_refs=N)

    @tf.function
    def episode(length):
        def body(i):
            obs = tf.fill([2], tf.cast(i, tf.float32))
            writer.append(
                {"obs": obs, "reward": tf.cast(i, tf.float64) / 4, "last": tf.cast(i, tf.int32)}
            )

            def create():
                writer.create_item("tf", tf.cast(i, tf.float64), _trajectory(writer.history))
                return tf.constant(True)

            tf.cond(i >= N - 1, create, lambda: tf.constant(False))
            return (i + 1,)

        tf.while_loop(lambda i: i < length, body, (tf.constant(0),))
        writer.end_episode()

    episode(tf.constant(9))
    _same(expected, _items(reverb.Client(address), "tf"))
    # A second episode in the same compiled function: its history starts
    # afresh (step 0 again), so its items repeat the first episode's.
    episode(tf.constant(9))
    _same(expected, _items(reverb.Client(address), "tf"))


def _chunk_bytes(server):
    for line in server.metrics_text().splitlines():
        if line.startswith("reverb_tf_chunk_bytes "):
            return float(line.split()[1])
    raise AssertionError("no reverb_tf_chunk_bytes in the server's metrics")


def test_overlapping_items_share_chunks(server):
    # 50 steps, an item of the last N steps at every step from the N-th: the
    # writer stores each step once, where TFClient.insert stores N copies.
    address = f"localhost:{server.port}"
    writer = reverb.TFTrajectoryWriter(address, num_keep_alive_refs=N)

    @tf.function
    def act(i):
        writer.append({"x": tf.fill([64], i)})
        writer.create_item("free", 1.0, {"x": writer.history["x"][-N:]})

    for i in range(N - 1):
        writer.append({"x": tf.fill([64], tf.constant(i))})
    for i in range(N - 1, 50):
        act(tf.constant(i))
    writer.flush()
    client = reverb.Client(address)
    items = _items(client, "free")
    assert len(items) == 50 - (N - 1)
    for k, (_, data) in enumerate(items):
        # The k-th item covers steps k .. k + N - 1.
        (x,) = data  # a table without a signature: the flat columns
        np.testing.assert_array_equal(
            x, np.stack([np.full([64], k + j, np.int32) for j in range(N)])
        )
    shared = _chunk_bytes(server)

    tf_client = reverb.TFClient(address)
    for k in range(len(items)):
        window = tf.stack([tf.fill([64], k + j) for j in range(N)])
        tf_client.insert([window], tf.constant(["free2"]), tf.constant([1.0], tf.float64))
    copied = _chunk_bytes(server) - shared
    # The writer's bytes per item are about 1/N of per-item copies'.
    assert shared * (N - 0.5) < copied, (shared, copied)


def test_signature_mismatch_is_an_invalid_argument_naming_the_column(server):
    address = f"localhost:{server.port}"
    writer = reverb.TFTrajectoryWriter(address, num_keep_alive_refs=N)
    for step in _steps(N):
        writer.append(step)
    bad = dict(_trajectory(writer.history))
    bad["obs"] = writer.history["obs"][-2:]  # 2 steps where the table wants 3
    with pytest.raises(tf.errors.InvalidArgumentError, match="obs"):
        writer.create_item("tf", 1.0, bad)
    with pytest.raises(tf.errors.InvalidArgumentError, match="could not be found"):
        writer.create_item("missing", 1.0, _trajectory(writer.history))
    # validate_items=False: the client does not check, the server neither.
    unchecked = reverb.TFTrajectoryWriter(address, num_keep_alive_refs=N, validate_items=False)
    for step in _steps(N):
        unchecked.append(step)
    unchecked.create_item("tf", 1.0, bad)
    unchecked.flush()
    assert reverb.Client(address).server_info()["tf"].current_size == 1


def test_bad_arguments_fail_clearly(server):
    address = f"localhost:{server.port}"
    writer = reverb.TFTrajectoryWriter(address, num_keep_alive_refs=2)
    with pytest.raises(RuntimeError, match="history is empty"):
        writer.history  # noqa: B018
    writer.append({"a": np.int32(1)})
    with pytest.raises(tf.errors.InvalidArgumentError, match="a"):
        writer.append({"a": np.float32(1)})  # the column is int32
    with pytest.raises(TypeError, match="HistorySlice"):
        writer.create_item("free", 1.0, {"a": np.int32(1)})
    with pytest.raises(ValueError, match="steps of 1"):
        writer.history["a"][::2]  # noqa: B018
    with pytest.raises(TypeError, match="Python ints"):
        writer.history["a"][tf.constant(1) :]  # noqa: B018
    with pytest.raises(ValueError, match="must not be empty"):
        writer.create_item("free", 1.0, [])
    # The newest step only: 1 entry. An index past the history fails when
    # the op runs, naming the range.
    with pytest.raises(tf.errors.OutOfRangeError, match="out of range"):
        writer.create_item("free", 1.0, {"a": writer.history["a"][-5]})
    writer.append({"a": np.int32(2)}, partial_step=True)
    with pytest.raises(tf.errors.FailedPreconditionError, match="partial step"):
        writer.end_episode()


def test_flush_times_out_with_a_deadline_exceeded_error():
    # A queue of one item that nobody samples holds the second item back:
    # flush waits for it until its timeout.
    with reverb.Server([reverb.Table.queue("blocked", 1)]) as other:
        writer = reverb.TFTrajectoryWriter(f"localhost:{other.port}", num_keep_alive_refs=1)
        for i in range(3):
            writer.append({"x": np.int64(i)})
            writer.create_item("blocked", 1.0, {"x": writer.history["x"][-1:]})
        with pytest.raises(tf.errors.DeadlineExceededError):
            writer.flush(timeout_ms=200)
        writer.close()


_DISTRIBUTED = textwrap.dedent(
    """
    import sys
    import numpy as np
    import tensorflow as tf
    tf.config.set_logical_device_configuration(
        tf.config.list_physical_devices("CPU")[0],
        [tf.config.LogicalDeviceConfiguration()] * 2)
    import reverb_tf as reverb

    table = reverb.Table("t", reverb.selectors.Fifo(), reverb.selectors.Fifo(), 1000,
                         reverb.rate_limiters.MinSize(1), max_times_sampled=1)
    with reverb.Server([table]) as server:
        address = f"localhost:{server.port}"
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        # One writer per replica; a replica finds its own by its id.
        writers = [reverb.TFTrajectoryWriter(address, num_keep_alive_refs=2)
                   for _ in range(strategy.num_replicas_in_sync)]

        @tf.function
        def step(i):
            def replica_fn():
                ctx = tf.distribute.get_replica_context()
                replica = tf.get_static_value(ctx.replica_id_in_sync_group)
                writer = writers[replica]
                writer.append({"x": tf.fill([2], i * 10 + replica)})
                writer.create_item("t", 1.0, {"x": writer.history["x"][-1]})
            strategy.run(replica_fn)

        for i in range(5):
            step(tf.constant(i))
        for writer in writers:
            writer.flush()
        client = reverb.Client(address)
        values = sorted(int(s[0].data[0][0]) for s in client.sample("t", num_samples=10))
        print(values)
        assert values == sorted(i * 10 + r for i in range(5) for r in range(2)), values
    """
)


def test_one_writer_per_replica_under_mirrored_strategy():
    # Its own process: logical devices must be set before TensorFlow starts.
    result = subprocess.run(
        [sys.executable, "-c", _DISTRIBUTED], capture_output=True, text=True, timeout=240
    )
    assert result.returncode == 0, result.stderr[-3000:]
