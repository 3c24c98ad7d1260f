# SPDX-License-Identifier: Apache-2.0
"""One server, many actors: the server's CPU per item under a fleet of writers.

P client processes with T threads each; every thread is a `TrajectoryWriter`
writing small steps (`float32[8]`, `int32`) and one 2-step item per step,
flushing every 64 steps (`--frames`: 84x84x4 `uint8` observations instead;
`--step_ms MS`: each step first waits MS, an environment's step, so that
writers pace as real actors do instead of writing flat out).
The server runs alone in a process of its own: a Python-hosted
`Server` (`--server python`, as both libraries are usually run) or
`reverb_tf_server` (`--server binary`). `--samplers K` adds one process
of K threads calling `Client.sample(num_samples=256)` beside the writers.

Over a measured window (after a warm-up) it reports:

* aggregate items/s acknowledged (items whose flush returned in the window),
* the server's CPU microseconds per item (`/proc/PID/stat`),
* its context switches per item and per insert message (all threads'
  `/proc/PID/task/*/status`; messages from the server's metrics page, so
  reverb_tf only),
* its threads and RSS at the end of the window,
* each writer's flush latency, p50 and p99 over all writers,
* the sampled items/s when samplers run.

    .venv/bin/python bench/fleet_bench.py [--fleets 1x1,4x4,8x8] [--compare]

`--compare` runs each fleet under dm-reverb 0.14 too (its side venv,
`scripts/setup_oracle.sh`), alternating, in the same sitting. The script
runs itself in child processes (`--role server|clients|samplers`) with the
interpreter of the library under test, so it needs nothing of reverb_tf in
dm-reverb's venv.
"""

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import threading
import time
import urllib.request
from typing import Dict, List, NamedTuple, Optional, Tuple

# The benchmarks' shared helpers (stdlib only at import, so the children
# under dm-reverb's interpreter import them too).
from server_process import cpu_seconds, rss_bytes, start_server, table_config

TABLE = "fleet"
STREAM_THREADS = 2  # the server's default
FLUSH_EVERY = 64
DM_PYTHON = (
    pathlib.Path(os.environ.get("REVERB_TF_CACHE", pathlib.Path.home() / ".cache" / "reverb_tf"))
    / "dm-reverb-venv"
    / "bin"
    / "python"
)


# ---------------------------------------------------------------- children


def _import(module: str):
    """The library under test, by module name (reverb_tf or reverb)."""
    return __import__(module)


def _table(reverb, max_size: int):
    return reverb.Table(
        name=TABLE,
        sampler=reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(),
        max_size=max_size,
        rate_limiter=reverb.rate_limiters.MinSize(1),
    )


def _serve(args: argparse.Namespace) -> None:
    """A Python-hosted server; prints its port, serves until stdin closes."""
    reverb = _import(args.module)
    kwargs = {}
    if args.module == "reverb_tf":
        kwargs["metrics_port"] = 0
        if args.stream_threads != STREAM_THREADS:  # older builds lack the option
            kwargs["stream_threads"] = args.stream_threads
    server = reverb.Server(tables=[_table(reverb, args.max_size)], **kwargs)
    metrics = getattr(server, "metrics_port", None) or 0
    print(f"port {server.port} metrics {metrics}", flush=True)
    sys.stdin.read()
    server.stop()


def _steps(np, frames: bool, n: int = 64) -> list:
    rng = np.random.default_rng(0)
    if frames:
        return [
            {
                "observation": rng.integers(0, 255, (84, 84, 4), dtype=np.uint8),
                "action": np.int32(i),
            }
            for i in range(n)
        ]
    return [
        {
            "observation": rng.standard_normal(8).astype(np.float32),
            "action": np.int32(i),
        }
        for i in range(n)
    ]


def _write(client, np, frames: bool, step_s: float, stop_at: float, out: dict) -> None:
    """One writer stream until `stop_at`; records (time, items) per flush."""
    steps = _steps(np, frames)
    marks: List[Tuple[float, int]] = []
    flushes: List[Tuple[float, float]] = []
    items = 0
    with client.trajectory_writer(num_keep_alive_refs=2) as writer:
        i = 0
        while True:
            if step_s:
                time.sleep(step_s)
            writer.append(steps[i % len(steps)])
            if i >= 1:
                writer.create_item(
                    TABLE,
                    1.0,
                    {k: writer.history[k][-2:] for k in ("observation", "action")},
                )
            i += 1
            if i % FLUSH_EVERY == 0:
                began = time.time()
                writer.flush()
                ended = time.time()
                items = i - 1
                marks.append((ended, items))
                flushes.append((ended, ended - began))
                if ended >= stop_at:
                    break
    out["marks"] = marks
    out["flushes"] = flushes


def _sample(client, stop_at: float, out: dict) -> None:
    marks = []
    items = 0
    while time.time() < stop_at:
        for _ in client.sample(TABLE, num_samples=256, emit_timesteps=False):
            items += 1
        marks.append((time.time(), items))
    out["marks"] = marks
    out["flushes"] = []


def _clients(args: argparse.Namespace) -> None:
    """T writer (or sampler) threads; waits on stdin for the stop time."""
    import numpy as np  # pylint: disable=g-import-not-at-top

    reverb = _import(args.module)
    client = reverb.Client(f"localhost:{args.port}")
    client.server_info()
    print("ready", flush=True)
    stop_at = float(sys.stdin.readline())
    results: List[dict] = [{} for _ in range(args.threads)]
    if args.role == "samplers":
        targets = [(_sample, (client, stop_at, r)) for r in results]
    else:
        step_s = args.step_ms / 1e3
        targets = [(_write, (client, np, args.frames, step_s, stop_at, r)) for r in results]
    threads = [threading.Thread(target=f, args=a) for f, a in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps(results), flush=True)


# ---------------------------------------------------------------- controller


def _proc_switches(pid: int) -> int:
    total = 0
    for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
        try:
            status = (task / "status").read_text()
        except OSError:
            continue  # the thread ended
        total += sum(int(v) for v in re.findall(r"ctxt_switches:\s+(\d+)", status))
    return total


def _insert_messages(metrics_port: int) -> Optional[int]:
    if not metrics_port:
        return None
    page = urllib.request.urlopen(f"http://localhost:{metrics_port}/metrics").read()
    match = re.search(rb'reverb_tf_rpc_duration_seconds_count\{method="InsertStream"\} (\d+)', page)
    return int(match.group(1)) if match else None


class _Counters(NamedTuple):
    """The server's cumulative counters at one moment of the window."""

    time: float
    cpu: float
    switches: int
    messages: Optional[int]  # None without a metrics page (dm-reverb)


def _read_counters(pid: int, metrics_port: int) -> _Counters:
    return _Counters(
        time.time(), cpu_seconds(pid), _proc_switches(pid), _insert_messages(metrics_port)
    )


def _python_for(module: str) -> str:
    if module == "reverb_tf":
        return sys.executable
    if not DM_PYTHON.exists():
        sys.exit(f"no dm-reverb venv at {DM_PYTHON}: run scripts/setup_oracle.sh")
    return str(DM_PYTHON)


def _child(module: str, role: str, *more: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            _python_for(module),
            str(pathlib.Path(__file__).resolve()),
            "--role",
            role,
            "--module",
            module,
            *more,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd="/",  # not the checkout: `import reverb_tf` must find what is installed
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )


def _start_server(args, module: str) -> Tuple[subprocess.Popen, int, int]:
    if args.server == "binary" and module == "reverb_tf":
        process, port = start_server(
            "port: 0 " + table_config(TABLE, args.max_size),
            "--metrics_port=0",
            *(
                [f"--stream_threads={args.stream_threads}"]
                if args.stream_threads != STREAM_THREADS
                else []
            ),
            stderr=subprocess.PIPE,
        )
        # Printed to stderr before the readiness line.
        metrics = re.search(r":(\d+)/metrics", process.stderr.readline())
        return process, port, int(metrics.group(1)) if metrics else 0
    process = _child(
        module,
        "server",
        "--max_size",
        str(args.max_size),
        "--stream_threads",
        str(args.stream_threads),
    )
    port, metrics = re.match(r"port (\d+) metrics (\d+)", process.stdout.readline()).groups()
    return process, int(port), int(metrics)


def _count_at(marks: List[Tuple[float, int]], t: float) -> int:
    """Items acknowledged by the last mark at or before `t`."""
    count = 0
    for when, items in marks:
        if when > t:
            break
        count = items
    return count


def _percentile(values: List[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def run_fleet(args, module: str, processes: int, threads: int) -> Dict[str, float]:
    """One fleet against one fresh server; the figures of its window."""
    server, port, metrics_port = _start_server(args, module)
    try:
        clients = [
            _child(
                module,
                "clients",
                "--port",
                str(port),
                "--threads",
                str(threads),
                *(["--frames"] if args.frames else []),
                "--step_ms",
                str(args.step_ms),
            )
            for _ in range(processes)
        ]
        if args.samplers:
            clients.append(
                _child(module, "samplers", "--port", str(port), "--threads", str(args.samplers))
            )
        for c in clients:
            line = c.stdout.readline()
            if line.strip() != "ready":
                raise RuntimeError(f"a client did not start: {line!r}")
        start = time.time()
        window = (start + args.warmup, start + args.warmup + args.seconds)
        for c in clients:
            c.stdin.write(f"{window[1]}\n")
            c.stdin.flush()
        time.sleep(max(0.0, window[0] - time.time()))
        t0, cpu0, sw0, msg0 = _read_counters(server.pid, metrics_port)
        time.sleep(max(0.0, window[1] - time.time()))
        t1, cpu1, sw1, msg1 = _read_counters(server.pid, metrics_port)
        server_threads = len(os.listdir(f"/proc/{server.pid}/task"))
        server_rss = rss_bytes(server.pid)
        outputs = [
            json.loads(c.communicate(timeout=600)[0].strip().splitlines()[-1]) for c in clients
        ]
    finally:
        if server.stdin:  # a Python-hosted server stops when its stdin closes
            server.stdin.close()
        else:
            server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    writer_outputs = outputs[:processes]
    items = sum(
        _count_at(o["marks"], t1) - _count_at(o["marks"], t0) for out in writer_outputs for o in out
    )
    latencies = [
        lat for out in writer_outputs for o in out for when, lat in o["flushes"] if t0 <= when <= t1
    ]
    result = {
        "library": module,
        "server": args.server if module == "reverb_tf" else "python",
        "fleet": f"{processes}x{threads}",
        "streams": processes * threads,
        "step_ms": args.step_ms,
        "stream_threads": args.stream_threads if module == "reverb_tf" else None,
        "items_per_s": items / (t1 - t0),
        "server_cpu_us_per_item": 1e6 * (cpu1 - cpu0) / max(items, 1),
        "server_cpu_cores": (cpu1 - cpu0) / (t1 - t0),
        "switches_per_item": (sw1 - sw0) / max(items, 1),
        "server_threads": server_threads,
        "server_rss_mb": server_rss / 2**20,
        "flush_p50_ms": 1e3 * _percentile(latencies, 0.5),
        "flush_p99_ms": 1e3 * _percentile(latencies, 0.99),
    }
    if msg0 is not None and msg1 is not None and msg1 > msg0:
        result["insert_messages_per_s"] = (msg1 - msg0) / (t1 - t0)
        result["items_per_message"] = items / (msg1 - msg0)
        result["switches_per_message"] = (sw1 - sw0) / (msg1 - msg0)
    if args.frames:
        # One new step, and so one frame, per item: the MB written.
        mb = items * 84 * 84 * 4 / 2**20
        result["frames_mb_per_s"] = mb / (t1 - t0)
        result["server_cpu_ms_per_mb"] = 1e3 * (cpu1 - cpu0) / max(mb, 1e-9)
    if args.samplers:
        sampled = sum(
            _count_at(o["marks"], t1) - _count_at(o["marks"], t0) for o in outputs[processes]
        )
        result["sampled_per_s"] = sampled / (t1 - t0)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--role", default="controller", choices=["controller", "server", "clients", "samplers"]
    )
    parser.add_argument("--module", default="reverb_tf")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--fleets", default="1x1,4x4,8x8", help="PROCESSESxTHREADS, comma-separated"
    )
    parser.add_argument("--server", default="python", choices=["python", "binary"])
    parser.add_argument("--samplers", type=int, default=0)
    parser.add_argument(
        "--stream_threads",
        type=int,
        default=STREAM_THREADS,
        help="reverb_tf's server option of that name",
    )
    parser.add_argument("--frames", action="store_true")
    parser.add_argument(
        "--step_ms", type=float, default=0.0, help="each writer's environment time per step"
    )
    parser.add_argument("--max_size", type=int, default=1_000_000)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--compare", action="store_true", help="run dm-reverb 0.14 beside, alternating"
    )
    args = parser.parse_args()
    if args.role == "server":
        _serve(args)
        return
    if args.role in ("clients", "samplers"):
        _clients(args)
        return
    modules = ["reverb_tf"] + (["reverb"] if args.compare else [])
    for _ in range(args.rounds):
        for fleet in args.fleets.split(","):
            processes, threads = (int(x) for x in fleet.split("x"))
            for module in modules:
                print(json.dumps(run_fleet(args, module, processes, threads)), flush=True)


if __name__ == "__main__":
    main()
