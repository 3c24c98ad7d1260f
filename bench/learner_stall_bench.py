# SPDX-License-Identifier: Apache-2.0
"""How long a learner waits for each batch while actors write and checkpoints run.

The figure a user feels: the distribution of the wall time of `next()` on a
`TrajectoryDataset.from_table_signature(...).batch(B)` iterator, while N actor
processes write into the same table and the server writes a checkpoint every
few seconds. The server, each actor and the learner are processes of their
own (a real actor/learner setup), so the library's Python-side costs land
where they would in production.

    .venv/bin/python bench/learner_stall_bench.py --compare
        runs both libraries in the same sitting, alternating, --rounds each
        (reverb_tf from this checkout with the main venv; dm-reverb 0.14 from
        $REVERB_TF_CACHE/dm-reverb-venv), and prints p50/p99/max for each;
    python bench/learner_stall_bench.py --module reverb_tf|reverb
        one run; one JSON object on stdout.

The script uses only dm-reverb's public API, so the same file runs under both.

Where a wait goes is read from Linux's scheduler statistics
(/proc/<thread>/schedstat): for each batch, how long the thread calling
`next()` and the thread that fills batches (the learner's busiest other
thread during the warm-up) were ready to run but had no core. The slow
batches (over twice the median wait) are then split into that run-queue
time and the rest. A wait that is mostly run-queue time is the machine's
cores being shared, not the library making the learner wait.
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict, List

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
TABLE = "replay"


def _signature(tf, step_floats: int):
    return {
        "observation": tf.TensorSpec([2, step_floats], tf.float32),
        "action": tf.TensorSpec([2], tf.int32),
        "reward": tf.TensorSpec([2], tf.float32),
    }


def serve(reverb, args) -> None:
    """Hosts the table with a checkpointer; prints the port; runs until stdin closes."""
    import tensorflow as tf

    table = reverb.Table(
        name=TABLE,
        sampler=reverb.selectors.Prioritized(0.6),
        remover=reverb.selectors.Fifo(),
        max_size=args.max_size,
        rate_limiter=reverb.rate_limiters.MinSize(args.min_size),
        signature=_signature(tf, args.step_floats),
    )
    checkpointer = reverb.checkpointers.DefaultCheckpointer(path=args.checkpoint_dir)
    server = reverb.Server(tables=[table], port=None, checkpointer=checkpointer)
    print(server.port, flush=True)
    sys.stdin.read()
    server.stop()


def act(reverb, args) -> None:
    """Writes 2-step items (one per step) until stdin closes."""
    import numpy as np

    client = reverb.Client(f"localhost:{args.port}")
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    rng = np.random.default_rng(os.getpid())
    observation = rng.standard_normal(args.step_floats).astype(np.float32)
    steps = 0
    with client.trajectory_writer(num_keep_alive_refs=2) as writer:
        while not stop.is_set():
            writer.append(
                {
                    "observation": observation,
                    "action": np.int32(steps % 7),
                    "reward": np.float32(1.0),
                }
            )
            steps += 1
            if steps % args.episode_steps == 1:
                continue  # an item needs two steps of the episode
            writer.create_item(
                TABLE,
                priority=float(1 + steps % 5),
                trajectory={
                    "observation": writer.history["observation"][-2:],
                    "action": writer.history["action"][-2:],
                    "reward": writer.history["reward"][-2:],
                },
            )
            if steps % args.episode_steps == 0:
                writer.end_episode(timeout_ms=10_000)
            if args.actor_steps_per_s and steps % 10 == 0:
                time.sleep(10 / args.actor_steps_per_s)
    print(steps, flush=True)


def _run_queue_ns(schedstat: str) -> int:
    """Nanoseconds a thread has spent ready to run but not running.

    Args:
      schedstat: The thread's /proc/.../schedstat path.

    Returns:
      The second field of the file: time spent on a run queue.
    """
    with open(schedstat) as stats:
        return int(stats.read().split()[1])


def _thread_times() -> Dict[str, tuple]:
    """(CPU ns, run-queue ns, name) of each thread of this process, by thread id."""
    times = {}
    for task in pathlib.Path("/proc/self/task").iterdir():
        try:
            running, waiting = (task / "schedstat").read_text().split()[:2]
            name = (task / "comm").read_text().strip()
        except OSError:  # the thread ended meanwhile
            continue
        times[task.name] = (int(running), int(waiting), name)
    return times


def _busiest(before: Dict[str, tuple], after: Dict[str, tuple]) -> List[tuple]:
    """(CPU s, run-queue s, name, thread id) of threads, busiest first."""
    return sorted(
        (
            (cpu - before.get(tid, (0, 0))[0]) / 1e9,
            (waiting - before.get(tid, (0, 0))[1]) / 1e9,
            name,
            tid,
        )
        for tid, (cpu, waiting, name) in after.items()
    )[::-1]


def _percentile(values: List[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def learn(reverb, args) -> Dict:
    """Starts the server and actors, reads batches, returns the wait distribution."""

    me = [sys.executable, __file__, "--module", args.module]
    shared = [
        f"--step_floats={args.step_floats}",
        f"--episode_steps={args.episode_steps}",
        f"--actor_steps_per_s={args.actor_steps_per_s}",
    ]
    with tempfile.TemporaryDirectory() as checkpoint_dir:
        server = subprocess.Popen(
            me
            + shared
            + [
                "--_role=serve",
                f"--max_size={args.max_size}",
                f"--min_size={args.min_size}",
                f"--checkpoint_dir={checkpoint_dir}",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        port = int(server.stdout.readline())
        actors = [
            subprocess.Popen(
                me + shared + ["--_role=act", f"--port={port}"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(args.actors)
        ]
        client = reverb.Client(f"localhost:{port}")
        # Fill to the starting size before the clock runs, so the table holds
        # what a checkpoint then writes.
        while client.server_info()[TABLE].current_size < args.fill:
            time.sleep(0.1)
        dataset = reverb.TrajectoryDataset.from_table_signature(
            server_address=f"localhost:{port}",
            table=TABLE,
            max_in_flight_samples_per_worker=args.max_in_flight or 2 * args.batch,
            num_workers_per_iterator=args.workers,
        ).batch(args.batch)
        iterator = iter(dataset)
        warming = _thread_times()
        for _ in range(args.warmup):
            next(iterator)
        me = str(threading.get_native_id())
        filler = next(t for *_, t in _busiest(warming, _thread_times()) if t != me)
        consumer_stats = f"/proc/self/task/{me}/schedstat"
        filler_stats = f"/proc/self/task/{filler}/schedstat"
        if args.gc_freeze:
            # What a program can do for itself: move everything imported and
            # built so far out of the collector's view, so that a full
            # collection does not walk TensorFlow's object graph in a batch.
            import gc

            gc.freeze()

        checkpoints: List[tuple] = []
        stop = threading.Event()

        def checkpoint_loop():
            while not stop.wait(args.checkpoint_every_s):
                start = time.perf_counter()
                client.checkpoint()
                checkpoints.append((start, time.perf_counter()))

        checkpointing = threading.Thread(target=checkpoint_loop, daemon=True)
        checkpointing.start()
        waits, starts, queued = [], [], []
        threads_before = _thread_times()
        began = time.perf_counter()
        for _ in range(args.batches):
            queued_before = _run_queue_ns(consumer_stats), _run_queue_ns(filler_stats)
            start = time.perf_counter()
            next(iterator)
            waits.append(time.perf_counter() - start)
            starts.append(start)
            queued.append(
                (
                    _run_queue_ns(consumer_stats) - queued_before[0],
                    _run_queue_ns(filler_stats) - queued_before[1],
                )
            )
        elapsed = time.perf_counter() - began
        threads_after = _thread_times()
        stop.set()
        checkpointing.join()
        size = client.server_info()[TABLE].current_size
        for actor in actors:
            actor.stdin.close()
        actor_steps = sum(int(actor.stdout.read().strip() or 0) for actor in actors)
        for actor in actors:
            actor.wait(timeout=60)
        server.stdin.close()
        server.wait(timeout=60)

    during = [
        wait
        for wait, start in zip(waits, starts)
        if any(c0 <= start + wait and start <= c1 for c0, c1 in checkpoints)
    ]
    ms = [w * 1000 for w in waits]
    # The slow batches, and how much of their wait the learner's two threads
    # spent ready to run without a core (each; they may overlap).
    p50 = _percentile(ms, 50)
    slow = [i for i, wait in enumerate(ms) if wait > 2 * p50] or [ms.index(max(ms))]
    busiest = _busiest(threads_before, threads_after)[:3]
    return {
        "module": args.module,
        "batch": args.batch,
        "batches": len(waits),
        "batches_per_s": len(waits) / elapsed,
        "wait_ms": {
            "p50": _percentile(ms, 50),
            "p90": _percentile(ms, 90),
            "p99": _percentile(ms, 99),
            "max": max(ms),
            "mean": statistics.fmean(ms),
        },
        "slow_batches": {
            "over_2x_p50": len(slow),
            "wait_ms_mean": statistics.fmean(ms[i] for i in slow),
            "consumer_runqueue_ms_mean": statistics.fmean(queued[i][0] / 1e6 for i in slow),
            "filler_runqueue_ms_mean": statistics.fmean(queued[i][1] / 1e6 for i in slow),
        },
        "other_batches_filler_runqueue_ms_mean": statistics.fmean(
            [queued[i][1] / 1e6 for i in set(range(len(ms))) - set(slow)] or [0.0]
        ),
        # CPU and run-queue seconds of the learner's three busiest threads
        # over the measured batches (`elapsed_s`).
        "busiest_threads": [
            {"name": name, "cpu_s": round(cpu, 3), "runqueue_s": round(waiting, 3)}
            for cpu, waiting, name, _ in busiest
        ],
        "elapsed_s": elapsed,
        "checkpoints": len(checkpoints),
        "checkpoint_s": [round(c1 - c0, 3) for c0, c1 in checkpoints],
        "batches_during_checkpoints": len(during),
        "wait_ms_during_checkpoints_max": max(during) * 1000 if during else None,
        "table_size_at_end": size,
        "actor_steps": actor_steps,
        "actor_steps_per_s": actor_steps / elapsed,
    }


def compare(args) -> None:
    """Alternates the two libraries, --rounds each, and prints the figures."""
    cache = pathlib.Path(
        os.environ.get("REVERB_TF_CACHE", pathlib.Path.home() / ".cache/reverb_tf")
    )
    pythons = {
        "reverb_tf": str(ROOT / ".venv" / "bin" / "python"),
        "reverb": str(cache / "dm-reverb-venv" / "bin" / "python"),
    }
    passed, skip = [], False
    for arg in sys.argv[1:]:
        if skip or arg == "--compare" or arg.startswith("--rounds="):
            skip = False
        elif arg == "--rounds":
            skip = True  # and its value
        else:
            passed.append(arg)
    results: Dict[str, List[Dict]] = {name: [] for name in pythons}
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    for round_index in range(args.rounds):
        for module, python in pythons.items():
            out = subprocess.run(
                [python, __file__, *passed, "--module", module],
                capture_output=True,
                text=True,
                env=env,
                timeout=1800,
                check=True,
            )
            result = json.loads(out.stdout.strip().splitlines()[-1])
            results[module].append(result)
            w, slow = result["wait_ms"], result["slow_batches"]
            print(
                f"round {round_index + 1} {module:9s}: "
                f"p50 {w['p50']:.2f} ms, p99 {w['p99']:.2f} ms, "
                f"max {w['max']:.1f} ms, {result['batches_per_s']:.1f} batches/s, "
                f"{slow['over_2x_p50']} batches over 2x p50 waited "
                f"{slow['wait_ms_mean']:.2f} ms, of which without a core: the "
                f"consumer {slow['consumer_runqueue_ms_mean']:.2f} ms, the filler "
                f"{slow['filler_runqueue_ms_mean']:.2f} ms "
                f"({result['other_batches_filler_runqueue_ms_mean']:.2f} ms in "
                "the other batches), "
                f"{result['checkpoints']} checkpoints {result['checkpoint_s']}, "
                f"actors {result['actor_steps_per_s']:.0f} steps/s",
                file=sys.stderr,
                flush=True,
            )
    summary = {}
    for module, runs in results.items():
        summary[module] = {
            key: statistics.median(run["wait_ms"][key] for run in runs)
            for key in ("p50", "p99", "max")
        }
        summary[module]["p99/p50"] = summary[module]["p99"] / summary[module]["p50"]
        summary[module]["batches_per_s"] = statistics.median(r["batches_per_s"] for r in runs)
        for key in ("wait_ms_mean", "consumer_runqueue_ms_mean", "filler_runqueue_ms_mean"):
            summary[module][f"slow_batches_{key}"] = statistics.median(
                r["slow_batches"][key] for r in runs
            )
    print(json.dumps({"summary": summary, "runs": results}, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--module", default="reverb_tf", help="the reverb API module (reverb_tf or reverb)"
    )
    parser.add_argument("--compare", action="store_true", help="run both libraries, alternating")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--actors", type=int, default=4)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--batches", type=int, default=600)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument(
        "--max_in_flight", type=int, default=0, help="per worker; 0: twice the batch"
    )
    parser.add_argument(
        "--gc_freeze", action="store_true", help="gc.freeze() in the learner after warm-up"
    )
    parser.add_argument("--workers", type=int, default=-1, help="num_workers_per_iterator")
    parser.add_argument("--step_floats", type=int, default=64, help="float32s per observation")
    parser.add_argument("--episode_steps", type=int, default=100)
    parser.add_argument(
        "--actor_steps_per_s", type=float, default=0, help="per actor; 0: as fast as it can"
    )
    parser.add_argument("--max_size", type=int, default=200_000)
    parser.add_argument("--min_size", type=int, default=1000)
    parser.add_argument(
        "--fill", type=int, default=50_000, help="items in the table before the clock runs"
    )
    parser.add_argument("--checkpoint_every_s", type=float, default=2.0)
    parser.add_argument("--_role", default="learn", choices=("learn", "serve", "act"))
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--checkpoint_dir", default="")
    args = parser.parse_args()
    if args.compare:
        compare(args)
        return
    import importlib

    reverb = importlib.import_module(args.module)
    if args._role == "serve":
        serve(reverb, args)
    elif args._role == "act":
        act(reverb, args)
    else:
        print(json.dumps(learn(reverb, args)))


if __name__ == "__main__":
    main()
