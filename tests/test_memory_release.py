# SPDX-License-Identifier: Apache-2.0
"""Memory goes back to the kernel when the data goes.

The `reverb_tf_server` binary stores 400 items of 1 MiB (random bytes, four
writers at once), twice, with a reset after each round. glibc's malloc
keeps freed blocks for reuse and, once the first large blocks are freed,
serves blocks of that size from its arenas, so without the server's heap
releaser (platform/heap_release.h) the second reset left hundreds of MB
resident with no chunk held. Now the resident size must come back near the
empty server's within a few seconds, for the binary and for a server hosted
by a Python process (`reverb_tf.Server`) alike.
"""

import gc
import os
import sys
import threading
import time
from unittest import mock

import numpy as np
import pytest

import reverb_tf as reverb
from integration import (
    metric_value,
    port_outside_ephemeral_range,
    proc_status_bytes,
    scrape_metrics,
    uniform_table_config,
    wait_until,
)

_ITEM = 1 << 20
_ITEMS = 400
_WRITERS = 4


def _write(address, first, count, item_bytes):
    rng = np.random.default_rng(first)
    client = reverb.Client(address)
    with client.trajectory_writer(num_keep_alive_refs=1) as writer:
        for i in range(count):
            writer.append([rng.integers(0, 256, item_bytes, dtype=np.uint8)])
            writer.create_item("t", 1.0, writer.history[0][-1:])
            if i % 16 == 15:
                writer.flush()
        writer.flush()
    del writer, client
    gc.collect()  # the connection closes with its client


def _round(address, count, item_bytes):
    threads = [
        threading.Thread(target=_write, args=(address, w * count, count, item_bytes))
        for w in range(_WRITERS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


# A server hosted by Python, as dm-reverb's users, Acme and TF-Agents run
# it: `reverb_tf.Server` in a process of its own.
_PYTHON_HOSTED = """
import sys, time
import reverb_tf as reverb
table = reverb.Table("t", reverb.selectors.Uniform(), reverb.selectors.Fifo(), 100_000,
                     reverb.rate_limiters.MinSize(1))
server = reverb.Server([table])
print(f"python-hosted server on port {server.port}", flush=True)
time.sleep(3600)
"""


@pytest.mark.parametrize("host", ["binary", "python"])
def test_resident_memory_comes_back_after_a_reset(host, start_server, server_binary, package_path):
    if host == "binary":
        command = [server_binary, "--config=" + uniform_table_config(0, max_size=100_000)]
    else:
        command = [sys.executable, "-c", _PYTHON_HOSTED]
    with mock.patch.dict(os.environ, {"PYTHONPATH": package_path}):
        process, port = start_server(*command)
    address = f"localhost:{port}"
    client = reverb.Client(address)
    try:
        # The baseline of a server whose threads and connections exist.
        _round(address, 4, 1024)
        client.reset("t")
        time.sleep(1)
        baseline = proc_status_bytes(process.pid, "VmRSS")
        goal = 1.25 * baseline + (8 << 20)
        # What the test insists on: without the releaser the second round
        # kept about 300 MiB. Connections of writers that have not closed
        # yet can hold a few tens of MiB for a while.
        bound = 1.25 * baseline + (64 << 20)
        for round_index in range(2):
            _round(address, _ITEMS // _WRITERS, _ITEM)
            full = proc_status_bytes(process.pid, "VmRSS")
            assert full > _ITEMS * _ITEM, full
            client.reset("t")
            reset = time.monotonic()
            while proc_status_bytes(process.pid, "VmRSS") > goal and time.monotonic() - reset < 10:
                time.sleep(0.1)
            after = proc_status_bytes(process.pid, "VmRSS")
            print(
                f"round {round_index}: baseline {baseline >> 20} MiB, holding "
                f"{full >> 20} MiB, {after >> 20} MiB "
                f"{time.monotonic() - reset:.1f} s after the reset"
            )
            assert after <= bound, (
                f"round {round_index}: {after >> 20} MiB resident after "
                f"the reset (baseline {baseline >> 20} MiB, held "
                f"{full >> 20} MiB)"
            )
    finally:
        process.kill()
        process.communicate()


def _recycled(metrics_port, name="reverb_tf_recycled_chunk_bytes"):
    samples, _ = scrape_metrics(metrics_port)
    return metric_value(samples, name)


def test_a_refill_lands_in_the_buffers_of_dead_chunks(start_server, server_binary):
    """Chunk bytes of a refill go into the buffers of the chunks a reset freed.

    A server that parsed each chunk into a new allocation faulted in fresh
    pages whenever the freed buffers sat in another thread's malloc arena or
    had been trimmed; it keeps them now, and hands them back unread: every
    sampled item holds the bytes written in its own round.
    """
    items, item_bytes = 64, 64 << 10
    metrics_port = port_outside_ephemeral_range()
    process, port = start_server(
        server_binary,
        "--config=" + uniform_table_config(0, max_size=100_000),
        f"--metrics_port={metrics_port}",
    )
    address = f"localhost:{port}"
    client = reverb.Client(address)
    try:
        for round_index in range(2):
            rng = np.random.default_rng(round_index)
            values = [rng.integers(0, 256, item_bytes, dtype=np.uint8) for _ in range(items)]
            before = _recycled(metrics_port, "reverb_tf_recycled_chunk_bytes_taken_total")
            with client.trajectory_writer(num_keep_alive_refs=1) as writer:
                for value in values:
                    writer.append([value])
                    writer.create_item("t", 1.0, writer.history[0][-1:])
                writer.flush()
            if round_index == 1:
                # The second round took the first round's buffers.
                taken = _recycled(metrics_port, "reverb_tf_recycled_chunk_bytes_taken_total")
                assert taken - before >= items * item_bytes
            else:
                assert _recycled(metrics_port, "reverb_tf_recycled_chunk_bytes_taken_total") == 0
            sampled = {
                bytes(np.asarray(sample.data[0]).tobytes())
                for sample in client.sample("t", num_samples=4 * items, emit_timesteps=False)
            }
            assert len(sampled) > 1
            assert sampled <= {value.tobytes() for value in values}
            client.reset("t")
            # The reset gave every buffer back (the bound is 256 MiB).
            wait_until(
                lambda: _recycled(metrics_port) >= items * item_bytes,
                "the reset's buffers to be kept",
            )
        # Nobody takes them: they are freed within two periods of 1 s.
        deadline = time.monotonic() + 10
        while _recycled(metrics_port) > 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _recycled(metrics_port) == 0
    finally:
        process.kill()
        process.communicate()
