# SPDX-License-Identifier: Apache-2.0
"""Throughput over 1, 2, 3 shards, streams per iterator, and a shard's restart.

Shards are `reverb_tf_server` processes on loopback (so each one's CPU can be
read from /proc); writers are separate processes, each with one
`TrajectoryWriter` of a `Client` over all shards writing the small-item
workload (bench/small_items.py); the learner is this process, reading one
`ReverbDataset` over all shards `.batch(256)`.

  .venv/bin/python bench/scale_out_bench.py                   # shards 1,2,3; streams 1,2,4
  .venv/bin/python bench/scale_out_bench.py --restart_items 1000000   # + a Ray shard's restart

Prints one JSON object: per configuration, items/s and each shard's CPU
(cores busy) during the phase; for --restart_items, the seconds from the
SIGKILL of a Ray shard holding that many items to its restarted service.
"""

import argparse
import json
import multiprocessing
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import psutil

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import small_items  # pylint: disable=g-import-not-at-top,wrong-import-position
from server_process import start_server, table_config  # pylint: disable=g-import-not-at-top,wrong-import-position


def _config(max_size: int) -> str:
    # "t" for small items; "frames" for large ones (1000 frames: 28 MB at most).
    return "port: 0 " + table_config("t", max_size) + table_config("frames", 1000)


def _start_shards(n: int, max_size: int):
    shards = []
    for _ in range(n):
        process, port = start_server(_config(max_size), stderr=subprocess.DEVNULL)
        shards.append((process, f"localhost:{port}"))
    return shards


def _write_frames(writer, n):
    """n items of one 84x84x4 uint8 frame each (random bytes: no compression)."""
    import numpy as np  # pylint: disable=g-import-not-at-top

    frames = np.random.default_rng(0).integers(0, 256, (8, 84, 84, 4), dtype=np.uint8)
    for i in range(n):
        writer.append({"frame": frames[i % 8]})
        writer.create_item("frames", 1.0, {"frame": writer.history["frame"][-1]})
        if i % 24 == 23:
            writer.flush(block_until_num_items=24)
    writer.flush()


def _writer(addresses, seconds, start_at, ready, out, large):
    import reverb_tf as reverb  # pylint: disable=g-import-not-at-top

    writer = reverb.Client(addresses).trajectory_writer(num_keep_alive_refs=1)

    def write(n, start=0):
        if large:
            _write_frames(writer, n)
        else:
            small_items.write_small_items(writer, "t", n, start=start)

    write(48)  # connected, warm
    ready.put(True)
    while time.time() < start_at.value:
        time.sleep(0.001)
    n = 0
    while time.time() < start_at.value + seconds:
        write(240, start=n)
        n += 240
    writer.close()
    out.put(n)


def _cpu_seconds(processes):
    return [sum(psutil.Process(p.pid).cpu_times()[:2]) for p in processes]


def insert_phase(addresses, processes, writers, seconds, large=False):
    ctx = multiprocessing.get_context("spawn")
    out, ready = ctx.Queue(), ctx.Queue()
    start_at = ctx.Value("d", float("inf"))
    workers = [
        ctx.Process(target=_writer, args=(addresses, seconds, start_at, ready, out, large))
        for _ in range(writers)
    ]
    # Actors come up one after another (each writer takes the shard with the
    # fewest then), and start writing together.
    for w in workers:
        w.start()
        ready.get(timeout=120)
    start_at.value = time.time() + 0.5
    while time.time() < start_at.value:
        time.sleep(0.01)
    cpu = _cpu_seconds(processes)
    time.sleep(seconds)
    cpu = [after - before for after, before in zip(_cpu_seconds(processes), cpu)]
    total = sum(out.get(timeout=120) for _ in workers)
    for w in workers:
        w.join()
    result = {"items_per_s": total / seconds, "shard_cpu": [c / seconds for c in cpu]}
    if large:
        result["MB_per_s"] = total * 84 * 84 * 4 / seconds / 1e6
    return result


def sample_phase(addresses, processes, seconds, workers=-1):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    import reverb_tf as reverb  # pylint: disable=g-import-not-at-top

    dataset = reverb.TrajectoryDataset(
        addresses,
        "t",
        {"observation": tf.float32, "action": tf.int32, "reward": tf.float32},
        {
            "observation": tf.TensorShape([4]),
            "action": tf.TensorShape([]),
            "reward": tf.TensorShape([]),
        },
        max_in_flight_samples_per_worker=512,
        num_workers_per_iterator=workers,
    ).batch(256)
    iterator = iter(dataset)
    for _ in range(20):
        next(iterator)
    cpu = _cpu_seconds(processes)
    start, n = time.monotonic(), 0
    while time.monotonic() - start < seconds:
        next(iterator)
        n += 256
    elapsed = time.monotonic() - start
    cpu = [after - before for after, before in zip(_cpu_seconds(processes), cpu)]
    return {"items_per_s": n / elapsed, "shard_cpu": [c / elapsed for c in cpu]}


def restart_phase(items: int):
    import ray  # pylint: disable=g-import-not-at-top
    import reverb_tf as reverb  # pylint: disable=g-import-not-at-top
    from reverb_tf import ray as reverb_ray  # pylint: disable=g-import-not-at-top

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    table = reverb.Table(
        "t",
        reverb.selectors.Uniform(),
        reverb.selectors.Fifo(),
        items,
        reverb.rate_limiters.MinSize(1),
    )
    with (
        tempfile.TemporaryDirectory() as root,
        reverb_ray.ReplayCluster([table], 1, root, cpus_per_shard=0.5) as cluster,
    ):
        address = cluster.addresses[0]
        with reverb.Client(address).trajectory_writer(num_keep_alive_refs=1) as writer:
            small_items.write_small_items(writer, "t", items)
        checkpoint_started = time.monotonic()
        path = cluster.checkpoint()[0]
        checkpoint_s = time.monotonic() - checkpoint_started
        size_mb = sum(f.stat().st_size for f in pathlib.Path(path).rglob("*")) / 1e6
        pid = cluster.status()[0]["pid"]
        killed = time.monotonic()
        os.kill(pid, 9)
        cluster.wait_until_serving(timeout=300)
        served_s = time.monotonic() - killed
        status = cluster.status()[0]
        size = reverb.Client(address).server_info(timeout=60)["t"].current_size
        assert size == items, size
    ray.shutdown()
    return {
        "items": items,
        "checkpoint_s": checkpoint_s,
        "checkpoint_mb": size_mb,
        "kill_to_serving_s": served_s,
        "server_start_s": status["start_seconds"],
        "starts": status["starts"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shards", default="1,2,3")
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--streams", default="1,2,4")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--restart_items", type=int, default=0)
    parser.add_argument(
        "--large_writers",
        type=int,
        default=2,
        help="writers of 84x84x4 frames into one shard (0: skip)",
    )
    args = parser.parse_args()
    results = {"machine_cores": psutil.cpu_count(), "writers": args.writers}
    for n in [int(s) for s in args.shards.split(",") if s]:
        shards = _start_shards(n, max_size=10_000_000)
        processes = [p for p, _ in shards]
        addresses = [a for _, a in shards]
        try:
            results[f"insert_{n}_shards"] = insert_phase(
                addresses, processes, args.writers, args.seconds
            )
            results[f"sample_{n}_shards"] = sample_phase(addresses, processes, args.seconds)
        finally:
            for p in processes:
                p.kill()
                p.wait()
        print(
            json.dumps({k: v for k, v in results.items() if k.endswith(f"{n}_shards")}),
            file=sys.stderr,
        )
    if args.streams:
        shards = _start_shards(1, max_size=1_000_000)
        processes = [p for p, _ in shards]
        try:
            insert_phase([shards[0][1]], processes, 2, 2.0)  # something to sample
            for k in [int(s) for s in args.streams.split(",") if s]:
                results[f"sample_1_server_{k}_streams"] = sample_phase(
                    [shards[0][1]], processes, args.seconds, workers=k
                )
                print(json.dumps(results[f"sample_1_server_{k}_streams"]), file=sys.stderr)
        finally:
            for p in processes:
                p.kill()
                p.wait()
    if args.large_writers:
        shards = _start_shards(1, max_size=1000)
        processes = [p for p, _ in shards]
        try:
            results["insert_large_1_shard"] = insert_phase(
                [shards[0][1]], processes, args.large_writers, args.seconds, large=True
            )
            print(json.dumps(results["insert_large_1_shard"]), file=sys.stderr)
        finally:
            for p in processes:
                p.kill()
                p.wait()
    if args.restart_items:
        results["restart"] = restart_phase(args.restart_items)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
