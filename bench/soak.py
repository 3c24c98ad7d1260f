# SPDX-License-Identifier: Apache-2.0
"""A bounded soak of one reverb_tf_server process.

Writers, samplers, priority updaters, periodic resets and checkpoints run
against a `reverb_tf_server` child process for `--minutes`; every
`--report_s` a line shows the server's RSS, threads and open fds and the
clients' operation and error counts. A healthy run has flat RSS/threads/fds
(after warm-up) and no errors; the final line says whether it was.

  .venv/bin/python bench/soak.py --minutes 10
"""

import argparse
import collections
import os
import pathlib
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict

import numpy as np

import reverb_tf as reverb

_CONFIG = """
port: 0
tables {
  table_name: "replay"
  sampler { prioritized { priority_exponent: 0.8 } }
  remover { fifo: true }
  max_size: 20000
  rate_limiter { samples_per_insert: 1 min_size_to_sample: 1 min_diff: -1e300 max_diff: 1e300 }
}
tables {
  table_name: "queue"
  sampler { fifo: true }
  remover { fifo: true }
  max_size: 1000
  max_times_sampled: 1
  rate_limiter { samples_per_insert: 1 min_size_to_sample: 1 min_diff: 0 max_diff: 1000 }
}
"""


class Counters:
    """Thread-safe operation and error counts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.ops: Dict[str, int] = collections.Counter()
        self.errors: Dict[str, int] = collections.Counter()

    def op(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.ops[name] += n

    def error(self, name: str, error: BaseException) -> None:
        with self._lock:
            self.errors[f"{name}:{type(error).__name__}"] += 1


def _proc(pid: int) -> Dict[str, int]:
    status = pathlib.Path(f"/proc/{pid}/status").read_text()
    rss_kb = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))
    return {
        "rss_mb": rss_kb // 1024,
        "threads": len(os.listdir(f"/proc/{pid}/task")),
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
    }


def _writer(address: str, stop: threading.Event, counters: Counters, seed: int) -> None:
    rng = np.random.default_rng(seed)
    client = reverb.Client(address)
    while not stop.is_set():
        try:
            with client.trajectory_writer(num_keep_alive_refs=4) as writer:
                for step in range(int(rng.integers(20, 200))):
                    if stop.is_set():
                        break
                    writer.append(
                        {
                            "obs": rng.standard_normal(64).astype(np.float32),
                            "action": np.int32(step),
                        }
                    )
                    if step >= 3:
                        trajectory = {
                            "obs": writer.history["obs"][-4:],
                            "action": writer.history["action"][-1],
                        }
                        writer.create_item("replay", float(rng.random() + 0.1), trajectory)
                        if step % 8 == 0:
                            writer.create_item("queue", 1.0, trajectory)
                    counters.op("steps")
                writer.end_episode(timeout_ms=5000)
                counters.op("episodes")
        except reverb.errors.DeadlineExceededError:
            counters.op("writer_timeouts")  # the queue is full while nobody drains it
        except Exception as e:  # pylint: disable=broad-except
            counters.error("writer", e)


def _sampler(address: str, table: str, stop: threading.Event, counters: Counters) -> None:
    client = reverb.Client(address)
    while not stop.is_set():
        try:
            for sample in client.sample(
                table, num_samples=64, emit_timesteps=False, rate_limiter_timeout_ms=2000
            ):
                counters.op(f"samples_{table}")
        except reverb.errors.DeadlineExceededError:
            counters.op("sampler_timeouts")  # after a reset the table is empty
        except Exception as e:  # pylint: disable=broad-except
            counters.error(f"sampler_{table}", e)


def _updater(address: str, stop: threading.Event, counters: Counters) -> None:
    client = reverb.Client(address)
    rng = random.Random(7)
    while not stop.is_set():
        try:
            keys = [
                sample.info.key
                for sample in client.sample(
                    "replay", num_samples=32, emit_timesteps=False, rate_limiter_timeout_ms=2000
                )
            ]
            client.mutate_priorities(
                "replay", updates={k: rng.random() + 0.1 for k in keys[16:]}, deletes=keys[:4]
            )
            counters.op("updates", len(keys) - 16)
            counters.op("deletes", 4)
        except reverb.errors.DeadlineExceededError:
            counters.op("sampler_timeouts")
        except Exception as e:  # pylint: disable=broad-except
            counters.error("updater", e)


def _admin(
    address: str, stop: threading.Event, counters: Counters, checkpoint_s: float, reset_s: float
) -> None:
    client = reverb.Client(address)
    next_checkpoint = time.monotonic() + checkpoint_s
    next_reset = time.monotonic() + reset_s
    while not stop.wait(0.5):
        try:
            if time.monotonic() >= next_checkpoint:
                client.checkpoint()
                counters.op("checkpoints")
                next_checkpoint += checkpoint_s
            if time.monotonic() >= next_reset:
                client.reset("queue")
                counters.op("resets")
                next_reset += reset_s
            client.server_info(timeout=10)
        except Exception as e:  # pylint: disable=broad-except
            counters.error("admin", e)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--samplers", type=int, default=4)
    parser.add_argument("--report_s", type=float, default=30.0)
    parser.add_argument("--checkpoint_s", type=float, default=60.0)
    parser.add_argument("--reset_s", type=float, default=45.0)
    parser.add_argument(
        "--server_binary", default=str(pathlib.Path(reverb.__file__).parent / "reverb_tf_server")
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as checkpoints:
        server = subprocess.Popen(
            [args.server_binary, "--config=" + _CONFIG, f"--checkpoint_dir={checkpoints}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = server.stdout.readline()
        port = int(line.rsplit("on port ", 1)[1].split()[0])
        address = f"localhost:{port}"
        stop = threading.Event()
        counters = Counters()
        threads = [
            threading.Thread(target=_writer, args=(address, stop, counters, i))
            for i in range(args.writers)
        ]
        threads += [
            threading.Thread(
                target=_sampler, args=(address, "replay" if i % 2 == 0 else "queue", stop, counters)
            )
            for i in range(args.samplers)
        ]
        threads.append(threading.Thread(target=_updater, args=(address, stop, counters)))
        threads.append(
            threading.Thread(
                target=_admin, args=(address, stop, counters, args.checkpoint_s, args.reset_s)
            )
        )
        for thread in threads:
            thread.start()
        started = time.monotonic()
        first = None
        try:
            while time.monotonic() - started < args.minutes * 60:
                time.sleep(
                    min(args.report_s, max(0.0, args.minutes * 60 - (time.monotonic() - started)))
                )
                if server.poll() is not None:
                    print(f"SERVER EXITED with {server.returncode}: {server.stderr.read()}")
                    return 1
                now = _proc(server.pid)
                first = first or now
                print(
                    f"t={time.monotonic() - started:6.0f}s rss={now['rss_mb']}MB "
                    f"threads={now['threads']} fds={now['fds']} "
                    f"ops={dict(counters.ops)} errors={dict(counters.errors)}",
                    flush=True,
                )
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=30)
            server.send_signal(signal.SIGTERM)
            exit_code = server.wait(timeout=60)
        healthy = not counters.errors and exit_code == 0
        print(
            f"done: {'HEALTHY' if healthy else 'UNHEALTHY'}; server exit {exit_code}; "
            f"errors {dict(counters.errors)}; first report {first}, last {now}"
        )
        return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
