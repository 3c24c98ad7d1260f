# SPDX-License-Identifier: Apache-2.0
"""Insert throughput of BatchedTrajectoryWriter against per-environment TrajectoryWriters.

The workload is the replay benchmark's small item (`{observation: f32[4],
action: i32, reward: f32}`, one single-step item per environment step) from
actor threads that each step B environments. A plain actor needs B
TrajectoryWriter calls per step per call type; a batched actor makes one
`append` and one `create_items` per step for all B environments.

Rows:
  plain       B TrajectoryWriters per thread (B = 1: the harness's workload),
              flushing every 24 items as the harness does.
  batched     one BatchedTrajectoryWriter of B environments per thread,
              bounded by max_in_flight_items instead of flushes.

The server is the `reverb_tf_server` binary in a child process. Usage:

    python bench/batched_writer_bench.py [--items 200000] [--envs 1,8,32,128]
"""

import argparse
import os
import sys
import threading
import time
from typing import Callable, List

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_process  # pylint: disable=g-import-not-at-top,wrong-import-position
import reverb_tf  # pylint: disable=g-import-not-at-top,wrong-import-position

TABLE = "insert"


def plain_actor(client: reverb_tf.Client, envs: int, steps: int) -> None:
    """`envs` TrajectoryWriters, one item per environment step."""
    writers = [client.trajectory_writer(1) for _ in range(envs)]
    created = 0
    for t in range(steps):
        for writer in writers:
            writer.append(
                {
                    "observation": np.full(4, t, np.float32),
                    "action": np.int32(t),
                    "reward": np.float32(1),
                }
            )
            history = writer.history
            writer.create_item(
                TABLE,
                1.0,
                {
                    "observation": history["observation"][-1],
                    "action": history["action"][-1],
                    "reward": history["reward"][-1],
                },
            )
            created += 1
            if created % 24 == 0:
                writer.flush(block_until_num_items=24)
    for writer in writers:
        writer.flush()
        writer.close()


def batched_actor(client: reverb_tf.Client, envs: int, steps: int) -> None:
    """One BatchedTrajectoryWriter of `envs` environments."""
    observation = np.zeros((envs, 4), np.float32)
    action = np.zeros(envs, np.int32)
    reward = np.ones(envs, np.float32)
    with client.batched_trajectory_writer(
        envs, 1, max_in_flight_items=max(1024, 4 * envs)
    ) as writer:
        for t in range(steps):
            observation.fill(t)
            action.fill(t)
            writer.append({"observation": observation, "action": action, "reward": reward})
            history = writer.history
            writer.create_items(
                TABLE,
                1.0,
                {
                    "observation": history["observation"][-1],
                    "action": history["action"][-1],
                    "reward": history["reward"][-1],
                },
            )


def run(
    port: int,
    actor: Callable[[reverb_tf.Client, int, int], None],
    threads: int,
    envs: int,
    items: int,
) -> float:
    """Items per second of `threads` actors writing `items` items in all."""
    client = reverb_tf.Client(f"localhost:{port}")
    client.reset(TABLE)
    steps = max(1, items // (threads * envs))
    workers = [
        threading.Thread(target=actor, args=(reverb_tf.Client(f"localhost:{port}"), envs, steps))
        for _ in range(threads)
    ]
    start = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - start
    written = steps * threads * envs
    stored = client.server_info()[TABLE].current_size
    if stored != written:
        raise RuntimeError(f"table holds {stored} items, {written} were written")
    return written / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=200_000)
    parser.add_argument("--envs", default="1,8,32,128")
    parser.add_argument("--threads", default="1,4")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    envs_list = [int(e) for e in args.envs.split(",")]
    threads_list = [int(t) for t in args.threads.split(",")]
    process, port = server_process.start_server(
        "port: 0 " + server_process.table_config(TABLE, 2 * args.items)
    )
    try:
        rows: List[str] = []
        for threads in threads_list:
            for envs in envs_list:
                for name, actor in (("plain", plain_actor), ("batched", batched_actor)):
                    if name == "plain" and envs > 8:
                        continue  # B writers per thread: B = 8 already shows the trend
                    rates = [
                        run(port, actor, threads, envs, args.items) for _ in range(args.rounds)
                    ]
                    rows.append(
                        f"| {name} | {threads} | {envs} | "
                        f"{np.median(rates) / 1e3:.1f}k | "
                        f"{min(rates) / 1e3:.1f}k–{max(rates) / 1e3:.1f}k |"
                    )
                    print(rows[-1], flush=True)
        print("\n| writer | threads | envs per thread | items/s (median) | range |")
        print("| --- | ---: | ---: | ---: | --- |")
        print("\n".join(rows))
    finally:
        process.terminate()
        process.wait()


if __name__ == "__main__":
    main()
