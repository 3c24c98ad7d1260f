# SPDX-License-Identifier: Apache-2.0
"""Where a small item's time goes: the writer thread, the rest of the client, the server.

The small-item loop of the replay benchmark (one 3-column step per item,
`num_keep_alive_refs=1`, a flush every 24 items) against a
`reverb_tf_server` in a child process (or, with `--in_process`, a server of
this process), cut into its parts: `append` alone, `append` plus the three
`history[k][-1]` cuts, and the whole loop with `create_item` and flushes.
For each part it prints the wall time per item, the CPU time of the writer
threads (what the GIL serializes), of the whole client process (the
writers' sender and receiver threads, gRPC) and of the server process.

    .venv/bin/python bench/writer_cost_bench.py [--items 50000] [--threads 1,4] [--rounds 2]

On 2 cores the wall time per item is at least the sum of the CPU times
divided by 2; the gap to it is waiting (round trips of the flushes).
"""

import argparse
import os
import statistics
import threading
import time
from typing import Callable, Dict, List

import numpy as np

import reverb_tf as reverb
from server_process import cpu_seconds, start_server, table_config

TABLE = "t"
KEYS = ("observation", "action", "reward")


def _steps(n: int = 1024) -> List[Dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [
        {
            "observation": rng.standard_normal(4).astype(np.float32),
            "action": np.int32(rng.integers(0, 18)),
            "reward": np.float32(rng.standard_normal()),
        }
        for _ in range(n)
    ]


def _writer_loop(client, part: str, n: int, steps, thread_cpu: List[float]) -> None:
    """One writer thread: `n` steps of `part` ("append", "history" or "item")."""
    started = time.thread_time()
    writer = client.trajectory_writer(num_keep_alive_refs=1)
    for i in range(n):
        writer.append(steps[i % len(steps)])
        if part == "append":
            continue
        history = writer.history
        trajectory = {k: history[k][-1] for k in KEYS}
        if part == "history":
            continue
        writer.create_item(TABLE, 1.0, trajectory)
        if i % 24 == 23:
            writer.flush(block_until_num_items=24)
    writer.flush()
    writer.close()
    thread_cpu.append(time.thread_time() - started)


def _measure(
    client, server_pid: int, part: str, items: int, threads: int, reset: Callable[[], None]
) -> Dict[str, float]:
    """One run; microseconds per item."""
    reset()
    steps = _steps()
    thread_cpu: List[float] = []
    workers = [
        threading.Thread(
            target=_writer_loop, args=(client, part, items // threads, steps, thread_cpu)
        )
        for _ in range(threads)
    ]
    client_cpu = cpu_seconds(os.getpid())
    server_cpu = cpu_seconds(server_pid)
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    wall = time.perf_counter() - started
    client_cpu = cpu_seconds(os.getpid()) - client_cpu
    server_cpu = cpu_seconds(server_pid) - server_cpu
    scale = 1e6 / items
    return {
        "wall": wall * scale,
        "writer_threads_cpu": sum(thread_cpu) * scale,
        "client_cpu": client_cpu * scale,
        # In-process, the server's CPU is inside the client's.
        "server_cpu": 0.0 if server_pid == os.getpid() else server_cpu * scale,
        "items_per_s": items / wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=50_000, help="items per run")
    parser.add_argument("--threads", default="1,4", help="writer thread counts")
    parser.add_argument("--rounds", type=int, default=2, help="runs per figure (median)")
    parser.add_argument("--in_process", action="store_true", help="a server of this process")
    args = parser.parse_args()

    if args.in_process:
        server = reverb.Server(
            [
                reverb.Table(
                    TABLE,
                    reverb.selectors.Uniform(),
                    reverb.selectors.Fifo(),
                    args.items + 10,
                    reverb.rate_limiters.MinSize(1),
                )
            ]
        )
        port, server_pid, process = server.port, os.getpid(), None
    else:
        process, port = start_server("port: 0 " + table_config(TABLE, args.items + 10))
        server_pid = process.pid
    client = reverb.Client(f"localhost:{port}")
    try:
        print(
            f"{args.items} items per run, median of {args.rounds}; microseconds per item"
            f" ({'in-process' if args.in_process else 'child-process'} server)"
        )
        print(
            f"{'part':10s} {'threads':>7s} {'wall':>7s} {'writers':>8s} {'client':>7s}"
            f" {'server':>7s} {'items/s':>9s}"
        )
        for threads in [int(t) for t in args.threads.split(",")]:
            for part in ("append", "history", "item"):
                runs = [
                    _measure(
                        client, server_pid, part, args.items, threads, lambda: client.reset(TABLE)
                    )
                    for _ in range(args.rounds)
                ]
                median = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
                print(
                    f"{part:10s} {threads:7d} {median['wall']:7.2f}"
                    f" {median['writer_threads_cpu']:8.2f} {median['client_cpu']:7.2f}"
                    f" {median['server_cpu']:7.2f} {median['items_per_s']:9.0f}"
                )
    finally:
        client = None
        if process is not None:
            process.terminate()
            process.wait()


if __name__ == "__main__":
    main()
