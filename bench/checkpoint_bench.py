# SPDX-License-Identifier: Apache-2.0
"""Checkpoint cost and the pause a concurrent sampler sees.

Fills a server (in a child process, like the shared harness) with small
items, then checkpoints it while a sampler thread in this process samples one
item per call in a loop, and reports:

* checkpoint time, size on disk and restore time;
* the server's own figure for the longest table lock (the snapshot);
* the sampler's longest call overlapping the checkpoint, next to its longest
  call in an equally long window without one (the noise floor).

    .venv/bin/python bench/checkpoint_bench.py --items 200000
"""

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time

import reverb_tf as reverb
from small_items import write_small_items

_CHILD = r"""
import json, sys
import reverb_tf as reverb
root = sys.argv[1]
def tables():
    return [reverb.Table('t', reverb.selectors.Uniform(), reverb.selectors.Fifo(), 10**7,
                         reverb.rate_limiters.MinSize(1))]
server = reverb.Server(tables(), checkpointer=reverb.checkpointers.DefaultCheckpointer(root))
print(json.dumps({'port': server.port}), flush=True)
for line in sys.stdin:
    if line.strip() == 'checkpoint':
        print(json.dumps(server._server.checkpoint()), flush=True)
    elif line.strip() == 'restore':
        server.stop()
        import time
        start = time.perf_counter()
        checkpointer = reverb.checkpointers.DefaultCheckpointer(root)
        server = reverb.Server(tables(), checkpointer=checkpointer)
        print(json.dumps({'port': server.port, 'restore_s': time.perf_counter() - start}),
              flush=True)
"""


def _fill(client, n):
    with client.trajectory_writer(num_keep_alive_refs=1) as writer:
        write_small_items(writer, "t", n)


class _Sampler(threading.Thread):
    """Samples one item per call; keeps (start, duration) of every call."""

    def __init__(self, address):
        super().__init__(daemon=True)
        self._client = reverb.Client(address)
        self.calls = []
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            start = time.perf_counter()
            next(self._client.sample("t", 1, emit_timesteps=False))
            self.calls.append((start, time.perf_counter() - start))

    def longest(self, begin, end):
        return max((d for s, d in self.calls if s + d >= begin and s <= end), default=0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    root = tempfile.mkdtemp(prefix="reverb_tf_ckpt_bench_")
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, root],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        bufsize=1,
    )
    port = json.loads(child.stdout.readline())["port"]
    address = f"localhost:{port}"
    client = reverb.Client(address)
    _fill(client, args.items)

    sampler = _Sampler(address)
    sampler.start()
    time.sleep(1.0)
    results = []
    for _ in range(args.repeats):
        quiet_begin = time.perf_counter()
        time.sleep(0.5)
        start = time.perf_counter()
        child.stdin.write("checkpoint\n")
        stats = json.loads(child.stdout.readline())
        end = time.perf_counter()
        # An equally long window without a checkpoint, for the noise floor.
        quiet = sampler.longest(quiet_begin, quiet_begin + min(0.5, end - start))
        time.sleep(0.3)
        results.append(
            {
                "checkpoint_s": end - start,
                "server_checkpoint_s": stats["total_s"],
                "max_table_pause_ms": stats["max_table_pause_s"] * 1e3,
                "sampler_longest_call_during_ms": sampler.longest(start, end) * 1e3,
                "sampler_longest_call_quiet_ms": quiet * 1e3,
                "size_mb": stats["bytes"] / 1e6,
                "items": stats["num_items"],
                "chunks": stats["num_chunks"],
            }
        )
    sampler.stop.set()
    sampler.join()
    child.stdin.write("restore\n")
    restore = json.loads(child.stdout.readline())
    child.stdin.close()
    child.wait(timeout=60)

    def median(key):
        return sorted(r[key] for r in results)[len(results) // 2]

    summary = {key: median(key) for key in results[0]}
    summary["restore_s"] = restore["restore_s"]
    summary["samples_during_run"] = len(sampler.calls)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
