# SPDX-License-Identifier: Apache-2.0
"""The disk tier: a table many times its memory budget, with its chunk bytes in `spill_dir`.

Frames of 84x84x4 uint8 (28 KB each, every one different) are written as
3-step overlapping items under a budget of a few MB, so most chunks live
only on disk. Every sampled item must hold exactly its frames; evictions
and resets free the disk; a damaged spill file fails the sample with
DATA_LOSS naming the file and the item while the server goes on; a full
spill disk refuses writers with RESOURCE_EXHAUSTED naming the directory
while what is held is still sampled exactly; a checkpoint
links the spill files instead of rewriting their bytes, and a restart
takes them back without reading them; the records' checksum is CRC-32C
whichever instruction (SSE4.2, ARMv8 CRC32) or table computes it, so a
checkpoint moves between machines; and the binary, killed with SIGKILL
after a checkpoint, comes back from it and its write-ahead log with every
acknowledged item.
"""

import ctypes
import gc
import os
import pathlib
import signal
import subprocess
import time
from typing import Optional

import numpy as np
import pytest

import reverb_tf as reverb
from integration import port_outside_ephemeral_range, scrape_metrics

_SHAPE = (84, 84, 4)
_FRAME_BYTES = int(np.prod(_SHAPE))
_BUDGET = 4 << 20


def _frame(step: int) -> np.ndarray:
    """A frame that is unlike every other step's (its first bytes hold the step)."""
    frame = np.random.default_rng(step).integers(0, 256, _SHAPE, dtype=np.uint8)
    frame.reshape(-1)[:8] = np.frombuffer(np.int64(step).tobytes(), np.uint8)
    return frame


def _fifo_table(max_size: int = 1_000_000, max_times_sampled: int = 0) -> reverb.Table:
    return reverb.Table(
        "t",
        sampler=reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(),
        max_size=max_size,
        rate_limiter=reverb.rate_limiters.MinSize(1),
        max_times_sampled=max_times_sampled,
    )


def _write(
    client: reverb.Client, first: int, last: int, timeout_ms: int = 60_000, length: int = 3
) -> int:
    """Writes steps first..last-1 and an item of `length` steps ending at each.

    Returns:
      The number of items written.
    """
    items = 0
    with client.trajectory_writer(
        num_keep_alive_refs=length, rate_limiter_timeout_ms=timeout_ms
    ) as writer:
        for step in range(first, last):
            writer.append({"frame": _frame(step), "step": np.int64(step)})
            if step - first >= length - 1:
                writer.create_item(
                    "t",
                    1.0,
                    {
                        "frame": writer.history["frame"][-length:],
                        "step": writer.history["step"][-length:],
                    },
                )
                items += 1
            if step % 64 == 0:
                writer.flush()
    return items


def _check_item(frames: np.ndarray, steps: np.ndarray) -> None:
    """An item's steps are consecutive and each frame is its step's, to the byte."""
    assert list(np.diff(steps)) == [1] * (len(steps) - 1), steps
    for frame, step in zip(frames, steps):
        np.testing.assert_array_equal(frame, _frame(int(step)))


def _check_samples(client: reverb.Client, n: int) -> int:
    """Samples n items and checks every frame's bytes; returns how many were checked."""
    checked = 0
    for sample in client.sample("t", num_samples=n, emit_timesteps=False):
        _check_item(*sample.data)
        checked += 1
    return checked


def _spilling_server(
    spill_dir: pathlib.Path,
    table: Optional[reverb.Table] = None,
    checkpoints: Optional[pathlib.Path] = None,
) -> reverb.Server:
    """A server of `table` (a FIFO one by default) under _BUDGET, spilling to `spill_dir`."""
    return reverb.Server(
        [table or _fifo_table()],
        memory_limit=_BUDGET,
        spill_dir=str(spill_dir),
        checkpointer=(
            reverb.checkpointers.DefaultCheckpointer(str(checkpoints)) if checkpoints else None
        ),
    )


def _crc32c_reference(data: bytes) -> int:
    """CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) a bit at a time."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def test_record_checksums_are_crc32c_on_this_machine():
    """The checksum a checkpoint keeps must not depend on the CPU that wrote it.

    The core picks SSE4.2's or ARMv8's CRC32C instruction when the CPU has
    it, else a table; each path must give CRC-32C for every length (the
    rounds of three blocks, the 8-byte loop and the byte tail).
    """
    library = ctypes.CDLL(str(pathlib.Path(reverb.__file__).parent / "libreverb_tf.so"))
    crc32c = library["_ZN9reverb_tf6Crc32cEPKcm"]
    crc32c.restype = ctypes.c_uint32
    crc32c.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    assert crc32c(b"123456789", 9) == 0xE3069283  # The check value of the standard.
    rng = np.random.default_rng(7)
    for size in [0, 1, 7, 8, 9, 15, 16, 63, 64, 65, 1000, 1536, 1545, 4099, 28224]:
        data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        assert crc32c(data, size) == _crc32c_reference(data), size


def test_a_table_ten_times_its_budget_keeps_exact_data_and_reset_frees_disk(tmp_path):
    spill_dir = tmp_path / "spill"
    server = _spilling_server(spill_dir)
    try:
        client = reverb.Client(f"localhost:{server.port}")
        steps = 1500  # 42 MB of frames: ten times the budget
        assert _write(client, 0, steps) == steps - 2
        assert client.server_info()["t"].current_size == steps - 2
        stats = server.spill_stats()
        assert stats["dir"] == str(spill_dir)
        assert stats["ram_bytes"] <= _BUDGET, stats
        # Nearly every frame is on disk, each once (chunks are shared by the
        # three items that reference them).
        assert stats["disk_bytes"] >= (steps * _FRAME_BYTES) - _BUDGET, stats
        assert stats["disk_bytes"] <= steps * _FRAME_BYTES, stats
        # The files are what the server counts (which the spill thread may
        # still be adding to).
        on_disk = sum(p.stat().st_size for p in spill_dir.glob("segment-*.spill"))
        assert stats["disk_file_bytes"] <= on_disk <= server.spill_stats()["disk_file_bytes"]

        assert _check_samples(client, 400) == 400
        stats = server.spill_stats()
        assert stats["disk_reads"] > 100, stats
        # Whole frames (the counters are read while prefetching goes on).
        assert stats["disk_read_bytes"] % _FRAME_BYTES == 0, stats
        assert stats["ram_bytes"] <= _BUDGET + 3 * _FRAME_BYTES, stats

        client.reset("t")
        # The spill thread may hold a chunk's last reference for a moment.
        deadline = time.monotonic() + 10
        while server.spill_stats()["disk_file_bytes"] and time.monotonic() < deadline:
            time.sleep(0.01)
        stats = server.spill_stats()
        assert stats["disk_bytes"] == 0 and stats["disk_file_bytes"] == 0, stats
        assert sum(p.stat().st_size for p in spill_dir.glob("segment-*.spill")) == 0
    finally:
        server.stop()
    # The files go with the server and the last of its chunks.
    del server, client
    gc.collect()
    assert not list(spill_dir.glob("segment-*.spill"))


def test_eviction_keeps_disk_bounded(tmp_path):
    server = _spilling_server(tmp_path / "spill", _fifo_table(max_size=200))
    try:
        client = reverb.Client(f"localhost:{server.port}")
        _write(client, 0, 2000)  # 56 MB through a table that holds 200 items
        assert client.server_info()["t"].current_size == 200
        stats = server.spill_stats()
        assert stats["spilled_bytes"] > 30 * _BUDGET // 4, stats
        assert stats["disk_bytes"] <= 202 * _FRAME_BYTES, stats
        assert stats["disk_file_bytes"] <= stats["disk_bytes"] + 2 * (1 << 20), stats
        assert _check_samples(client, 200) == 200
    finally:
        server.stop()


def test_a_damaged_spill_file_fails_the_sample_naming_file_and_item(tmp_path):
    spill_dir = tmp_path / "spill"
    server = _spilling_server(spill_dir)
    try:
        client = reverb.Client(f"localhost:{server.port}")
        _write(client, 0, 1000)
        segments = sorted(spill_dir.glob("segment-*.spill"))
        assert segments
        for segment in segments:
            with open(segment, "r+b") as f:
                size = segment.stat().st_size
                for offset in range(1000, size, _FRAME_BYTES):
                    f.seek(offset)
                    f.write(b"\xff\x00\xff")
        with pytest.raises(reverb.errors.DataLossError) as raised:
            for _ in range(50):
                _check_samples(client, 64)
        message = str(raised.value)
        assert "segment-" in message and str(spill_dir) in message, message
        assert "item " in message and "checksum" in message, message
        # The server is still up, and items in RAM still sample.
        assert client.server_info()["t"].current_size == 998
    finally:
        server.stop()


def _check_batch(batch: reverb.ReplaySample) -> int:
    """Checks every frame of a NumpyDataset batch; returns its number of items."""
    frames = next(c for c in batch.data if c.ndim == 5)
    steps = next(c for c in batch.data if c.ndim == 2)
    assert frames.shape == (len(batch.info.key), 3, *_SHAPE), frames.shape
    for item_frames, item_steps in zip(frames, steps):
        _check_item(item_frames, item_steps)
    return len(batch.info.key)


def test_numpy_batches_read_spilled_frames_exactly_and_a_cut_file_is_data_loss(tmp_path):
    """NumpyDataset reads frames on disk straight into its batches' rows.

    They come from the segment file's mapping, so a file cut short from
    outside must fail the batch with DATA_LOSS naming the file and the item
    (not kill the process on the mapping's missing pages), after the items
    sampled before it are handed on, each exact.
    """
    spill_dir = tmp_path / "spill"
    server = _spilling_server(spill_dir)
    try:
        address = f"localhost:{server.port}"
        client = reverb.Client(address)
        _write(client, 0, 1000)
        reads = server.spill_stats()["disk_reads"]
        iterator = iter(reverb.NumpyDataset(address, "t", 64, prefetch=0))
        assert sum(_check_batch(next(iterator)) for _ in range(5)) == 320
        assert server.spill_stats()["disk_reads"] - reads > 3 * 64, server.spill_stats()

        for segment in spill_dir.glob("segment-*.spill"):
            os.truncate(segment, segment.stat().st_size // 2)
        with pytest.raises(reverb.errors.DataLossError) as raised:
            for _ in range(50):
                _check_batch(next(iterator))
        message = str(raised.value)
        assert "ends at" in message and str(spill_dir) in message, message
        assert "item " in message, message
        assert client.server_info()["t"].current_size == 998
    finally:
        server.stop()


def test_a_full_spill_disk_refuses_writers_naming_it_and_reads_go_on(small_disk):
    spill_dir = small_disk / "spill"
    server = _spilling_server(spill_dir)
    try:
        client = reverb.Client(f"localhost:{server.port}")
        # An 8 MiB disk and a 4 MiB budget hold about 12 MiB: 430 frames.
        with pytest.raises(reverb.errors.ResourceExhaustedError) as raised:
            _write(client, 0, 2000, timeout_ms=1500)
        message = str(raised.value)
        assert "memory budget is used up" in message, message
        assert str(spill_dir) in message and "No space left" in message, message
        assert server.spill_stats()["last_error"], server.spill_stats()
        held = client.server_info()["t"].current_size
        assert 200 < held < 500, held
        assert _check_samples(client, 200) == 200
    finally:
        server.stop()


def test_random_deletes_are_compacted_and_the_disk_stays_bounded(tmp_path):
    # Each item is one frame, sampled at most once: sampling deletes at
    # random, leaving every spill segment partly live.
    server = _spilling_server(tmp_path / "spill", _fifo_table(max_times_sampled=1))
    try:
        client = reverb.Client(f"localhost:{server.port}")
        assert _write(client, 0, 1200, length=1) == 1200  # 34 MB
        for _ in client.sample("t", num_samples=900, emit_timesteps=False):
            pass
        left = client.server_info()["t"].current_size
        assert left <= 300, left
        # The slack kept: half the live bytes or two 1 MiB segments.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            stats = server.spill_stats()
            if stats["disk_file_bytes"] <= max(
                stats["disk_bytes"] * 3 // 2, stats["disk_bytes"] + (2 << 20)
            ) + (1 << 20):
                break
            time.sleep(0.05)
        stats = server.spill_stats()
        assert stats["disk_bytes"] <= left * _FRAME_BYTES, stats
        assert stats["disk_file_bytes"] <= max(
            stats["disk_bytes"] * 3 // 2, stats["disk_bytes"] + (2 << 20)
        ) + (1 << 20), stats
        # Far less than the 34 MB written: the sparse segments were moved out.
        assert stats["disk_file_bytes"] < 16 << 20, stats
        # Counted as moves, not as spills or reads: every byte read is a
        # sample's one-frame chunk, every byte spilled a frame written once.
        assert stats["compactions"] >= 1, stats
        assert stats["compacted_bytes"] >= _FRAME_BYTES, stats
        assert stats["disk_read_bytes"] == stats["disk_reads"] * _FRAME_BYTES, stats
        assert stats["spilled_bytes"] <= 1200 * _FRAME_BYTES, stats
        assert _check_samples(client, left) == left
    finally:
        server.stop()


def _mapped_spill_files(spill_dir: pathlib.Path) -> int:
    """How many of this process's mappings are of files in `spill_dir`."""
    with open("/proc/self/maps") as maps:
        return sum(str(spill_dir) in line for line in maps)


@pytest.mark.parametrize("spill_mmap", [True, False])
def test_spilled_chunks_are_read_through_mappings_unless_told_not_to(tmp_path, spill_mmap):
    """`spill_mmap=False` reads with pread: no spill file is mapped, and the frames are the same."""
    spill_dir = tmp_path / "spill"
    server = reverb.Server(
        [_fifo_table()], memory_limit=_BUDGET, spill_dir=str(spill_dir), spill_mmap=spill_mmap
    )
    try:
        address = f"localhost:{server.port}"
        _write(reverb.Client(address), 0, 600)
        iterator = iter(reverb.NumpyDataset(address, "t", 64, prefetch=0))
        assert sum(_check_batch(next(iterator)) for _ in range(3)) == 192
        assert server.spill_stats()["disk_reads"] > 0
        assert (_mapped_spill_files(spill_dir) > 0) == spill_mmap
    finally:
        server.stop()


def test_compaction_on_a_full_disk_is_reported_apart_and_writers_go_on(small_disk):
    """A compaction that cannot write is not a spill that cannot: writers are not refused.

    Random deletes leave the spill segments mostly dead, so compaction tries
    to move their live records while another file has taken the disk's last
    byte. Its failure must show in `compaction_error` (naming the directory)
    and the metric, not in `last_error`, which makes writers wait; once
    there is room again, a pass succeeds and clears it.
    """
    spill_dir = small_disk / "spill"
    server = reverb.Server(
        [_fifo_table(max_times_sampled=1)],
        memory_limit=_BUDGET,
        spill_dir=str(spill_dir),
        metrics_port=0,
    )
    filler = small_disk / "filler"
    try:
        client = reverb.Client(f"localhost:{server.port}")
        assert _write(client, 0, 330, length=1) == 330  # 9.3 MB, 6 MB of it on disk
        # The spill thread is done (a spill failing on the full disk would
        # be a writer's concern, not this test's).
        spilled, quiet_since = -1, time.monotonic()
        while time.monotonic() - quiet_since < 0.3:
            if server.spill_stats()["spilled_bytes"] != spilled:
                spilled, quiet_since = server.spill_stats()["spilled_bytes"], time.monotonic()
            time.sleep(0.02)
        with open(filler, "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
            except OSError:
                pass  # the disk is full
        for _ in client.sample("t", num_samples=250, emit_timesteps=False):
            pass
        deadline = time.monotonic() + 20
        while not server.spill_stats()["compaction_error"] and time.monotonic() < deadline:
            time.sleep(0.05)
        stats = server.spill_stats()
        assert "No space left" in stats["compaction_error"], stats
        assert str(spill_dir) in stats["compaction_error"], stats
        assert stats["last_error"] == "", stats
        samples, _ = scrape_metrics(server.metrics_port)
        assert samples[("reverb_tf_spill_compaction_failing", ())] == 1
        assert samples[("reverb_tf_spill_failing", ())] == 0
        # What is left samples exactly.
        left = client.server_info()["t"].current_size
        assert left == 80, left
        filler.unlink()
        deadline = time.monotonic() + 20
        while server.spill_stats()["compaction_error"] and time.monotonic() < deadline:
            time.sleep(0.05)
        stats = server.spill_stats()
        assert stats["compaction_error"] == "" and stats["compactions"] >= 1, stats
        assert _check_samples(client, left) == left
    finally:
        server.stop()


def test_a_checkpoint_links_the_spill_files_and_a_restart_reads_none(tmp_path):
    server = _spilling_server(tmp_path / "spill", checkpoints=tmp_path / "checkpoints")
    try:
        client = reverb.Client(f"localhost:{server.port}")
        _write(client, 0, 1000)  # 28 MB under a 4 MiB budget
        on_disk = server.spill_stats()["disk_bytes"]
        assert on_disk > 20 << 20
        checkpoint = pathlib.Path(client.checkpoint())
        # The data file holds the items and the chunks in RAM; the rest
        # stays in the spill files, which the checkpoint links to.
        data = (checkpoint / "replay.rtfckpt").stat().st_size
        assert data < _BUDGET + (1 << 20), data
        linked = sorted((checkpoint / "spill").glob("segment-*.spill"))
        assert sum(p.stat().st_size for p in linked) >= on_disk
        assert linked and all(p.stat().st_nlink == 2 for p in linked)
        # Writers go on; the eviction of the checkpoint's items afterwards
        # removes the spill directory's names, never the checkpoint's bytes.
        _write(client, 1000, 1300)
        client.reset("t")
        # The spill thread may hold a chunk's last reference for a moment.
        deadline = time.monotonic() + 10
        while any(p.stat().st_nlink > 1 for p in linked) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert all(p.stat().st_nlink == 1 for p in linked)
    finally:
        server.stop()

    # The same spill directory at once: the stopped server gave it up,
    # though its tables (and their chunks) live on in `first`. The files
    # are taken in, not read.
    first = server
    start = time.monotonic()
    server = _spilling_server(tmp_path / "spill", checkpoints=tmp_path / "checkpoints")
    restart_s = time.monotonic() - start
    try:
        client = reverb.Client(f"localhost:{server.port}")
        assert client.server_info()["t"].current_size == 998
        # The first server's end leaves the files of the same names alone.
        names = sorted((tmp_path / "spill").glob("segment-*.spill"))
        assert names
        del first
        gc.collect()
        assert sorted((tmp_path / "spill").glob("segment-*.spill")) == names
        stats = server.spill_stats()
        assert stats["disk_reads"] == 0 and stats["ram_bytes"] < _BUDGET, stats
        assert stats["disk_bytes"] >= on_disk, stats
        assert restart_s < 30, restart_s  # a bound against reading 28 MB, not a benchmark
        assert _check_samples(client, 300) == 300
        assert server.spill_stats()["disk_reads"] > 0
    finally:
        server.stop()


def test_the_binary_killed_comes_back_from_its_log_with_every_item(
    tmp_path: pathlib.Path, server_binary
):
    port, metrics_port = port_outside_ephemeral_range(), port_outside_ephemeral_range()
    config = (
        f'port: {port} tables {{ table_name: "t" sampler {{ uniform: true }} '
        "remover { fifo: true } max_size: 1000000 rate_limiter { "
        "samples_per_insert: 1 min_size_to_sample: 1 min_diff: -1e300 max_diff: 1e300 } }"
    )
    command = [
        server_binary,
        "--config=" + config,
        f"--checkpoint_dir={tmp_path / 'checkpoints'}",
        "--checkpoint_interval=1h",
        f"--wal_dir={tmp_path / 'wal'}",
        f"--memory_limit={_BUDGET}",
        f"--spill_dir={tmp_path / 'spill'}",
        f"--metrics_port={metrics_port}",
    ]

    def start():
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                reverb.Client(f"localhost:{port}").server_info(timeout=1)
                return process
            except reverb.errors.ReverbError:
                assert process.poll() is None, process.stderr.read().decode()
                time.sleep(0.1)
        process.kill()
        pytest.fail("the server did not come up")

    process = start()
    try:
        client = reverb.Client(f"localhost:{port}")
        _write(client, 0, 800)  # 22 MB under a 4 MiB budget
        samples, _ = scrape_metrics(metrics_port)
        assert samples[("reverb_tf_spill_disk_bytes", ())] > 10 * _BUDGET // 4
        # A checkpoint that links the spill files, then items only the log
        # holds.
        client.checkpoint()
        samples, _ = scrape_metrics(metrics_port)
        assert samples[("reverb_tf_last_checkpoint_linked_bytes", ())] > 10 * _BUDGET // 4
        _write(client, 800, 1000)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        process = start()
        client = reverb.Client(f"localhost:{port}")
        assert client.server_info()["t"].current_size == 798 + 198
        assert _check_samples(client, 300) == 300
    finally:
        process.kill()
        process.wait(timeout=30)
