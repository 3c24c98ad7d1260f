# SPDX-License-Identifier: Apache-2.0
"""The reverb_tf_server binary: textproto configs, readiness, clean shutdown."""

import signal
import subprocess
import sys

import numpy as np
import pytest

import reverb_tf
from integration import listening_addresses

GOOD_CONFIG = """
port: 0
tables {
  table_name: "replay"
  sampler { prioritized { priority_exponent: 0.8 } }
  remover { fifo: true }
  max_size: 1000
  max_times_sampled: 2
  rate_limiter { samples_per_insert: 1 min_size_to_sample: 1 min_diff: -1e300 max_diff: 1e300 }
}
tables {
  table_name: "queue"
  sampler { fifo: true }
  remover { fifo: true }
  max_size: 10
  max_times_sampled: 1
  rate_limiter { samples_per_insert: 1 min_size_to_sample: 1 min_diff: 0 max_diff: 10 }
}
"""


def test_serves_the_configured_tables_and_stops_on_sigterm(server_binary, start_server, tmp_path):
    config_file = tmp_path / "server.textproto"
    config_file.write_text(GOOD_CONFIG)
    process, port = start_server(server_binary, f"--config_file={config_file}")
    try:
        client = reverb_tf.Client(f"localhost:{port}")
        info = client.server_info(timeout=10)
        assert sorted(info) == ["queue", "replay"]
        assert info["replay"].max_size == 1000
        assert info["replay"].max_times_sampled == 2
        with client.trajectory_writer(num_keep_alive_refs=1) as writer:
            for step in range(5):
                writer.append({"obs": np.full(3, step, np.float32)})
                writer.create_item(
                    "replay", priority=1.0, trajectory={"obs": writer.history["obs"][-1]}
                )
            writer.flush()
        assert client.server_info(timeout=10)["replay"].current_size == 5
        sample = next(client.sample("replay", num_samples=1, emit_timesteps=False))
        assert sample.data[0].shape == (3,)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    assert "stopping" in process.stdout.read()


def test_python_entry_point_execs_the_binary(server_binary, start_server):
    # What the wheel's `reverb_tf_server` console script runs.
    from reverb_tf import _server_binary

    assert str(_server_binary.path()) == server_binary
    process, port = start_server(
        sys.executable, "-m", "reverb_tf._server_binary", "--config=" + GOOD_CONFIG
    )
    try:
        assert "replay" in reverb_tf.Client(f"localhost:{port}").server_info(timeout=10)
    finally:
        process.send_signal(signal.SIGTERM)  # reaches the binary itself: it replaced Python
        assert process.wait(timeout=10) == 0
    assert "stopping" in process.stdout.read()


def test_python_entry_point_without_the_binary_exits_2(tmp_path):
    code = (
        "import pathlib, reverb_tf._server_binary as entry\n"
        f"entry.path = lambda: pathlib.Path({str(tmp_path / 'missing')!r})\n"
        "entry.main()"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "missing or not executable" in result.stderr


def test_config_flag_takes_the_textproto_inline(server_binary, start_server):
    process, port = start_server(server_binary, "--config=" + GOOD_CONFIG)
    try:
        assert "queue" in reverb_tf.Client(f"localhost:{port}").server_info(timeout=10)
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=10) == 0


def test_reads_a_server_config_built_with_dm_reverbs_messages(server_binary, start_server):
    # --config is dm-reverb's ReverbServerConfig: a config a program builds
    # through dm-reverb's module paths, printed in text format, serves as
    # configured, and server_info reports the options it was given.
    from google.protobuf import text_format

    from reverb_tf.cc import schema_pb2
    from reverb_tf.cc.checkpointing import checkpoint_pb2
    from reverb_tf.server_executable import reverb_config_pb2

    table = checkpoint_pb2.PriorityTableCheckpoint(
        table_name="replay",
        max_size=50,
        max_times_sampled=3,
        sampler=schema_pb2.KeyDistributionOptions(
            prioritized=schema_pb2.KeyDistributionOptions.Prioritized(priority_exponent=0.5)
        ),
        remover=schema_pb2.KeyDistributionOptions(fifo=True, is_deterministic=True),
        rate_limiter=checkpoint_pb2.RateLimiterCheckpoint(
            samples_per_insert=2.0, min_diff=-10.0, max_diff=10.0, min_size_to_sample=1
        ),
    )
    config = reverb_config_pb2.ReverbServerConfig(tables=[table], port=0)
    process, port = start_server(server_binary, "--config=" + text_format.MessageToString(config))
    try:
        info = reverb_tf.Client(f"localhost:{port}").server_info(timeout=10)["replay"]
        assert (info.max_size, info.max_times_sampled) == (50, 3)
        assert info.sampler_options == table.sampler
        assert info.remover_options == table.remover
        limiter = info.rate_limiter_info
        assert (limiter.samples_per_insert, limiter.min_diff, limiter.max_diff) == (2, -10, 10)
        assert limiter.min_size_to_sample == 1
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=10) == 0


# The start of a config of one uniform table "t" with a fifo remover.
_UNIFORM_T = 'port: 0 tables { table_name: "t" sampler { uniform: true } remover { fifo: true } '


@pytest.mark.parametrize(
    "config, message",
    [
        ('port: 0 tables { table_nam: "t" }', 'no field named "table_nam"'),
        ('port: 0 tables { table_name: "t" max_size: 10 }', "sampler must be one of"),
        (
            _UNIFORM_T + "max_size: 10 }",
            "rate_limiter is required",
        ),
        (
            _UNIFORM_T + "max_size: 0 "
            "rate_limiter { samples_per_insert: 1 min_size_to_sample: 1 } }",
            "max_size (0) must be a positive integer",
        ),
        # A limiter that can deadlock: the diffs left unset are 0 (the window is
        # empty), or a SampleToInsertRatio-like window of 1 around the start.
        (
            _UNIFORM_T + "max_size: 10 "
            "rate_limiter { samples_per_insert: 1 min_size_to_sample: 1 } }",
            "table 't': rate limiter can block inserts and samples for good",
        ),
        (
            _UNIFORM_T + "max_size: 10 "
            "rate_limiter { samples_per_insert: 1 min_size_to_sample: 1 "
            "min_diff: 0.5 max_diff: 1.5 } }",
            "rate limiter can block inserts and samples for good",
        ),
        (
            'port: 0 tables { table_name: "t" sampler { prioritized { priority_exponent: -1 } } '
            "remover { fifo: true } max_size: 10 "
            "rate_limiter { samples_per_insert: 1 min_size_to_sample: 1 "
            "min_diff: -10 max_diff: 10 } }",
            "table 't': sampler: priority_exponent must be finite and >= 0",
        ),
        ("port: 0", "no tables"),
    ],
)
def test_bad_configs_exit_2_naming_the_problem(server_binary, config, message):
    result = subprocess.run(
        [server_binary, "--config=" + config], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 2
    assert message in result.stderr


def test_a_narrow_but_live_limiter_serves_and_a_late_start_is_warned_about(
    server_binary, start_server
):
    # Queue(1)'s window (min_diff 0, max_diff 1) on a table that keeps its
    # items: diff only takes the values 0 and 1, so calls alternate and never
    # deadlock. The second table's max_diff is below its start (100).
    config = (
        'port: 0 tables { table_name: "narrow" sampler { fifo: true } remover { fifo: true } '
        "max_size: 10 rate_limiter { samples_per_insert: 1 min_size_to_sample: 1 "
        "min_diff: 0 max_diff: 1 } } "
        'tables { table_name: "late" sampler { uniform: true } remover { fifo: true } '
        "max_size: 1000 rate_limiter { samples_per_insert: 1 min_size_to_sample: 100 "
        "min_diff: -10 max_diff: 10 } }"
    )
    process, port = start_server(server_binary, "--config=" + config)
    try:
        client = reverb_tf.Client(f"localhost:{port}")
        for value in range(3):
            client.insert(np.int64(value), priorities={"narrow": 1.0})
            sample = next(client.sample("narrow", num_samples=1, emit_timesteps=False))
            assert sample.data[0].item() == 0  # fifo over items that stay
        assert client.server_info(timeout=10)["narrow"].current_size == 3
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    assert (
        "warning: table 'late': max_diff (10.0) is below min_size_to_sample * "
        "samples_per_insert (100.0)"
    ) in process.stderr.read()


def test_missing_config_file_is_a_clear_error(server_binary, tmp_path):
    result = subprocess.run(
        [server_binary, f"--config_file={tmp_path / 'nope'}"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "cannot read --config_file" in result.stderr


@pytest.mark.parametrize("flags, everywhere", [((), False), (("--bind=0.0.0.0",), True)])
def test_binds_loopback_unless_told_otherwise(server_binary, start_server, flags, everywhere):
    process, port = start_server(server_binary, "--config=" + GOOD_CONFIG, *flags)
    try:
        assert any(set(a) == {"0"} for a in listening_addresses(port)) == everywhere
        assert "queue" in reverb_tf.Client(f"localhost:{port}").server_info(timeout=10)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0


def test_sigterm_fails_blocked_writers_clearly_and_checkpoints_on_exit(
    server_binary, start_server, tmp_path
):
    # A queue of 10 that nobody samples: the 11th item waits for room.
    process, port = start_server(
        server_binary,
        f"--config={GOOD_CONFIG}",
        f"--checkpoint_dir={tmp_path}",
        "--checkpoint_on_exit",
    )
    client = reverb_tf.Client(f"localhost:{port}")
    writer = client.trajectory_writer(num_keep_alive_refs=1)
    for step in range(11):
        writer.append({"x": np.float32(step)})
        writer.create_item("queue", 1.0, {"x": writer.history["x"][-1]})
        writer.create_item("replay", 1.0, {"x": writer.history["x"][-1]})
    with pytest.raises(reverb_tf.errors.DeadlineExceededError):
        writer.flush(timeout_ms=500)  # the 11th queue item is blocked
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=15) == 0
    out = process.stdout.read()
    assert "final checkpoint" in out and "stopped in" in out, out
    # The blocked item's stream ends with a status that says why.
    with pytest.raises(
        reverb_tf.errors.CancelledError,
        match="table 'queue' was closed while waiting to insert: the server is stopping",
    ):
        writer.flush(timeout_ms=10_000)
    writer.close()

    # What was acknowledged is in the final checkpoint.
    restarted, port = start_server(
        server_binary, f"--config={GOOD_CONFIG}", f"--checkpoint_dir={tmp_path}"
    )
    try:
        info = reverb_tf.Client(f"localhost:{port}").server_info(timeout=10)
        assert info["queue"].current_size == 10
        assert info["replay"].current_size >= 10
    finally:
        restarted.send_signal(signal.SIGTERM)
        assert restarted.wait(timeout=15) == 0


def test_checkpoint_on_exit_needs_a_checkpoint_dir(server_binary):
    result = subprocess.run(
        [server_binary, f"--config={GOOD_CONFIG}", "--checkpoint_on_exit"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "checkpoint_on_exit need a checkpoint_dir" in result.stderr
