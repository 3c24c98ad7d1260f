# SPDX-License-Identifier: Apache-2.0
"""Server memory per stored small item, measured on a reverb_tf_server process.

The same shape as the shared harness's server_rss figure: the benchmark's
small step ({observation: f32[4], action: i32, reward: f32}), one item per
step, written by one TrajectoryWriter into a Uniform/Fifo table, and the
server's resident set size read from /proc before and after each segment.

    .venv/bin/python bench/memory_bench.py [--items 200000] [--segments 4]
"""

import argparse
import json

import numpy as np

import reverb_tf as reverb
from server_process import rss_bytes, start_server, table_config
from small_items import write_small_items


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=200_000)
    parser.add_argument("--segments", type=int, default=4)
    args = parser.parse_args()

    server, port = start_server("port: 0 " + table_config("memory", 2 * args.items))
    try:
        client = reverb.Client(f"localhost:{port}")
        empty = rss_bytes(server.pid)
        per_segment = args.items // args.segments
        runs = []
        with client.trajectory_writer(num_keep_alive_refs=1) as writer:
            for _ in range(args.segments):
                before = rss_bytes(server.pid)
                write_small_items(writer, "memory", per_segment, start=len(runs) * per_segment)
                runs.append((rss_bytes(server.pid) - before) / per_segment)
        size = client.server_info()["memory"].current_size
        assert size == per_segment * args.segments, size
        result = {
            "bytes_per_item_runs": [round(r) for r in runs],
            "bytes_per_item_median": round(float(np.median(runs))),
            "server_rss_empty_mb": round(empty / 1e6, 1),
            "server_rss_full_mb": round(rss_bytes(server.pid) / 1e6, 1),
            "items": size,
        }
        print(json.dumps(result, indent=1))
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
