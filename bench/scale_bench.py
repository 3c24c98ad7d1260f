# SPDX-License-Identifier: Apache-2.0
"""Does per-call cost stay flat as a table grows? Server RSS per item, too.

One reverb_tf_server process holds a Prioritized(0.6)/Fifo table (or, with
`--sampler uniform`, a Uniform/Fifo one); one
writer fills it with the small-item workload (bench/small_items.py) in
stages (10k, 100k, 1M, 10M items by default). At each size the benchmark
measures, from this process:

* inserts/s of the stage's fill (one writer),
* Client.sample items/s (num_samples per call, emit_timesteps=False),
* Client.mutate_priorities keys/s (256 random present keys per call),
* the server's RSS and RSS per item (above the empty server).

It prints one JSON object with a row per size and, for each figure, the
ratio of the largest size to the smallest (1.0 = flat).

    .venv/bin/python bench/scale_bench.py [--sizes 10000,100000,1000000,10000000]
"""

import argparse
import json
import time

import numpy as np

import reverb_tf as reverb
from server_process import rss_bytes, start_server, table_config
from small_items import write_small_items


def measure(client, rng, samples: int, updates: int, repeats: int):
    """(sample items/s, mutate keys/s), the median of `repeats` runs each."""
    keys = np.array(
        [int(s.info.key) for s in client.sample("prio", num_samples=4096, emit_timesteps=False)],
        np.uint64,
    )
    batches = [
        dict(zip(rng.choice(keys, 256).tolist(), rng.random(256).tolist())) for _ in range(64)
    ]
    sample_runs, mutate_runs = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in client.sample("prio", num_samples=samples, emit_timesteps=False):
            pass
        sample_runs.append(samples / (time.perf_counter() - start))
        start = time.perf_counter()
        for i in range(updates):
            client.mutate_priorities("prio", updates=batches[i % len(batches)])
        mutate_runs.append(updates * 256 / (time.perf_counter() - start))
    return float(np.median(sample_runs)), float(np.median(mutate_runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="10000,100000,1000000,10000000")
    parser.add_argument("--samples", type=int, default=20000, help="per sampling run")
    parser.add_argument("--updates", type=int, default=400, help="256-key calls per run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--sampler",
        default="prioritized",
        choices=["prioritized", "uniform"],
        help="the table's sampler (prioritized: priority_exponent 0.6)",
    )
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))

    sampler = {
        "prioritized": "prioritized { priority_exponent: 0.6 }",
        "uniform": "uniform: true",
    }[args.sampler]
    server, port = start_server("port: 0 " + table_config("prio", sizes[-1], sampler))
    rng = np.random.default_rng(0)
    rows = []
    try:
        client = reverb.Client(f"localhost:{port}")
        empty = rss_bytes(server.pid)
        filled = 0
        with client.trajectory_writer(num_keep_alive_refs=1) as writer:
            for size in sizes:
                start = time.perf_counter()
                write_small_items(writer, "prio", size - filled, start=filled)
                inserts = (size - filled) / (time.perf_counter() - start)
                filled = size
                assert client.server_info()["prio"].current_size == size
                rss = rss_bytes(server.pid)
                sample, mutate = measure(client, rng, args.samples, args.updates, args.repeats)
                rows.append(
                    {
                        "items": size,
                        "inserts_per_s": round(inserts),
                        "sample_items_per_s": round(sample),
                        "mutate_keys_per_s": round(mutate),
                        "server_rss_mb": round(rss / 1e6, 1),
                        "rss_bytes_per_item": round((rss - empty) / size),
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
        first, last = rows[0], rows[-1]
        result = {
            "rows": rows,
            "server_rss_empty_mb": round(empty / 1e6, 1),
            f"ratio_{last['items']}_to_{first['items']}": {
                k: round(last[k] / first[k], 3)
                for k in ("inserts_per_s", "sample_items_per_s", "mutate_keys_per_s")
            },
        }
        print(json.dumps(result, indent=1))
    finally:
        server.terminate()
        server.wait(timeout=120)


if __name__ == "__main__":
    main()
