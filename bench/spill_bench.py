# SPDX-License-Identifier: Apache-2.0
"""A table larger than memory: 84x84x4 uint8 frames under a budget, spilled to disk.

Writes `--gb` of frames (every step a different 28,224-byte frame) as
3-step overlapping items, one per step, into a Uniform/Fifo table of a
server in this process, then samples it uniformly. With `--budget_mb` and
`--spill_dir` the server keeps chunk bytes beyond the budget in the spill
directory (docs/disk_tier.md); with `--budget_mb 0` it holds everything in
RAM (the comparison: pick a size that fits). Prints one JSON line:

* inserts: items/s and MB/s of frames through one `TrajectoryWriter`;
* peak RSS of this process while inserting (before TensorFlow is imported);
* sampling, items/s: `NumpyDataset(batch_size=64)` and (unless
  `--no_tf`) `TrajectoryDataset(...).batch(64)`,
  with the page cache warm and, with `--cold` (root), after dropping it;
* the spill figures (`Server.spill_stats()`) and, with `--checkpoint`, the
  time and size of a checkpoint (`Client.checkpoint()`: spilled chunks are
  linked, not rewritten) and of a restart from it with the same spill
  directory, to the first `server_info` (the server in this process
  again).

    python bench/spill_bench.py --gb 20 --budget_mb 2048 --spill_dir /var/tmp/spill
    python bench/spill_bench.py --gb 6 --budget_mb 0          # the same, in RAM
    python bench/spill_bench.py --gb 6 --budget_mb 600 --pread  # spill_mmap=False
"""

import argparse
import gc
import json
import os
import resource
import shutil
import tempfile
import threading
import time

import numpy as np

import reverb_tf as reverb

SHAPE = (84, 84, 4)
FRAME_BYTES = int(np.prod(SHAPE))


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _PeakRss(threading.Thread):
    """Samples this process's RSS every 50 ms; `peak` is the highest seen."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak = 0
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            self.peak = max(self.peak, _rss_bytes())
            time.sleep(0.05)


def _insert(client, steps: int) -> float:
    """Writes `steps` frames and an item per step from the third; returns seconds."""
    pool = np.random.default_rng(0).integers(0, 256, (256, *SHAPE), dtype=np.uint8)
    start = time.perf_counter()
    with client.trajectory_writer(num_keep_alive_refs=3) as writer:
        for step in range(steps):
            frame = pool[step % len(pool)].copy()
            frame.reshape(-1)[:8] = np.frombuffer(np.int64(step).tobytes(), np.uint8)
            writer.append({"frame": frame})
            if step >= 2:
                writer.create_item("t", 1.0, {"frame": writer.history["frame"][-3:]})
            if step % 256 == 0:
                writer.flush(block_until_num_items=512)
    return time.perf_counter() - start


def _rate(batches, batch: int, seconds: float) -> float:
    """Items/s over batches drawn from `batches` for about `seconds` (after one untimed)."""
    next(batches)
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        next(batches)
        n += 1
    return n * batch / (time.perf_counter() - start)


def _drop_page_cache() -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gb", type=float, default=2.0, help="GB (10^9) of frames")
    parser.add_argument("--budget_mb", type=int, default=256, help="0: no budget, all in RAM")
    parser.add_argument("--spill_dir", default="", help="default: a temporary directory")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--cold", action="store_true", help="also after dropping the page cache")
    parser.add_argument("--no_tf", action="store_true")
    parser.add_argument(
        "--pread", action="store_true", help="read spilled chunks with pread (spill_mmap=False)"
    )
    parser.add_argument("--checkpoint", action="store_true", help="also time Client.checkpoint()")
    parser.add_argument(
        "--checkpoint_dir",
        default="",
        help="default: a temporary directory; on another file system than the spill "
        "directory, chunks on disk cannot be linked and are rewritten",
    )
    args = parser.parse_args()

    steps = int(args.gb * 1e9 / FRAME_BYTES)
    spill_dir = ""
    if args.budget_mb > 0:
        spill_dir = args.spill_dir or tempfile.mkdtemp(prefix="spill_bench_")
    checkpoints = tempfile.mkdtemp(prefix="spill_bench_ckpt_", dir=args.checkpoint_dir or None)

    def start_server():
        table = reverb.Table(
            "t",
            sampler=reverb.selectors.Uniform(),
            remover=reverb.selectors.Fifo(),
            max_size=steps,
            rate_limiter=reverb.rate_limiters.MinSize(1),
        )
        return reverb.Server(
            [table],
            memory_limit=args.budget_mb << 20 if args.budget_mb else None,
            spill_dir=spill_dir or None,
            spill_mmap=not args.pread,
            checkpointer=reverb.checkpointers.DefaultCheckpointer(checkpoints),
        )

    server = start_server()
    address = f"localhost:{server.port}"
    client = reverb.Client(address)
    result = {
        "gb": args.gb,
        "steps": steps,
        "budget_mb": args.budget_mb,
        "rss_before_mb": _rss_bytes() / 2**20,
    }
    peak = _PeakRss()
    peak.start()
    seconds = _insert(client, steps)
    peak.stop.set()
    peak.join()
    result.update(
        insert_items_per_s=(steps - 2) / seconds,
        insert_mb_per_s=steps * FRAME_BYTES / 1e6 / seconds,
        insert_peak_rss_mb=peak.peak / 2**20,
        items=client.server_info()["t"].current_size,
    )

    def numpy_rate():
        dataset = reverb.NumpyDataset(address, "t", args.batch)
        return _rate(iter(dataset), args.batch, args.seconds)

    tf_rate = None
    if not args.no_tf:
        import tensorflow as tf  # pylint: disable=g-import-not-at-top

        def tf_rate():
            dataset = reverb.TrajectoryDataset(
                address,
                "t",
                dtypes={"frame": tf.uint8},
                shapes={"frame": tf.TensorShape([3, *SHAPE])},
                max_in_flight_samples_per_worker=2 * args.batch,
            ).batch(args.batch)
            return _rate(iter(dataset), args.batch, args.seconds)

    # Warm first (the page cache holds what was just written), then cold.
    result["numpy_items_per_s"] = numpy_rate()
    if tf_rate is not None:
        result["tfdata_items_per_s"] = tf_rate()
    if args.cold:
        _drop_page_cache()
        result["numpy_cold_items_per_s"] = numpy_rate()
        if tf_rate is not None:
            _drop_page_cache()
            result["tfdata_cold_items_per_s"] = tf_rate()
    result["spill"] = server.spill_stats()
    if args.checkpoint:
        start = time.perf_counter()
        path = client.checkpoint()
        result["checkpoint_s"] = time.perf_counter() - start
        result["checkpoint_data_file_mb"] = os.path.getsize(f"{path}/replay.rtfckpt") / 2**20
        linked = (
            [os.path.join(f"{path}/spill", f) for f in os.listdir(f"{path}/spill")]
            if (os.path.isdir(f"{path}/spill"))
            else []
        )
        result["checkpoint_linked_mb"] = sum(os.path.getsize(f) for f in linked) / 2**20
        server.stop()
        del server, client
        gc.collect()  # the tables and their chunks go, and the spill directory's lock
        start = time.perf_counter()
        server = start_server()
        client = reverb.Client(f"localhost:{server.port}")
        restarted_items = client.server_info()["t"].current_size
        result["restart_s"] = time.perf_counter() - start
        assert restarted_items == result["items"], (restarted_items, result["items"])
        result["restart_disk_reads"] = server.spill_stats().get("disk_reads", 0)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    server.stop()
    shutil.rmtree(checkpoints, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
