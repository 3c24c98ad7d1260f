# SPDX-License-Identifier: Apache-2.0
"""How long `reverb_tf_server` takes to exit after SIGTERM, by table size.

Starts the binary on a free loopback port with one uniform table, fills it
with N small items (several items per step, so filling is quick), optionally
with a checkpoint directory and --checkpoint_on_exit, sends SIGTERM and
times until the process has exited. Prints one line per size:

    items  fill_s  rss_mb  stop_s  [checkpoint_s]

Usage:
    python bench/stop_time.py [--sizes 10000,1000000,10000000] [--checkpoint_on_exit]
"""

import argparse
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

import reverb_tf
from reverb_tf import _server_binary

ITEMS_PER_STEP = 16


def _rss_mb(pid: int) -> float:
    status = pathlib.Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024


def _fill(address: str, n: int) -> None:
    client = reverb_tf.Client(address)
    with client.trajectory_writer(num_keep_alive_refs=1) as writer:
        for i in range(0, n, ITEMS_PER_STEP):
            writer.append({"x": np.float32(i)})
            column = writer.history["x"][-1]
            for _ in range(min(ITEMS_PER_STEP, n - i)):
                writer.create_item("t", 1.0, {"x": column})
            if i % 4096 == 0:
                writer.flush(block_until_num_items=4096)
        writer.flush()


def measure(n: int, checkpoint_on_exit: bool) -> str:
    """Runs one size; returns the printed line."""
    with tempfile.TemporaryDirectory() as directory:
        config = (
            f"port: 0 tables {{ table_name: 't' sampler {{ uniform: true }} "
            f"remover {{ fifo: true }} max_size: {n + 1} rate_limiter {{ "
            "samples_per_insert: 1 min_size_to_sample: 1 min_diff: -1e300 "
            "max_diff: 1e300 } }"
        )
        args = [str(_server_binary.path()), f"--config={config}"]
        if checkpoint_on_exit:
            args += [f"--checkpoint_dir={directory}", "--checkpoint_on_exit"]
        process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = process.stdout.readline()
        port = int(re.search(r"on port (\d+)", line).group(1))
        started = time.monotonic()
        _fill(f"localhost:{port}", n)
        fill_s = time.monotonic() - started
        rss = _rss_mb(process.pid)
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=600)
        stop_s = time.monotonic() - signalled
        if process.returncode != 0:
            raise SystemExit(f"exit status {process.returncode}: {err}")
        result = f"{n:>10}  {fill_s:7.1f}  {rss:8.0f}  {stop_s:6.2f}"
        found = re.search(r"checkpoint .* in ([0-9.]+) s", out + err)
        if found:
            result += f"  {found.group(1)}"
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,1000000,10000000")
    parser.add_argument("--checkpoint_on_exit", action="store_true")
    flags = parser.parse_args()
    print("     items   fill_s    rss_mb  stop_s  [checkpoint_s]")
    for n in [int(s) for s in flags.sizes.split(",")]:
        print(measure(n, flags.checkpoint_on_exit), flush=True)


if __name__ == "__main__":
    sys.exit(main())
