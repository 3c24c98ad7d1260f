# SPDX-License-Identifier: Apache-2.0
"""Resident memory given back when data goes: 1 GiB of items, then a reset.

A server child process, the `reverb_tf_server` binary or (`--host
python`) a Python process hosting `reverb_tf.Server`: its empty RSS, its RSS holding
`--items` items of `--item_mib` MiB (random bytes, written by `--writers`
TrajectoryWriters at once, so several allocator arenas are used), and its
RSS each 0.5 s for `--wait` seconds after `Client.reset()`. The goal
(issue 31): within a few seconds, RSS <= 1.25 x (live chunk bytes + the
empty server's RSS), the empty server measured both fresh and after the
same writers stored a few tiny items (its threads and connections exist).

    .venv/bin/python bench/memory_release_bench.py [--items 1000] [--item_mib 1] \
        [--host binary|python]
"""

import argparse
import gc
import json
import re
import subprocess
import sys
import threading
import time

import numpy as np

import reverb_tf as reverb
from server_process import rss_bytes, start_server, table_config


def _write(address: str, first: int, count: int, item_bytes: int) -> None:
    rng = np.random.default_rng(first)
    client = reverb.Client(address)
    with client.trajectory_writer(num_keep_alive_refs=1) as writer:
        for i in range(count):
            writer.append([rng.integers(0, 256, item_bytes, dtype=np.uint8)])
            writer.create_item("t", 1.0, writer.history[0][-1:])
            if i % 16 == 15:
                writer.flush()
        writer.flush()
    # The connection goes with the client: what the server keeps for an
    # open connection is not what this measures.
    del writer, client
    gc.collect()


# A Python process hosting the server, as dm-reverb's users, Acme and
# TF-Agents run it.
_PYTHON_HOSTED = """
import sys, time
import reverb_tf as reverb
table = reverb.Table("t", reverb.selectors.Uniform(), reverb.selectors.Fifo(),
                     int(sys.argv[1]), reverb.rate_limiters.MinSize(1))
server = reverb.Server([table])
print(f"serving on port {server.port}", flush=True)
time.sleep(3600)
"""


def _start_python_hosted(max_size: int):
    """Starts a Python process hosting the server; returns it and its port."""
    process = subprocess.Popen(
        [sys.executable, "-c", _PYTHON_HOSTED, str(max_size)], stdout=subprocess.PIPE, text=True
    )
    port = int(re.search(r"on port (\d+)", process.stdout.readline()).group(1))
    return process, port


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--item_mib", type=float, default=1.0)
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--wait", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--host", choices=("binary", "python"), default="binary")
    args = parser.parse_args()
    item_bytes = int(args.item_mib * (1 << 20))

    if args.host == "python":
        server, port = _start_python_hosted(10 * args.items)
    else:
        server, port = start_server(
            "port: 0 " + table_config("t", 10 * args.items), "--metrics_port=-1"
        )
    address = f"localhost:{port}"
    try:
        client = reverb.Client(address)
        time.sleep(0.5)
        empty = rss_bytes(server.pid)
        # The same connections and threads with next to no data: the
        # baseline a server that has served writers comes back to.
        threads = [
            threading.Thread(target=_write, args=(address, w * 4, 4, 1024))
            for w in range(args.writers)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        client.reset("t")
        time.sleep(1.0)
        warm = rss_bytes(server.pid)
        rounds = []
        for _ in range(args.rounds):
            per_writer = args.items // args.writers
            threads = [
                threading.Thread(
                    target=_write, args=(address, w * per_writer, per_writer, item_bytes)
                )
                for w in range(args.writers)
            ]
            started = time.perf_counter()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            write_s = time.perf_counter() - started
            full = rss_bytes(server.pid)
            client.reset("t")
            after = []
            for _ in range(int(args.wait / 0.5)):
                time.sleep(0.5)
                after.append(rss_bytes(server.pid))
            rounds.append(
                {
                    "write_s": round(write_s, 2),
                    "full_mib": full >> 20,
                    "after_reset_mib": [a >> 20 for a in after],
                }
            )
        print(
            json.dumps(
                {
                    "host": args.host,
                    "items": args.items,
                    "item_mib": args.item_mib,
                    "writers": args.writers,
                    "empty_mib": empty >> 20,
                    "warm_empty_mib": warm >> 20,
                    "goal_mib": int(1.25 * warm) >> 20,
                    "rounds": rounds,
                }
            )
        )
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    main()
