# SPDX-License-Identifier: Apache-2.0
"""Checkpointing through the Python Server and the reverb_tf_server binary.

Every test saves through a real server and restores into a new one; the
binary tests include kill -9 in the middle of a checkpoint write.
"""

import logging
import os
import pathlib
import signal
import subprocess
import threading
import time

import numpy as np
import pytest

import reverb_tf as reverb
from integration import wait_until
from reverb_tf import errors

DEADLINE_S = 30.0


def _signature():
    import tensorflow as tf

    return {"obs": tf.TensorSpec([None, 3], tf.float32), "tag": tf.TensorSpec([], tf.int64)}


def _tables(limiter=None, max_size=1000):
    """One table of each kind; 'queue' and 'heap' are deterministic."""
    return [
        reverb.Table(
            "uniform",
            reverb.selectors.Uniform(),
            reverb.selectors.Fifo(),
            max_size,
            limiter or reverb.rate_limiters.MinSize(1),
            signature=_signature(),
        ),
        reverb.Table(
            "prioritized",
            reverb.selectors.Prioritized(0.7),
            reverb.selectors.Fifo(),
            max_size,
            reverb.rate_limiters.MinSize(1),
            max_times_sampled=3,
            signature=_signature(),
        ),
        reverb.Table.queue("queue", 100, signature=_signature()),
        reverb.Table(
            "heap",
            reverb.selectors.MaxHeap(),
            reverb.selectors.MinHeap(),
            max_size,
            reverb.rate_limiters.MinSize(1),
            signature=_signature(),
        ),
    ]


def _fill(client, steps=30):
    """Each step's item goes into every table: chunks shared across tables."""
    with client.trajectory_writer(num_keep_alive_refs=2) as writer:
        for step in range(steps):
            writer.append({"obs": np.full(3, step, np.float32), "tag": np.int64(step)})
            trajectory = {
                "obs": writer.history["obs"][-2:] if step else writer.history["obs"][-1:],
                "tag": writer.history["tag"][-1],
            }
            for name in ("uniform", "prioritized", "queue", "heap"):
                writer.create_item(name, priority=float(step % 7), trajectory=trajectory)
        writer.flush()


def _drain_tags(client, table, n):
    samples = client.sample(
        table, num_samples=n, emit_timesteps=False, unpack_as_table_signature=True
    )
    return [int(s.data["tag"]) for s in samples]


def test_round_trip_through_the_python_server(tmp_path):
    checkpointer = reverb.checkpointers.DefaultCheckpointer(str(tmp_path / "ckpt"))
    server = reverb.Server(_tables(), checkpointer=checkpointer)
    assert server.loaded_checkpoint is None
    client = server.localhost_client()
    _fill(client)
    # Sample so times_sampled and max_times_sampled matter: 2 of the 3
    # allowed samples of some prioritized items.
    list(client.sample("prioritized", num_samples=20, emit_timesteps=False))
    list(client.sample("queue", num_samples=5, emit_timesteps=False))
    before = client.server_info()
    path = client.checkpoint()
    assert pathlib.Path(path).parent == tmp_path / "ckpt"
    assert (pathlib.Path(path) / "replay.rtfckpt").is_file()
    # What happens next in the original, for comparison after the restore.
    expected_queue = _drain_tags(client, "queue", 5)
    expected_heap = _drain_tags(client, "heap", 5)
    server.stop()

    restored = reverb.Server(_tables(), checkpointer=checkpointer)
    assert restored.loaded_checkpoint == path
    client = restored.localhost_client()
    after = client.server_info()
    for name in before:
        assert after[name].current_size == before[name].current_size, name
        assert after[name].num_unique_samples == before[name].num_unique_samples, name
        a, b = after[name].rate_limiter_info, before[name].rate_limiter_info
        assert (a.inserts, a.samples, a.deletes) == (b.inserts, b.samples, b.deletes), name
    assert _drain_tags(client, "queue", 5) == expected_queue
    assert _drain_tags(client, "heap", 5) == expected_heap
    # The data itself, trajectories of two steps included.
    sample = next(
        client.sample(
            "uniform", num_samples=1, emit_timesteps=False, unpack_as_table_signature=True
        )
    )
    tag = int(sample.data["tag"])
    expected_obs = np.stack([np.full(3, s, np.float32) for s in range(max(tag - 1, 0), tag + 1)])
    np.testing.assert_array_equal(sample.data["obs"], expected_obs)
    # times_sampled survived: an item's count continues where it was, and
    # none is sampled a 4th time (max_times_sampled).
    was_sampled = before["prioritized"].num_unique_samples
    counts = [
        s.info.times_sampled
        for s in client.sample("prioritized", num_samples=40, emit_timesteps=False)
    ]
    assert max(counts) <= 3
    assert was_sampled > 0 and counts.count(1) < 40
    restored.stop()


def test_default_checkpointer_is_a_temp_dir_and_platform_alias():
    from reverb_tf.platform import checkpointers_lib  # dm-reverb's module path

    assert checkpointers_lib.DefaultCheckpointer is reverb.checkpointers.DefaultCheckpointer
    assert isinstance(
        checkpointers_lib.default_checkpointer(), reverb.checkpointers.TempDirCheckpointer
    )
    with reverb.Server(_tables()) as server:
        client = server.localhost_client()
        _fill(client, steps=3)
        path = client.checkpoint()
        assert os.path.isdir(path)


def test_fallback_checkpoint_and_keep(tmp_path):
    source = reverb.checkpointers.DefaultCheckpointer(str(tmp_path / "a"), keep=2)
    with reverb.Server(_tables(), checkpointer=source) as server:
        client = server.localhost_client()
        paths = []
        for _ in range(4):
            _fill(client, steps=2)
            paths.append(client.checkpoint())
        assert sorted(os.listdir(tmp_path / "a")) == sorted(os.path.basename(p) for p in paths[2:])
        size = client.server_info()["uniform"].current_size

    # An empty root falls back to the given checkpoint; later ones go to the root.
    fresh = reverb.checkpointers.DefaultCheckpointer(
        str(tmp_path / "b"), fallback_checkpoint_path=paths[-1]
    )
    with reverb.Server(_tables(), checkpointer=fresh) as server:
        assert server.loaded_checkpoint == paths[-1]
        client = server.localhost_client()
        assert client.server_info()["uniform"].current_size == size
        new_path = client.checkpoint()
        assert pathlib.Path(new_path).parent == tmp_path / "b"


def test_changed_options_apply_and_a_stale_limiter_does_not_block_inserts(tmp_path):
    checkpointer = reverb.checkpointers.DefaultCheckpointer(str(tmp_path))
    with reverb.Server(_tables(), checkpointer=checkpointer) as server:
        _fill(server.localhost_client(), steps=60)
        server.localhost_client().checkpoint()
    # 60 inserts at 5 samples each would be 300 samples owed; the restored
    # limiter starts inside its window instead.
    limiter = reverb.rate_limiters.SampleToInsertRatio(5.0, 10, 20.0)
    with reverb.Server(_tables(limiter=limiter, max_size=40), checkpointer=checkpointer) as server:
        client = server.localhost_client()
        assert client.server_info()["uniform"].current_size == 40  # new max_size
        list(client.sample("uniform", num_samples=6, emit_timesteps=False))
        with client.trajectory_writer(num_keep_alive_refs=1) as writer:
            writer.append({"obs": np.zeros(3, np.float32), "tag": np.int64(-1)})
            writer.create_item(
                "uniform",
                1.0,
                {"obs": writer.history["obs"][-1:], "tag": writer.history["tag"][-1]},
            )
            writer.flush(timeout_ms=5000)


def test_mismatched_tables_and_damaged_files_are_clear_errors(tmp_path):
    checkpointer = reverb.checkpointers.DefaultCheckpointer(str(tmp_path))
    with reverb.Server(_tables(), checkpointer=checkpointer) as server:
        _fill(server.localhost_client(), steps=90)
        path = server.localhost_client().checkpoint()

    renamed = _tables()
    renamed[3] = reverb.Table(
        "heap2",
        reverb.selectors.MaxHeap(),
        reverb.selectors.MinHeap(),
        100,
        reverb.rate_limiters.MinSize(1),
        signature=_signature(),
    )
    with pytest.raises(errors.InvalidArgumentError, match="'heap'"):
        reverb.Server(renamed, checkpointer=checkpointer)

    import tensorflow as tf

    signed = _tables()
    signed[0] = reverb.Table(
        "uniform",
        reverb.selectors.Uniform(),
        reverb.selectors.Fifo(),
        100,
        reverb.rate_limiters.MinSize(1),
        signature={"obs": tf.TensorSpec([None, 4], tf.float32), "tag": tf.TensorSpec([], tf.int64)},
    )
    with pytest.raises(errors.InvalidArgumentError, match="table 'uniform'.*signature"):
        reverb.Server(signed, checkpointer=checkpointer)

    data = pathlib.Path(path) / "replay.rtfckpt"
    original = data.read_bytes()
    damaged = bytearray(original)
    damaged[len(damaged) // 2] ^= 0x04
    data.write_bytes(bytes(damaged))
    with pytest.raises(errors.DataLossError, match=r"replay\.rtfckpt.*record \d+"):
        reverb.Server(_tables(), checkpointer=checkpointer)
    data.write_bytes(original[: len(original) * 2 // 3])
    with pytest.raises(errors.DataLossError, match="truncated"):
        reverb.Server(_tables(), checkpointer=checkpointer)
    data.write_bytes(original)
    with reverb.Server(_tables(), checkpointer=checkpointer) as server:
        assert server.localhost_client().server_info()["uniform"].current_size == 90


# --------------------------------------------------------------- the binary

CONFIG = """
port: 0
tables {
  table_name: "frames"
  sampler { uniform: true }
  remover { fifo: true }
  max_size: 100000
  rate_limiter { samples_per_insert: 1 min_size_to_sample: 1 min_diff: -1e300 max_diff: 1e300 }
}
"""


def _start(start_server, server_binary, *args):
    process, port = start_server(server_binary, f"--config={CONFIG}", *args)
    return process, reverb.Client(f"localhost:{port}")


def _insert_frames(client, n, seed):
    rng = np.random.default_rng(seed)
    with client.trajectory_writer(num_keep_alive_refs=1) as writer:
        for _ in range(n):
            # Random bytes do not compress: a checkpoint of these takes a while.
            writer.append({"frame": rng.integers(0, 255, (256, 1024), np.uint8)})
            writer.create_item("frames", 1.0, {"frame": writer.history["frame"][-1]})
        writer.flush()


def test_binary_restores_and_checkpoints_periodically(server_binary, start_server, tmp_path):
    root = tmp_path / "ckpt"
    process, client = _start(
        start_server, server_binary, f"--checkpoint_dir={root}", "--checkpoint_interval=300ms"
    )
    try:
        _insert_frames(client, 5, seed=1)
        deadline = time.monotonic() + DEADLINE_S
        # A periodic checkpoint holding all 5 items appears without a
        # request (complete ones appear atomically, by rename).
        while True:
            done = sorted(p for p in os.listdir(root) if not p.startswith("."))
            if done and (root / done[-1] / "replay.rtfckpt").stat().st_size > 5 * 256 * 1024:
                break
            assert time.monotonic() < deadline, "no periodic checkpoint"
            time.sleep(0.1)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0

    process, client = _start(start_server, server_binary, f"--checkpoint_dir={root}")
    try:
        assert client.server_info(timeout=10)["frames"].current_size == 5
        assert "loaded checkpoint" in process.stderr.readline()
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0


def test_kill_9_during_a_checkpoint_keeps_the_previous_one(server_binary, start_server, tmp_path):
    root = tmp_path / "ckpt"
    process, client = _start(start_server, server_binary, f"--checkpoint_dir={root}")
    try:
        _insert_frames(client, 3, seed=2)
        first = client.checkpoint()
        _insert_frames(client, 300, seed=3)  # ~80 MB: the next write takes a while
        thread = threading.Thread(target=lambda: _swallow(client.checkpoint), daemon=True)
        thread.start()
        deadline = time.monotonic() + DEADLINE_S
        while not any(p.startswith(".tmp-") for p in os.listdir(root)):
            assert time.monotonic() < deadline, "the second checkpoint never started"
            time.sleep(0.001)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        thread.join(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    # Nothing but the first checkpoint is complete.
    assert [p for p in os.listdir(root) if not p.startswith(".")] == [os.path.basename(first)]

    process, client = _start(start_server, server_binary, f"--checkpoint_dir={root}")
    try:
        assert client.server_info(timeout=10)["frames"].current_size == 3
        # The dead writer's temporary directory is cleaned up on start.
        assert not any(p.startswith(".tmp-") for p in os.listdir(root))
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0


def _swallow(fn):
    try:
        fn()
    except errors.ReverbError:
        pass  # the server was killed under the call


def test_binary_without_checkpoint_dir_refuses_checkpoint_requests(server_binary, start_server):
    process, client = _start(start_server, server_binary)
    try:
        with pytest.raises(errors.FailedPreconditionError, match="without a checkpointer"):
            client.checkpoint()
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0


def test_binary_damaged_checkpoint_exits_naming_the_file(server_binary, start_server, tmp_path):
    root = tmp_path / "ckpt"
    process, client = _start(start_server, server_binary, f"--checkpoint_dir={root}")
    try:
        _insert_frames(client, 2, seed=4)
        path = client.checkpoint()
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    data = pathlib.Path(path) / "replay.rtfckpt"
    data.write_bytes(data.read_bytes()[:-100])
    result = subprocess.run(
        [server_binary, f"--config={CONFIG}", f"--checkpoint_dir={root}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "replay.rtfckpt" in result.stderr and "truncated" in result.stderr


def test_a_checkpoint_that_cannot_be_written_reports_a_permanent_error(tmp_path):
    # Issue 14, defect 7: a forbidden directory is not UNAVAILABLE ("retry me").
    import os  # pylint: disable=g-import-not-at-top

    root = tmp_path / "ro"
    root.mkdir()
    server = reverb.Server(
        [reverb.Table.queue("q", 5)],
        checkpointer=reverb.checkpointers.DefaultCheckpointer(str(root)),
    )
    try:
        # Root ignores permission bits; a file where the directory should be
        # fails the same way for everyone.
        os.rmdir(root)
        root.write_text("not a directory")
        with pytest.raises(reverb.errors.ReverbError) as raised:
            reverb.Client(f"localhost:{server.port}").checkpoint()
        assert not isinstance(raised.value, reverb.errors.UnavailableError), raised.value
    finally:
        server.stop()


class _Lines(logging.Handler):
    """Keeps the messages of the records it handles."""

    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append((record.levelno, record.getMessage()))


def test_a_newest_checkpoint_without_its_data_file_fails_loudly(tmp_path, capfd):
    # Issue 14, defect 8: it used to fall back silently to the older one.
    root = str(tmp_path / "root")
    checkpointer = reverb.checkpointers.DefaultCheckpointer(root, keep=2)
    with reverb.Server([reverb.Table.queue("q", 5)], checkpointer=checkpointer) as server:
        client = reverb.Client(f"localhost:{server.port}")
        client.checkpoint()
        client.insert(np.int32(1), {"q": 1.0})
        newest = client.checkpoint()
    os.remove(os.path.join(newest, "replay.rtfckpt"))
    with pytest.raises(errors.DataLossError, match="newest checkpoint .* is damaged"):
        reverb.Server(
            [reverb.Table.queue("q", 5)],
            checkpointer=reverb.checkpointers.DefaultCheckpointer(root, keep=2),
        )
    # Opted in: the older checkpoint is loaded, loudly: the core's warning
    # reaches Python's logging once (absl's logger), and stderr not directly.
    lines = _Lines()
    logging.getLogger("absl").addHandler(lines)
    capfd.readouterr()
    with reverb.Server(
        [reverb.Table.queue("q", 5)],
        checkpointer=reverb.checkpointers.DefaultCheckpointer(
            root, keep=2, load_previous_if_damaged=True
        ),
    ) as server:
        assert server.loaded_checkpoint is not None and server.loaded_checkpoint != newest
        assert len(server.skipped_checkpoints) == 1
        assert server.skipped_checkpoints[0].startswith(newest + ": ")
        info = reverb.Client(f"localhost:{server.port}").server_info(timeout=10)
        assert info["q"].current_size == 0  # what the older checkpoint held
    try:
        older = server.loaded_checkpoint
        wait_until(lambda: lines.lines, "the core's warning reaches Python's logging")
        time.sleep(0.2)  # a second line, if one were sent, comes as soon
        warned = [m for level, m in lines.lines if "loaded the older checkpoint" in m]
        assert len(warned) == 1 and lines.lines[0][0] == logging.WARNING, lines.lines
        assert older in warned[0] and newest in warned[0], warned
        assert "reverb_tf: WARNING" not in capfd.readouterr().err
    finally:
        logging.getLogger("absl").removeHandler(lines)


def test_binary_on_damaged_checkpoint_previous_loads_the_older_one(
    server_binary, start_server, tmp_path
):
    root = tmp_path / "ckpt"
    process, client = _start(
        start_server, server_binary, f"--checkpoint_dir={root}", "--checkpoint_keep=2"
    )
    try:
        _insert_frames(client, 2, seed=4)
        older = client.checkpoint()
        _insert_frames(client, 3, seed=5)
        newest = client.checkpoint()
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    data = pathlib.Path(newest) / "replay.rtfckpt"
    data.write_bytes(data.read_bytes()[:-100])
    refused = subprocess.run(
        [server_binary, f"--config={CONFIG}", f"--checkpoint_dir={root}", "--checkpoint_keep=2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode != 0
    assert "on_damaged_checkpoint" in refused.stderr or "load_previous_if_damaged" in refused.stderr
    process, client = _start(
        start_server,
        server_binary,
        f"--checkpoint_dir={root}",
        "--checkpoint_keep=2",
        "--on_damaged_checkpoint=previous",
    )
    try:
        assert client.server_info(timeout=10)["frames"].current_size == 2
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    stderr = process.stderr.read()
    assert "WARNING" in stderr and newest in stderr and older in stderr
