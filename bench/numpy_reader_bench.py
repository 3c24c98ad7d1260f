# SPDX-License-Identifier: Apache-2.0
"""Batches of 256 read from a prioritized table: NumpyDataset, tf.data, cpprb.

The same table for every reader: N small transitions (obs float32[4], act
int32, rew float32, next_obs float32[4], done float32, as
shared/bench/local_peers.py writes them), prioritized (exponent 0.6), one
item per step. Readers:

  numpy       reverb_tf.NumpyDataset(batch_size=B) (batches stacked in C++)
  numpy_jax   the same through reverb_tf.interop.jax.device_put_iterator
              (JAX on the CPU; skipped when JAX is not importable)
  tfdata      TrajectoryDataset.from_table_signature(...).batch(B), as the
              harness measures it (skipped without TensorFlow)
  cpprb       cpprb.PrioritizedReplayBuffer.sample(B) in this process, the
              local library a user would pick (skipped if not installed)

each with the server in this process (`inproc`) and in a child process
(`child`, the reverb_tf_server binary). Prints one JSON line per reader and
mode: items per second, the median of --repeats timed runs of --batches
batches after one untimed batch.

    python bench/numpy_reader_bench.py [--n 200000] [--batch 256] [--only numpy,tfdata]
"""

import argparse
import json
import os
import statistics
import sys
import time
from typing import Callable, Dict, Iterator, List

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import server_process  # pylint: disable=g-import-not-at-top,wrong-import-position

KEYS = ("obs", "act", "rew", "next_obs", "done")

CONFIG = """
port: 0
tables {{
  table_name: "t"
  sampler {{ prioritized {{ priority_exponent: 0.6 }} }}
  remover {{ fifo: true }}
  max_size: {n}
  rate_limiter {{ samples_per_insert: 1 min_size_to_sample: 1 min_diff: -1e300 max_diff: 1e300 }}
}}
"""


def transitions(n: int) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((n, 4), dtype=np.float32)
    return {
        "obs": obs,
        "act": rng.integers(0, 2, n, dtype=np.int32),
        "rew": rng.standard_normal(n, dtype=np.float32),
        "next_obs": obs,
        "done": np.zeros(n, np.float32),
    }


def fill(reverb, address: str, data: Dict[str, np.ndarray], batch: int) -> None:
    n = len(data["obs"])
    client = reverb.Client(address)
    with client.batched_trajectory_writer(batch, num_keep_alive_refs=1) as writer:
        for i in range(0, n - n % batch, batch):
            writer.append({k: data[k][i : i + batch] for k in KEYS})
            writer.create_items(
                "t", priority=1.0, trajectory={k: writer.history[k][-1] for k in KEYS}
            )


def timed(
    make_iterator: Callable[[], Iterator], batches: int, batch: int, repeats: int
) -> List[float]:
    rates = []
    for _ in range(repeats):
        iterator = make_iterator()
        next(iterator)
        started = time.perf_counter()
        for _ in range(batches):
            next(iterator)
        rates.append(batches * batch / (time.perf_counter() - started))
        close = getattr(iterator, "close", None)
        if close is not None:
            close()
        del iterator
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--batches", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default="numpy,numpy_jax,tfdata,cpprb")
    parser.add_argument("--modes", default="inproc,child")
    args = parser.parse_args()
    which = set(args.only.split(","))
    data = transitions(args.n)
    import reverb_tf as reverb  # pylint: disable=g-import-not-at-top

    signature = {k: reverb.ArraySpec(data[k].shape[1:], data[k].dtype) for k in KEYS}

    def report(reader: str, mode: str, rates: List[float]) -> None:
        print(
            json.dumps(
                {
                    "reader": reader,
                    "mode": mode,
                    "batch": args.batch,
                    "items_per_s": round(statistics.median(rates)),
                    "runs": [round(r) for r in rates],
                }
            ),
            flush=True,
        )

    for mode in args.modes.split(","):
        process = None
        if mode == "inproc":
            table = reverb.Table(
                "t",
                reverb.selectors.Prioritized(0.6),
                reverb.selectors.Fifo(),
                args.n,
                reverb.rate_limiters.MinSize(1),
                signature=signature,
            )
            server = reverb.Server([table])
            address = f"localhost:{server.port}"
        else:
            # The binary's config has no signature: give the reader one by
            # naming the columns (they arrive as a flat list in KEYS order).
            process, port = server_process.start_server(CONFIG.format(n=args.n))
            address = f"localhost:{port}"
        fill(reverb, address, data, args.batch)
        if "numpy" in which:
            dataset = reverb.NumpyDataset(address, "t", args.batch)
            report(
                "numpy", mode, timed(lambda: iter(dataset), args.batches, args.batch, args.repeats)
            )
        if "numpy_jax" in which:
            try:
                from reverb_tf.interop import jax as reverb_jax  # pylint: disable=g-import-not-at-top
                import jax  # noqa: F401 (only whether it imports)
            except ImportError:
                print(json.dumps({"reader": "numpy_jax", "skipped": "no JAX"}))
            else:
                dataset = reverb.NumpyDataset(address, "t", args.batch)
                report(
                    "numpy_jax",
                    mode,
                    timed(
                        lambda: reverb_jax.device_put_iterator(dataset),
                        args.batches,
                        args.batch,
                        args.repeats,
                    ),
                )
        if "tfdata" in which:
            try:
                dataset_class = reverb.TrajectoryDataset
            except ImportError:
                print(json.dumps({"reader": "tfdata", "skipped": "no TensorFlow"}))
            else:
                import tensorflow as tf  # pylint: disable=g-import-not-at-top

                specs = {
                    k: tf.TensorSpec(data[k].shape[1:], tf.as_dtype(data[k].dtype)) for k in KEYS
                }
                dtypes = [specs[k].dtype for k in sorted(KEYS)]
                shapes = [specs[k].shape for k in sorted(KEYS)]
                # The columns in the table's flat order: the writer's
                # (sorted keys, as tree.flatten orders a dict).
                dataset = dataset_class(
                    address,
                    "t",
                    dtypes=dtypes,
                    shapes=shapes,
                    max_in_flight_samples_per_worker=2 * args.batch,
                ).batch(args.batch)
                report(
                    "tfdata",
                    mode,
                    timed(lambda: iter(dataset), args.batches, args.batch, args.repeats),
                )
        if process is not None:
            process.terminate()
            process.wait(30)
        else:
            server.stop()
    if "cpprb" in which:
        try:
            import cpprb  # pylint: disable=g-import-not-at-top
        except ImportError:
            print(json.dumps({"reader": "cpprb", "skipped": "cpprb not installed"}))
            return
        env = {
            "obs": {"shape": 4},
            "act": {"dtype": np.int32},
            "rew": {},
            "next_obs": {"shape": 4},
            "done": {},
        }
        buffer = cpprb.PrioritizedReplayBuffer(args.n, env, alpha=0.6)
        for i in range(0, args.n - args.n % args.batch, args.batch):
            buffer.add(**{k: data[k][i : i + args.batch] for k in KEYS})

        def batches():
            while True:
                yield buffer.sample(args.batch, beta=0.4)

        report("cpprb", "local", timed(batches, args.batches, args.batch, args.repeats))


if __name__ == "__main__":
    main()
