# SPDX-License-Identifier: Apache-2.0
"""Memory goes back to the kernel when the data goes.

The `reverb_tf_server` binary stores 400 items of 1 MiB (random bytes, four
writers at once), twice, with a reset after each round. glibc's malloc
keeps freed blocks for reuse and, once the first large blocks are freed,
serves blocks of that size from its arenas, so without the server's heap
releaser (platform/heap_release.h) the second reset left hundreds of MB
resident with no chunk held. Now the resident size must come back near the
empty server's within a few seconds.
"""

import gc
import threading
import time

import numpy as np

import reverb_tf as reverb
from integration import proc_status_bytes, uniform_table_config

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


def test_resident_memory_comes_back_after_a_reset(start_server, server_binary):
    process, port = start_server(
        server_binary, "--config=" + uniform_table_config(0, max_size=100_000)
    )
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
