# SPDX-License-Identifier: Apache-2.0
"""The memory budget: writers that push past it wait and are refused; the server is never killed.

The `reverb_tf_server` binary runs with `--memory_limit` and, once up, an
address-space limit (RLIMIT_AS, set with prlimit: what a memory cgroup or
`ulimit -v` does) only a little above what it uses plus its budget. Four
writer threads insert 1 MiB items of random bytes well past the budget. A
server without a budget would meet its limit and fail allocations (or, under
a cgroup, be killed); with it, writers wait and, at their timeout, get
RESOURCE_EXHAUSTED naming the budget, while sampling goes on and deletes
let a waiting insert in.
"""

import os
import pathlib
import resource
import threading
import time

import numpy as np
import pytest

import reverb_tf as reverb
from integration import (
    port_outside_ephemeral_range,
    proc_status_bytes,
    scrape_metrics,
    uniform_table_config,
)

_BUDGET = 160 << 20
_ITEM = 1 << 20
_HEADROOM = 256 << 20  # for gRPC's buffers, threads and the allocator, above the budget
_PHRASE = "memory budget is used up"


def _metric(metrics_port, name):
    samples, _ = scrape_metrics(metrics_port)
    return samples[(name, ())]


class _Writer(threading.Thread):
    """Inserts 1 MiB items until it has been refused `refusals` times."""

    def __init__(self, address, seed, refusals=2):
        super().__init__(daemon=True)
        self.address, self.rng, self.refusals = address, np.random.default_rng(seed), refusals
        self.acked, self.errors = 0, []

    def run(self):
        client = reverb.Client(self.address)
        writer = client.trajectory_writer(num_keep_alive_refs=1, rate_limiter_timeout_ms=1500)
        deadline = time.monotonic() + 120
        while len(self.errors) < self.refusals and time.monotonic() < deadline:
            try:
                writer.append([self.rng.integers(0, 256, _ITEM, dtype=np.uint8)])
                writer.create_item("t", 1.0, writer.history[0][-1:])
                writer.flush()
                self.acked += 1
            except reverb.errors.ReverbError as error:
                self.errors.append(error)
                writer = client.trajectory_writer(
                    num_keep_alive_refs=1, rate_limiter_timeout_ms=1500
                )


def test_writers_past_the_budget_wait_and_are_refused_and_the_server_lives(
    start_server, server_binary
):
    port, metrics_port = port_outside_ephemeral_range(), port_outside_ephemeral_range()
    process, port = start_server(
        server_binary,
        "--config=" + uniform_table_config(port, max_size=1_000_000),
        f"--memory_limit={_BUDGET // (1 << 20)}M",
        f"--metrics_port={metrics_port}",
    )
    try:
        limit = proc_status_bytes(process.pid, "VmSize") + _BUDGET + _HEADROOM
        resource.prlimit(process.pid, resource.RLIMIT_AS, (limit, limit))
        address = f"localhost:{port}"
        assert _metric(metrics_port, "reverb_tf_memory_limit_bytes") == _BUDGET

        writers = [_Writer(address, seed) for seed in range(4)]
        for writer in writers:
            writer.start()
        client = reverb.Client(address)
        sampled = 0
        while any(writer.is_alive() for writer in writers):
            # Reads go on while writers are held back.
            if client.server_info(timeout=10)["t"].current_size > 0:
                next(client.sample("t", emit_timesteps=False))
                sampled += 1
            time.sleep(0.05)
        for writer in writers:
            writer.join()
        assert process.poll() is None, "the server died"
        errors = [error for writer in writers for error in writer.errors]
        assert len(errors) == 8, [str(e) for e in errors]
        for error in errors:
            assert isinstance(error, reverb.errors.ResourceExhaustedError), repr(error)
            assert _PHRASE in str(error) and "memory_limit" in str(error), str(error)
        acked = sum(writer.acked for writer in writers)
        stored = client.server_info(timeout=10)["t"].current_size
        # What is stored fits the budget, and nearly fills it.
        assert stored <= acked
        assert stored * _ITEM <= _BUDGET, (stored, acked)
        assert stored * _ITEM > _BUDGET // 2, (stored, acked)
        used = _metric(metrics_port, "reverb_tf_memory_used_bytes")
        assert _BUDGET - 8 * _ITEM <= used <= _BUDGET + 8 * _ITEM, used
        assert _metric(metrics_port, "reverb_tf_memory_refusals_total") >= len(errors)
        assert _metric(metrics_port, "process_resident_memory_bytes") < limit
        assert sampled > 0
        print(
            f"budget {_BUDGET >> 20} MiB, address space {limit >> 20} MiB: {acked} items "
            f"acknowledged, {len(errors)} refused, {stored} stored, budget used "
            f"{used / 2**20:.1f} MiB, RSS "
            f"{_metric(metrics_port, 'process_resident_memory_bytes') / 2**20:.0f} MiB; "
            f"first refusal: {errors[0]}"
        )

        # A waiting insert goes in once deletes make room.
        waiting_writer = client.trajectory_writer(
            num_keep_alive_refs=1, rate_limiter_timeout_ms=60_000
        )
        done = threading.Event()

        def insert_one():
            waiting_writer.append([np.zeros(_ITEM, dtype=np.uint8) + 7])
            waiting_writer.create_item("t", 1.0, waiting_writer.history[0][-1:])
            waiting_writer.flush()
            done.set()

        thread = threading.Thread(target=insert_one, daemon=True)
        thread.start()
        while _metric(metrics_port, "reverb_tf_memory_waiting_calls") == 0:
            assert thread.is_alive() and not done.is_set(), "the insert did not wait"
            time.sleep(0.02)
        keys = {int(next(client.sample("t", emit_timesteps=False)).info.key) for _ in range(40)}
        client.mutate_priorities("t", deletes=sorted(keys))
        assert done.wait(30), "the waiting insert did not go in after deletes made room"
        thread.join()
        assert process.poll() is None, "the server died"
    finally:
        process.kill()
        stderr = process.communicate()[1]
    assert "ran out of memory" not in stderr and "terminate called" not in stderr, stderr


_ARENA_HEAP = 64 << 20  # what glibc maps for each heap of an arena beyond the main one


def _arena_heaps(pid: int) -> int:
    """How many 64 MiB glibc arena heaps process `pid` has mapped.

    A heap is an anonymous mapping at a 64 MiB-aligned address whose
    read-write part and the reserved (no-access) rest after it span exactly
    64 MiB; thread stacks (8 MiB) and mmap'd blocks do not look like that.
    """
    spans = []
    for line in pathlib.Path(f"/proc/{pid}/maps").read_text().splitlines():
        fields = line.split()
        start, end = (int(x, 16) for x in fields[0].split("-"))
        spans.append((start, end, fields[1], len(fields) > 5))
    heaps = 0
    for i, (start, end, perms, named) in enumerate(spans):
        if named or start % _ARENA_HEAP or not perms.startswith("rw"):
            continue
        size = end - start
        if i + 1 < len(spans) and spans[i + 1][0] == end and spans[i + 1][2].startswith("---"):
            size += spans[i + 1][1] - spans[i + 1][0]
        heaps += size == _ARENA_HEAP
    return heaps


def _serve_busy_clients(address: str, clients: int = 8, items: int = 200) -> None:
    """`clients` threads, each with a client of its own, insert and sample at once."""

    def work(seed):
        client = reverb.Client(address)
        with client.trajectory_writer(num_keep_alive_refs=1) as writer:
            for i in range(items):
                writer.append([np.full(64, seed * items + i, np.int64)])
                writer.create_item("t", 1.0, writer.history[0][-1:])
        for _ in client.sample("t", num_samples=items, emit_timesteps=False):
            pass

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
        assert not thread.is_alive(), "a client did not finish"


@pytest.mark.parametrize("arena_max", [None, "1"])
def test_the_server_binary_keeps_to_one_malloc_arena_per_core(
    start_server, server_binary, arena_max, monkeypatch
):
    """Each arena reserves 64 MiB of address space, which RLIMIT_AS counts."""
    if arena_max is None:
        monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    else:
        monkeypatch.setenv("MALLOC_ARENA_MAX", arena_max)
    process, port = start_server(
        server_binary, "--config=" + uniform_table_config(max_size=100_000)
    )
    try:
        _serve_busy_clients(f"localhost:{port}")
        heaps = _arena_heaps(process.pid)
        # The main arena lives on the brk heap; the others map one heap each
        # (this workload holds a few MB, far below a heap's 64 MiB).
        arenas = 1 if arena_max else max(2, os.cpu_count())
        assert heaps <= arenas - 1, heaps
        if arena_max is None:
            assert heaps >= 1, "no second arena: the check above would not see a cap missing"
        assert process.poll() is None, "the server died"
    finally:
        process.kill()
        process.communicate()
