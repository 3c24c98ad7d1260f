# SPDX-License-Identifier: Apache-2.0
"""Writing from a tf.function actor: TFTrajectoryWriter against the alternatives.

Every row writes the same steps and the same overlapping N-step items (one
item of the last N steps at every step from the N-th):

  tf_writer     TFTrajectoryWriter ops in a tf.while_loop inside one
                tf.function (nothing leaves the graph per step).
  tf_insert     TFClient.insert of each item (its N steps stacked) from the
                same kind of loop: dm-reverb's only graph-mode write, a full
                copy of every item.
  py_writer     Client.trajectory_writer from eager Python, numpy steps.

Columns: items per second (median of --repeats), stored bytes per item (the
server's reverb_tf_chunk_bytes over the items), and for the large rows the
MB/s of step data appended. Small steps are the replay benchmark's
({observation: f32[4], action: i32, reward: f32}); large ones an 84x84x4
uint8 observation.

The server runs in this process (Server); by default clients reach it
in-process, with --grpc over loopback gRPC. Usage:

    python bench/tf_writer_bench.py [--steps 20000] [--grpc]
"""

import argparse
import statistics
import time
from typing import Callable, Dict, List

import numpy as np
import tensorflow as tf

import reverb_tf as reverb
from reverb_tf import _native

N = 3


def _table(name: str) -> reverb.Table:
    return reverb.Table(
        name=name,
        sampler=reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(),
        max_size=10_000_000,
        rate_limiter=reverb.rate_limiters.MinSize(1),
    )


def _chunk_bytes(server: reverb.Server) -> float:
    for line in server.metrics_text().splitlines():
        if line.startswith("reverb_tf_chunk_bytes "):
            return float(line.split()[1])
    raise RuntimeError("no reverb_tf_chunk_bytes in the metrics")


def _step_fn(large: bool) -> Callable[[tf.Tensor], Dict[str, tf.Tensor]]:
    if large:
        return lambda i: {"observation": tf.fill([84, 84, 4], tf.cast(i % 251, tf.uint8))}
    return lambda i: {
        "observation": tf.fill([4], tf.cast(i, tf.float32)),
        "action": tf.cast(i, tf.int32),
        "reward": tf.cast(i, tf.float32),
    }


def tf_writer(address: str, table: str, steps: int, large: bool) -> Callable[[], None]:
    make_step = _step_fn(large)
    writer = reverb.TFTrajectoryWriter(address, num_keep_alive_refs=N, max_in_flight_items=1024)

    @tf.function
    def run():
        def body(i):
            writer.append(make_step(i))

            def create():
                history = writer.history
                writer.create_item(table, 1.0, {k: history[k][-N:] for k in history})
                return tf.constant(True)

            tf.cond(i >= N - 1, create, lambda: tf.constant(False))
            return (i + 1,)

        tf.while_loop(lambda i: i < steps, body, (tf.constant(0),))
        writer.end_episode()

    return run


def tf_insert(address: str, table: str, steps: int, large: bool) -> Callable[[], None]:
    make_step = _step_fn(large)
    client = reverb.TFClient(address)
    tables = tf.constant([table])
    priorities = tf.constant([1.0], tf.float64)

    @tf.function
    def run():
        def body(i):
            window = [make_step(i - j) for j in reversed(range(N))]
            item = tf.nest.map_structure(lambda *xs: tf.stack(xs), *window)
            client.insert(tf.nest.flatten(item), tables, priorities)
            return (i + 1,)

        tf.while_loop(lambda i: i < steps, body, (tf.constant(N - 1),))

    return run


def py_writer(address: str, table: str, steps: int, large: bool) -> Callable[[], None]:
    client = reverb.Client(address)
    if large:
        data = [{"observation": np.full([84, 84, 4], i % 251, np.uint8)} for i in range(steps)]
    else:
        data = [
            {
                "observation": np.full([4], i, np.float32),
                "action": np.int32(i),
                "reward": np.float32(i),
            }
            for i in range(steps)
        ]

    def run():
        with client.trajectory_writer(N) as writer:
            for i, step in enumerate(data):
                writer.append(step)
                if i >= N - 1:
                    history = writer.history
                    writer.create_item(table, 1.0, {k: history[k][-N:] for k in history})
            writer.end_episode()

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000, help="small steps per run")
    parser.add_argument("--large_steps", type=int, default=1_500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--grpc", action="store_true", help="clients over loopback gRPC")
    flags = parser.parse_args()
    if flags.grpc:
        _native.core().set_in_process_enabled(False)
    rows: List[str] = []
    for large in (False, True):
        steps = flags.large_steps if large else flags.steps
        items = steps - (N - 1)
        step_bytes = 84 * 84 * 4 if large else 4 * 4 + 4 + 4
        for name, make in (
            ("tf_writer", tf_writer),
            ("tf_insert", tf_insert),
            ("py_writer", py_writer),
        ):
            rates, stored = [], []
            for _ in range(flags.repeats):
                with reverb.Server([_table("t")]) as server:
                    run = make(f"localhost:{server.port}", "t", steps, large)
                    run()  # traces; then a fresh table for the timed run
                    server.localhost_client().reset("t")
                    start = time.perf_counter()
                    run()  # every row returns once its items are stored
                    elapsed = time.perf_counter() - start
                    rates.append(items / elapsed)
                    stored.append(_chunk_bytes(server) / items)
            rate = statistics.median(rates)
            row = (
                f"{'large' if large else 'small'} {name:10s} {rate:12,.0f} items/s  "
                f"{statistics.median(stored):10,.0f} B/item"
            )
            if large:
                row += f"  {rate * step_bytes / 1e6:8,.0f} MB/s of steps"
            rows.append(row)
            print(row, flush=True)
    print("\n".join(["", f"N={N}, transport={'grpc' if flags.grpc else 'in-process'}"] + rows))


if __name__ == "__main__":
    main()
