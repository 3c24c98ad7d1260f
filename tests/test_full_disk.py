# SPDX-License-Identifier: Apache-2.0
"""A full disk under the write-ahead log: reads go on, writes wait for room, nothing is lost.

The `reverb_tf_server` binary keeps its checkpoints and its log on a small
tmpfs (mounted by the test, which runs as root), nearly filled by a filler
file. Writers insert until the log has no room; the server is killed with
SIGKILL on the full disk and restarted there: it must start, serve every
acknowledged item for sampling with health SERVING, and refuse inserts,
priority updates, deletes and resets with RESOURCE_EXHAUSTED until a
checkpoint can be written. Once the filler is removed, the retried
checkpoint succeeds, writes are accepted again, and after another SIGKILL
every acknowledged item, before and after the full disk, comes back.
"""

import os
import subprocess
import time

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

import reverb_tf as reverb
from integration import port_outside_ephemeral_range, scrape_metrics

_CONFIG = (
    'port: {port} tables {{ table_name: "t" sampler {{ heap {{ min_heap: false }} }} '
    "remover {{ fifo: true }} max_size: 1000000 rate_limiter {{ samples_per_insert: 1 "
    "min_size_to_sample: 1 min_diff: -1e300 max_diff: 1e300 }} }}"
)
_PHRASE = "the write-ahead log cannot be written"
_ROOM_LEFT = 1536 << 10  # what the filler leaves for the log
_PAYLOAD = 1024  # bytes of random (incompressible) data per item


def _start(server_binary, port, metrics_port, disk):
    process = subprocess.Popen(
        [
            server_binary,
            "--config=" + _CONFIG.format(port=port),
            f"--checkpoint_dir={disk / 'checkpoints'}",
            "--checkpoint_interval=1h",
            f"--wal_dir={disk / 'wal'}",
            "--wal_sync=every_write",
            "--wal_retry_interval=200ms",
            f"--metrics_port={metrics_port}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = process.stdout.readline()
    if "on port" not in line:
        process.kill()
        pytest.fail(f"server did not start: {line!r} {process.communicate()[1]}")
    return process


def _kill(process):
    process.kill()
    return process.communicate()[1]


def _insert(writer, values):
    rng = np.random.default_rng(values[0])
    for v in values:
        writer.append([np.int64(v), rng.integers(0, 256, _PAYLOAD, dtype=np.uint8)])
        writer.create_item("t", float(v), [writer.history[0][-1:], writer.history[1][-1:]])
    writer.flush()  # returns once the server acknowledged them all


def _fill_log(address, first):
    """Inserts batches of items until the log is full; the values acknowledged."""
    acked = []
    writer = reverb.Client(address).trajectory_writer(num_keep_alive_refs=1)
    value = first
    with pytest.raises(reverb.errors.ResourceExhaustedError, match=_PHRASE):
        for _ in range(100000):
            batch = list(range(value, value + 50))
            value += 50
            _insert(writer, batch)
            acked.extend(batch)
    return acked


def _health(port):
    with grpc.insecure_channel(f"localhost:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=10).status


def _metric(metrics_port, name):
    samples, _ = scrape_metrics(metrics_port)
    return samples[(name, ())]


def _writes_refused(address):
    client = reverb.Client(address)
    with pytest.raises(reverb.errors.ResourceExhaustedError, match=_PHRASE):
        _insert(client.trajectory_writer(num_keep_alive_refs=1), [10**9])
    sample = next(client.sample("t", emit_timesteps=False, rate_limiter_timeout_ms=2000))
    key = int(sample.info.key)
    with pytest.raises(reverb.errors.ResourceExhaustedError, match=_PHRASE):
        client.mutate_priorities("t", updates={key: 0.5})
    with pytest.raises(reverb.errors.ResourceExhaustedError, match=_PHRASE):
        client.mutate_priorities("t", deletes=[key])
    with pytest.raises(reverb.errors.ResourceExhaustedError, match=_PHRASE):
        client.reset("t")


def _drain(address):
    """Every item's value, emptying the table top down."""
    client = reverb.Client(address)
    size = client.server_info(timeout=10)["t"].current_size
    values = set()
    for _ in range(size):
        sample = next(client.sample("t", emit_timesteps=False, rate_limiter_timeout_ms=2000))
        value = int(sample.data[0][0])
        assert value not in values, f"value {value} read twice"
        values.add(value)
        client.mutate_priorities("t", deletes=[int(sample.info.key)])
    return values


def test_a_full_disk_keeps_reads_up_and_writes_resume_once_there_is_room(server_binary, small_disk):
    port, metrics_port = port_outside_ephemeral_range(), port_outside_ephemeral_range()
    address = f"localhost:{port}"
    filler = small_disk / "filler"
    with open(filler, "wb") as out:
        out.write(
            b"\0" * (os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize - _ROOM_LEFT)
        )

    process = _start(server_binary, port, metrics_port, small_disk)
    try:
        acked = _fill_log(address, first=1)
        assert len(acked) > 200, "the log filled before the test could write"
        # Sampling goes on while writes are refused.
        client = reverb.Client(address)
        assert next(client.sample("t", emit_timesteps=False)).info.priority > 0
        assert _metric(metrics_port, "reverb_tf_wal_writable") == 0
    finally:
        _kill(process)

    # Restarted on the full disk: the replayed items are served for reading.
    process = _start(server_binary, port, metrics_port, small_disk)
    try:
        assert _health(port) == health_pb2.HealthCheckResponse.SERVING
        info = reverb.Client(address).server_info(timeout=10)["t"]
        assert info.current_size >= len(acked)
        _writes_refused(address)
        assert _metric(metrics_port, "reverb_tf_wal_writable") == 0
        assert _metric(metrics_port, "reverb_tf_wal_recoveries_total") == 0

        # Room again: the checkpoint retried every 200 ms lets writes in.
        filler.unlink()
        freed = time.monotonic()
        writer = reverb.Client(address).trajectory_writer(num_keep_alive_refs=1)
        after = list(range(10**8, 10**8 + 100))
        while True:
            try:
                _insert(writer, after)
                break
            except reverb.errors.ResourceExhaustedError as error:
                assert _PHRASE in str(error)
                assert time.monotonic() - freed < 30, (
                    "writes still refused 30 s after room was freed"
                )
                time.sleep(0.05)
                writer = reverb.Client(address).trajectory_writer(num_keep_alive_refs=1)
        resumed_after = time.monotonic() - freed
        assert _metric(metrics_port, "reverb_tf_wal_writable") == 1
        assert _metric(metrics_port, "reverb_tf_wal_recoveries_total") == 1
    finally:
        stderr = _kill(process)
    assert "writes are refused until a checkpoint succeeds" in stderr, stderr
    assert "writes are accepted" in stderr, stderr

    # What was acknowledged before the disk filled and after it had room
    # survives another SIGKILL.
    process = _start(server_binary, port, metrics_port, small_disk)
    try:
        values = _drain(address)
    finally:
        _kill(process)
    missing = sorted(set(acked + after) - values)
    assert not missing, f"{len(missing)} acknowledged items lost, e.g. {missing[:5]}"
    print(
        f"{len(acked)} items acknowledged before the disk filled, all recovered; writes "
        f"accepted {resumed_after:.2f} s after room was freed"
    )
