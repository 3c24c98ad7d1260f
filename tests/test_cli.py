# SPDX-License-Identifier: Apache-2.0
"""The `reverb_tf` command, run as a program against real servers and checkpoints."""

import contextlib
import io
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys

import numpy as np
import pytest

import reverb_tf
from reverb_tf import cli
from integration import table, uniform_table_config, write_frames

ROOT = pathlib.Path(__file__).resolve().parents[1]


def run(*args: str) -> subprocess.CompletedProcess:
    """Runs the command in this process (as its console script would), capturing output."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(args))
    return subprocess.CompletedProcess(["reverb_tf", *args], code, out.getvalue(), err.getvalue())


def test_the_module_runs_as_a_program():
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run(
        [sys.executable, "-m", "reverb_tf", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 0 and "inspect" in result.stdout
    result = subprocess.run(
        [sys.executable, "-m", "reverb_tf", "info"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 2 and "address" in result.stderr


@pytest.fixture
def server(tmp_path):
    tables = [
        reverb_tf.Table(
            "replay",
            sampler=reverb_tf.selectors.Prioritized(0.6),
            remover=reverb_tf.selectors.Fifo(),
            max_size=1000,
            rate_limiter=reverb_tf.rate_limiters.MinSize(1),
        ),
        reverb_tf.Table.queue("queue", 10),
    ]
    checkpointer = reverb_tf.checkpointers.DefaultCheckpointer(str(tmp_path / "checkpoints"))
    with reverb_tf.Server(tables, checkpointer=checkpointer) as served:
        client = reverb_tf.Client(f"localhost:{served.port}")
        for i in range(7):
            client.insert(np.full(3, i, np.float32), {"replay": 1.0})
        yield served, client


def test_help_and_usage_errors():
    result = run("--help")
    assert result.returncode == 0
    for command in ["serve", "info", "checkpoint", "inspect", "bench"]:
        assert command in result.stdout
    assert "Exit status" in result.stdout
    assert run().returncode == 2
    assert run("frobnicate").returncode == 2
    assert run("info").returncode == 2  # no address


def test_info_shows_every_table(server):
    served, _ = server
    result = run("info", f"localhost:{served.port}")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:3] == ["table", "size", "max_size"]
    replay = next(line for line in lines if line.startswith("replay"))
    assert re.search(r"replay\s+7\s+1,000\s+Prioritized\(0.6\)\s+Fifo", replay), replay
    assert any(line.startswith("queue") and " Fifo " in line for line in lines)

    as_json = json.loads(run("info", f"localhost:{served.port}", "--json").stdout)
    by_name = {t["name"]: t for t in as_json["tables"]}
    assert by_name["replay"]["current_size"] == 7
    assert by_name["replay"]["rate_limiter"]["inserts"] == 7
    assert by_name["queue"]["max_times_sampled"] == 1
    assert as_json["spill"] == {}  # no spill directory
    assert not any(line.startswith("spill") for line in lines)


def test_info_shows_the_spill_directory(tmp_path):
    spill_dir = tmp_path / "spill"
    with reverb_tf.Server(
        [table("frames", max_size=1000)], memory_limit=2 << 20, spill_dir=str(spill_dir)
    ) as served:
        client = reverb_tf.Client(f"localhost:{served.port}")
        write_frames(client, "frames", 200)  # 5.6 MB under a 2 MiB budget
        list(client.sample("frames", num_samples=50, emit_timesteps=False))
        address = f"localhost:{served.port}"
        (stats,) = client.spill_stats().values()
        assert stats["dir"] == str(spill_dir)
        assert stats["disk_bytes"] > 3 << 20, stats
        assert stats["disk_reads"] + stats["ram_reads"] >= 50, stats

        result = run("info", address)
        assert result.returncode == 0, result.stderr
        line = next(line for line in result.stdout.splitlines() if line.startswith("spill"))
        assert re.search(rf"{re.escape(str(spill_dir))}: [\d.]+ MiB on disk", line), line
        assert re.search(r"reads \d+% from RAM, \d+ us per disk read$", line), line
        as_json = json.loads(run("info", address, "--json").stdout)
        (shown,) = as_json["spill"].values()
        assert shown["dir"] == str(spill_dir) and shown["disk_bytes"] > 3 << 20, shown


def test_an_unreachable_server_is_a_clear_failure():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens there
    result = run("info", f"localhost:{port}", "--timeout", "1")
    assert result.returncode == 1
    assert f"cannot reach a reverb_tf server at localhost:{port}" in result.stderr


def test_checkpoint_then_inspect_verifies_it(server):
    served, _ = server
    result = run("checkpoint", f"localhost:{served.port}")
    assert result.returncode == 0, result.stderr
    path = result.stdout.strip()
    assert pathlib.Path(path).is_dir()

    inspected = run("inspect", path, "--json")
    assert inspected.returncode == 0, inspected.stderr
    summary = json.loads(inspected.stdout)
    assert summary["num_items"] == 7 and summary["checksums"] == "verified"
    assert {t["name"]: t["current_size"] for t in summary["tables"]} == {"replay": 7, "queue": 0}
    readable = run("inspect", path)
    assert "7 items; every record's checksum verified" in readable.stdout

    # One flipped byte in the middle of the data file: a clear failure.
    data = next(p for p in pathlib.Path(path).iterdir() if p.is_file())
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(bytes(raw))
    damaged = run("inspect", path)
    assert damaged.returncode == 1
    assert "DataLossError" in damaged.stderr and str(data) in damaged.stderr


def test_inspect_of_something_else_says_so(tmp_path):
    result = run("inspect", str(tmp_path))
    assert result.returncode == 1
    assert "is not a reverb_tf checkpoint" in result.stderr


def test_bench_inserts_and_samples(server):
    served, client = server
    result = run(
        "bench", f"localhost:{served.port}", "--table", "replay", "--seconds", "1", "--json"
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["inserted"] >= 100 and report["insert_items_per_s"] > 0
    assert report["sampled"] > 0
    assert client.server_info()["replay"].current_size == 1000  # filled to max_size
    missing = run("bench", f"localhost:{served.port}", "--table", "nope", "--seconds", "1")
    assert missing.returncode == 1 and "no table 'nope'" in missing.stderr


def test_serve_runs_the_binary():
    config = uniform_table_config()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    process = subprocess.Popen(
        [sys.executable, "-m", "reverb_tf", "serve", f"--config={config}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        port = int(re.search(r"on port (\d+)", process.stdout.readline()).group(1))
        assert "t" in reverb_tf.Client(f"localhost:{port}").server_info(timeout=10)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
