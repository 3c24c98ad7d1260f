# SPDX-License-Identifier: Apache-2.0
"""The write-ahead log: SIGKILL under concurrent writers loses no acknowledged item.

The server is the `reverb_tf_server` binary with --wal_dir and a checkpoint
directory (periodic checkpoints truncate the log under load). Its table
samples the item of highest priority (MaxHeap), which lets the test walk
the table: an updater samples the top item and sinks it below every new one
(priority -value), and after each restart the test drains the table top
down, reading every item with its priority, and deletes it. Each item's
value is unique, so what is read back is compared value by value with what
the server acknowledged.
"""

import random
import re
import subprocess
import threading
import time

import numpy as np
import pytest

import reverb_tf as reverb
from integration import port_outside_ephemeral_range

_CONFIG = (
    'port: {port} tables {{ table_name: "t" sampler {{ heap {{ min_heap: false }} }} '
    "remover {{ fifo: true }} max_size: 1000000 rate_limiter {{ samples_per_insert: 1 "
    "min_size_to_sample: 1 min_diff: -1e300 max_diff: 1e300 }} }}"
)


def _start(server_binary, port, tmp_path, sync, checkpoint_interval="300ms"):
    process = subprocess.Popen(
        [
            server_binary,
            "--config=" + _CONFIG.format(port=port),
            f"--checkpoint_dir={tmp_path / 'checkpoints'}",
            f"--checkpoint_interval={checkpoint_interval}",
            f"--wal_dir={tmp_path / 'wal'}",
            f"--wal_sync={sync}",
            "--wal_sync_interval=5ms",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = process.stdout.readline()
    if "on port" not in line:
        process.kill()
        pytest.fail(f"server did not start: {line!r} {process.stderr.read()}")
    return process


class _Load:
    """Writers and an updater against one server, recording what was acknowledged."""

    def __init__(self, address, first_value, writers=3):
        self.address = address
        self.acked = set()  # values whose insert was acknowledged
        self.created = set()  # values an insert was attempted for
        self.acked_priority = {}  # value -> priority of its last acknowledged update
        self.tried_priority = {}  # value -> every priority an update tried
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._write, args=(first_value + w * 10**6,), daemon=True)
            for w in range(writers)
        ]
        self.threads.append(threading.Thread(target=self._update, daemon=True))
        for thread in self.threads:
            thread.start()

    def _write(self, value):
        try:
            writer = reverb.Client(self.address).trajectory_writer(num_keep_alive_refs=1)
            while not self.stop.is_set():
                batch = list(range(value, value + 10))
                value += 10
                for v in batch:
                    writer.append([np.int64(v)])
                    with self.lock:
                        self.created.add(v)
                    writer.create_item("t", 1e12 + v, writer.history[0][-1:])
                writer.flush()  # returns once the server acknowledged them all
                with self.lock:
                    self.acked.update(batch)
                time.sleep(0.02)  # a few thousand items a round keep the drain short
        except reverb.errors.ReverbError:
            pass  # the server was killed

    def _update(self):
        client = reverb.Client(self.address)
        try:
            while not self.stop.is_set():
                try:
                    sample = next(
                        client.sample("t", emit_timesteps=False, rate_limiter_timeout_ms=200)
                    )
                except reverb.errors.DeadlineExceededError:
                    continue  # nothing written yet
                value = int(sample.data[0][0])
                priority = -float(value)  # below every item still to come
                with self.lock:
                    self.tried_priority.setdefault(value, set()).add(priority)
                client.mutate_priorities("t", updates={int(sample.info.key): priority})
                with self.lock:
                    self.acked_priority[value] = priority
        except (reverb.errors.ReverbError, StopIteration):
            pass

    def join(self):
        self.stop.set()
        for thread in self.threads:
            thread.join(30)


def _drain(address):
    """Every item of the table as value -> priority, emptying it."""
    client = reverb.Client(address)
    size = client.server_info(timeout=10)["t"].current_size
    items = {}
    for _ in range(size):
        sample = next(client.sample("t", emit_timesteps=False, rate_limiter_timeout_ms=2000))
        value = int(sample.data[0][0])
        assert value not in items, f"value {value} read twice"
        items[value] = sample.info.priority
        client.mutate_priorities("t", deletes=[int(sample.info.key)])
    assert client.server_info(timeout=10)["t"].current_size == 0
    return items


def test_sigkill_under_concurrent_writers_loses_no_acknowledged_item(server_binary, tmp_path):
    rng = random.Random(1234)
    port = port_outside_ephemeral_range()
    address = f"localhost:{port}"
    policies = ["every_write", "every_n_ms", "none"]
    rounds, checked, updates_checked = 9, 0, 0
    process = _start(server_binary, port, tmp_path, policies[0])
    try:
        for round_index in range(rounds):
            load = _Load(address, first_value=round_index * 10**8)
            time.sleep(rng.uniform(0.3, 1.0))
            process.kill()  # SIGKILL: no shutdown, no final checkpoint
            process.wait()
            load.join()
            assert load.acked, "nothing was acknowledged before the kill"
            process = _start(server_binary, port, tmp_path, policies[(round_index + 1) % 3])
            items = _drain(address)
            missing = sorted(load.acked - set(items))
            assert not missing, (
                f"round {round_index}: {len(missing)} acknowledged items lost, e.g. {missing[:5]}"
            )
            assert set(items) <= load.created, "an item nobody inserted"
            for value, priority in items.items():
                tried = load.tried_priority.get(value, set())
                if value in load.acked_priority:
                    # Its acknowledged update, or a later one in flight at the kill.
                    assert priority in tried, (value, priority, tried)
                    updates_checked += 1
                else:
                    assert priority == 1e12 + value or priority in tried, (value, priority)
            checked += len(load.acked)
            print(
                f"round {round_index} ({policies[round_index % 3]}): {len(load.acked)} "
                f"acknowledged items and {len(load.acked_priority)} updates, all back"
            )
    finally:
        process.kill()
        process.wait()
    print(
        f"{rounds} kills, {checked} acknowledged items checked, "
        f"{updates_checked} acknowledged priority updates checked"
    )
    assert checked > 1000 and updates_checked > 100


def test_a_torn_log_recovers_up_to_the_last_good_record_with_a_warning(server_binary, tmp_path):
    port = port_outside_ephemeral_range()
    address = f"localhost:{port}"
    # No periodic checkpoint: everything is in the log alone.
    process = _start(server_binary, port, tmp_path, "every_write", checkpoint_interval="1h")
    try:
        for batch in range(5):  # five commits: five records
            with reverb.Client(address).trajectory_writer(num_keep_alive_refs=1) as writer:
                for v in range(batch * 10, batch * 10 + 10):
                    writer.append([np.int64(v)])
                    writer.create_item("t", 1e12 + v, writer.history[0][-1:])
                writer.flush()
    finally:
        process.kill()
        process.wait()
    files = sorted((tmp_path / "wal").glob("wal-*.log"))
    newest = files[-1]
    newest.write_bytes(newest.read_bytes()[:-7])  # the last record torn
    process = _start(server_binary, port, tmp_path, "every_write", checkpoint_interval="1h")
    try:
        values = set(_drain(address))
        # Every record but the torn one: at least 40 of the 50 items.
        assert len(values) >= 40 and values <= set(range(50)), sorted(values)
        assert set(range(len(values))) == values  # a prefix: nothing after the damage
    finally:
        process.kill()
        _, stderr = process.communicate()
    assert re.search(r"WARNING: the write-ahead log .* is damaged: .*entry \d+", stderr), stderr
    assert "Writing a checkpoint now" in stderr
    # The log started clean: the damaged file is gone with the checkpoint.
    assert newest not in list((tmp_path / "wal").glob("wal-*.log"))


def test_in_process_server_with_a_log_restarts_with_every_item_and_reports_it(tmp_path):
    def table():
        return reverb.Table(
            "t",
            reverb.selectors.Prioritized(1.0),
            reverb.selectors.Fifo(),
            1000,
            reverb.rate_limiters.MinSize(1),
        )

    def server():
        return reverb.Server(
            [table()],
            checkpointer=reverb.checkpointers.DefaultCheckpointer(str(tmp_path / "checkpoints")),
            wal=reverb.checkpointers.WriteAheadLog(
                str(tmp_path / "wal"), sync="every_n_ms", sync_interval_ms=5
            ),
        )

    first = server()
    client = reverb.Client(f"localhost:{first.port}")
    with client.trajectory_writer(num_keep_alive_refs=1) as writer:
        for v in range(30):
            writer.append([np.int64(v)])
            writer.create_item("t", 1.0, writer.history[0][-1:])
    client.checkpoint()
    with client.trajectory_writer(num_keep_alive_refs=1) as writer:
        for v in range(30, 50):
            writer.append([np.int64(v)])
            writer.create_item("t", 2.0, writer.history[0][-1:])

    def metric(name):
        return int(re.search(rf"^{name} (\d+)", first.metrics_text(), re.M).group(1))

    assert metric("reverb_tf_wal_entries_total") >= 100  # 50 items and their chunks
    deadline = time.monotonic() + 10  # every_n_ms syncs within 5 ms of a write
    while metric("reverb_tf_wal_syncs_total") < 1:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    first.stop()
    second = server()
    try:
        replay = second.wal_replay
        assert replay["damage"] == "" and replay["entries"] >= 20, replay
        info = reverb.Client(f"localhost:{second.port}").server_info()["t"]
        assert info.current_size == 50
    finally:
        second.stop()


def test_a_log_needs_a_lasting_checkpointer_and_a_known_policy(tmp_path):
    table = reverb.Table(
        "t",
        reverb.selectors.Uniform(),
        reverb.selectors.Fifo(),
        10,
        reverb.rate_limiters.MinSize(1),
    )
    with pytest.raises(ValueError, match="checkpointer"):
        reverb.Server([table], wal=reverb.checkpointers.WriteAheadLog(str(tmp_path)))
    with pytest.raises(ValueError, match="every_write"):
        reverb.checkpointers.WriteAheadLog(str(tmp_path), sync="sometimes")
    # A temporary checkpointer given explicitly: the native server refuses
    # it as it refuses the one a Server makes by default.
    with pytest.raises(ValueError, match="outlives the process"):
        reverb.Server(
            [table],
            checkpointer=reverb.checkpointers.TempDirCheckpointer(),
            wal=reverb.checkpointers.WriteAheadLog(str(tmp_path)),
        )


def test_the_log_defaults_are_the_native_servers(tmp_path):
    # Settings left out are not sent: the native WalOptions' defaults (one
    # definition, which the binding and the binary's flags read) apply.
    log = reverb.checkpointers.WriteAheadLog(str(tmp_path / "wal"))
    assert log.native_options() == {"wal_dir": str(tmp_path / "wal")}
    table = reverb.Table.queue("q", 10)
    checkpointer = reverb.checkpointers.DefaultCheckpointer(str(tmp_path / "checkpoints"))
    with reverb.Server([table], checkpointer=checkpointer, wal=log) as server:
        client = reverb.Client(f"localhost:{server.port}")
        client.insert(np.int32(1), {"q": 1.0})
        assert client.server_info()["q"].current_size == 1
