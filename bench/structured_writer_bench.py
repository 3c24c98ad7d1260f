# SPDX-License-Identifier: Apache-2.0
"""StructuredWriter insert throughput for an N-step transition pattern.

Each step is {obs: f32[4], action: i32, reward: f32, discount: f32}; one
config inserts, at every step with enough history, the transition
(obs[-N-1], action[-N-1], reward[-N-1:-1], discount[-N-1:-1], obs[-1]) into
a table of a server running in a child process (as the shared harness does),
so the figure is what an actor's process spends. Episodes of
--episode-length steps end with end_episode(). Reports the best of
--repeats runs as JSON.

Runs under dm-reverb or reverb_tf, for a same-sitting comparison:

    .venv/bin/python bench/structured_writer_bench.py --module reverb_tf
    /root/.cache/reverb_tf/dm-reverb-venv/bin/python \
        bench/structured_writer_bench.py --module reverb
"""

import argparse
import importlib
import json
import subprocess
import sys
import time

import numpy as np

_SERVER = r"""
import importlib, json, sys
reverb = importlib.import_module(sys.argv[1])
table = reverb.Table('nstep', reverb.selectors.Uniform(), reverb.selectors.Fifo(),
                     10**7, reverb.rate_limiters.MinSize(1))
server = reverb.Server([table])
print(json.dumps({'port': server.port}), flush=True)
sys.stdin.read()  # until the parent closes stdin
server.stop()
"""


def _config(reverb, n_step: int):
    sw = reverb.structured_writer
    ref = sw.create_reference_step({"obs": None, "action": None, "reward": None, "discount": None})
    pattern = {
        "obs": ref["obs"][-n_step - 1],
        "action": ref["action"][-n_step - 1],
        "reward": ref["reward"][-n_step - 1 : -1],
        "discount": ref["discount"][-n_step - 1 : -1],
        "next_obs": ref["obs"][-1],
    }
    return sw.create_config(pattern, "nstep", conditions=[sw.Condition.step_index() >= n_step])


def _run(reverb, address: str, steps: int, episode_length: int, n_step: int) -> dict:
    client = reverb.Client(address)
    writer = client.structured_writer([_config(reverb, n_step)])
    rng = np.random.default_rng(0)
    data = [
        {
            "obs": rng.standard_normal(4).astype(np.float32),
            "action": np.int32(i % 3),
            "reward": np.float32(rng.standard_normal()),
            "discount": np.float32(0.99),
        }
        for i in range(1000)
    ]
    items = 0
    start = time.perf_counter()
    for i in range(steps):
        writer.append(data[i % len(data)])
        t = i % episode_length
        if t >= n_step:
            items += 1
        if t == episode_length - 1:
            writer.end_episode()
    writer.flush()
    elapsed = time.perf_counter() - start
    return {
        "steps": steps,
        "items": items,
        "seconds": elapsed,
        "steps_per_s": steps / elapsed,
        "items_per_s": items / elapsed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--module", choices=["reverb", "reverb_tf"], default="reverb_tf")
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--episode-length", type=int, default=100)
    parser.add_argument("--n-step", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    reverb = importlib.import_module(args.module)
    server = subprocess.Popen(
        [sys.executable, "-c", _SERVER, args.module],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        port = json.loads(server.stdout.readline())["port"]
        address = f"localhost:{port}"
        warmup = _run(reverb, address, min(args.steps, 2000), args.episode_length, args.n_step)
        runs = [
            _run(reverb, address, args.steps, args.episode_length, args.n_step)
            for _ in range(args.repeats)
        ]
        # Every item the runs counted is in the table (flush() waited for them).
        stored = reverb.Client(address).server_info()["nstep"].current_size
        expected = warmup["items"] + sum(run["items"] for run in runs)
        if stored != expected:
            raise SystemExit(f"the table holds {stored} items, expected {expected}")
    finally:
        server.stdin.close()
        server.wait(timeout=30)
    best = max(runs, key=lambda run: run["items_per_s"])
    print(
        json.dumps(
            {
                "module": args.module,
                "n_step": args.n_step,
                "episode_length": args.episode_length,
                "best": best,
                "items_per_s_all": [round(run["items_per_s"]) for run in runs],
            }
        )
    )


if __name__ == "__main__":
    main()
