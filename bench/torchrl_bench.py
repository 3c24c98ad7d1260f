# SPDX-License-Identifier: Apache-2.0
"""The frames of spill_bench.py in TorchRL's LazyMemmapStorage, for comparison.

TorchRL keeps a local replay buffer larger than memory in memory-mapped
files (`LazyMemmapStorage`). This writes the same frames as
`spill_bench.py` (84x84x4 uint8, every step different) into one, in a
single process, and samples it the fastest way TorchRL offers for
spill_bench's 3-step overlapping items: 64 random starting steps per batch,
gathered as 64 x 3 frames straight from the storage (`storage[index]`, no
sampler or transform on top). Prints one JSON line: insert MB/s, peak RSS,
sampled items/s with the page cache warm and, with `--cold` (root), after
dropping it.

It needs torch, tensordict and torchrl, which reverb_tf does not depend on;
run it with an interpreter that has them (a side venv):

    python -m venv ~/.cache/reverb_tf/torchrl-venv
    ~/.cache/reverb_tf/torchrl-venv/bin/pip install torch torchrl numpy
    ~/.cache/reverb_tf/torchrl-venv/bin/python bench/torchrl_bench.py --gb 6 \\
        --scratch_dir /var/tmp/torchrl
"""

import argparse
import json
import os
import resource
import shutil
import tempfile
import time

import numpy as np
import torch
from tensordict import TensorDict
from torchrl.data import LazyMemmapStorage

SHAPE = (84, 84, 4)
FRAME_BYTES = int(np.prod(SHAPE))
WRITE_BLOCK = 1024  # frames per storage write


def _drop_page_cache() -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def _rate(storage, steps: int, batch: int, seconds: float, rng) -> float:
    """Items/s of batches of `batch` random 3-frame items for about `seconds`."""
    offsets = torch.arange(3)

    def one():
        starts = torch.from_numpy(rng.integers(0, steps - 2, batch))
        frames = storage[(starts[:, None] + offsets).reshape(-1)]["frame"]
        return frames.reshape(batch, 3, *SHAPE)

    one()
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        one()
        n += 1
    return n * batch / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gb", type=float, default=2.0, help="GB (10^9) of frames")
    parser.add_argument("--scratch_dir", default="", help="default: a temporary directory")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--cold", action="store_true", help="also after dropping the page cache")
    args = parser.parse_args()

    steps = int(args.gb * 1e9 / FRAME_BYTES)
    scratch = tempfile.mkdtemp(prefix="torchrl_bench_", dir=args.scratch_dir or None)
    storage = LazyMemmapStorage(steps, scratch_dir=scratch)
    # The frames spill_bench writes: a pool of 256 random frames, each step's
    # copy stamped with its step number.
    pool = np.random.default_rng(0).integers(0, 256, (256, *SHAPE), dtype=np.uint8)
    block = np.empty((WRITE_BLOCK, *SHAPE), np.uint8)
    start = time.perf_counter()
    for first in range(0, steps, WRITE_BLOCK):
        n = min(WRITE_BLOCK, steps - first)
        for i in range(n):
            block[i] = pool[(first + i) % len(pool)]
            block[i].reshape(-1)[:8] = np.frombuffer(np.int64(first + i).tobytes(), np.uint8)
        data = TensorDict({"frame": torch.from_numpy(block[:n])}, batch_size=[n])
        storage.set(torch.arange(first, first + n), data)
    insert_s = time.perf_counter() - start
    result = {
        "torch": torch.__version__,
        "gb": args.gb,
        "steps": steps,
        "insert_mb_per_s": steps * FRAME_BYTES / 1e6 / insert_s,
        "insert_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    # A check that the gather returns the frames written.
    sample = storage[torch.tensor([5, 6, 7])]["frame"].numpy()
    for i, frame in zip((5, 6, 7), sample):
        assert np.frombuffer(frame.reshape(-1)[:8].tobytes(), np.int64)[0] == i

    rng = np.random.default_rng(1)
    result["items_per_s"] = _rate(storage, steps, args.batch, args.seconds, rng)
    if args.cold:
        _drop_page_cache()
        result["cold_items_per_s"] = _rate(storage, steps, args.batch, args.seconds, rng)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    del storage
    shutil.rmtree(scratch, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
