# SPDX-License-Identifier: Apache-2.0
"""Several servers behind one client target (docs/scale_out.md), without Ray.

Real servers on loopback: in-process `reverb_tf.Server`s and, for the kill
test, `reverb_tf_server` binaries. Each shard's items carry values of its
own range (shard i: i * 1000 + j), so a sample tells which shard it came from.
"""

import logging
import re
import subprocess
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

import reverb_tf as reverb
from integration import port_outside_ephemeral_range

SIGNATURE = {"x": tf.TensorSpec([], tf.int32)}


def _table(name="t", sampler=None, max_size=10_000, **kwargs):
    return reverb.Table(
        name,
        sampler or reverb.selectors.Uniform(),
        reverb.selectors.Fifo(),
        max_size,
        reverb.rate_limiters.MinSize(1),
        signature=SIGNATURE,
        **kwargs,
    )


def _write(address, values, table="t", priority=1.0):
    with reverb.Client(address).trajectory_writer(num_keep_alive_refs=1) as writer:
        for value in values:
            writer.append({"x": np.int32(value)})
            writer.create_item(table, priority, {"x": writer.history["x"][-1]})
        writer.flush()


@pytest.fixture
def shards():
    """Three in-process servers of tables "t" (uniform) and "p" (prioritized)."""
    servers = [
        reverb.Server([_table(), _table("p", reverb.selectors.Prioritized(1.0))]) for _ in range(3)
    ]
    yield [f"localhost:{s.port}" for s in servers], servers
    for server in servers:
        server.stop()


def test_targets_name_shards_as_lists_strings_and_address_lists(shards):
    addresses, servers = shards
    assert reverb.Client(addresses).shard_addresses == addresses
    assert reverb.Client(",".join(addresses)).server_address == ",".join(addresses)
    ipv4 = "ipv4:" + ",".join(f"127.0.0.1:{s.port}" for s in servers)
    assert reverb.Client(ipv4).shard_addresses == [f"ipv4:127.0.0.1:{s.port}" for s in servers]
    assert reverb.Client(addresses[0]).shard_addresses == addresses[:1]
    with pytest.raises(ValueError):
        reverb.Client([])
    with pytest.raises(reverb.errors.InvalidArgumentError):
        reverb.Client(addresses[0] + ",,")


def test_writers_spread_over_shards_and_info_adds_them_up(shards):
    addresses, _ = shards
    client = reverb.Client(addresses)
    for w in range(6):  # six writers of one client take the shards in turn
        with client.trajectory_writer(num_keep_alive_refs=1) as writer:
            for i in range(w + 1):
                writer.append({"x": np.int32(i)})
                writer.create_item("t", 1.0, {"x": writer.history["x"][-1]})
    by_shard = client.server_info_by_shard(timeout=10)
    assert list(by_shard) == addresses
    sizes = sorted(info["t"].current_size for info in by_shard.values())
    # Writers 1..6 (of 1..6 items): two per shard, in turn: {1,4}, {2,5}, {3,6}.
    assert sizes == [5, 7, 9]
    total = client.server_info(timeout=10)["t"]
    assert total.current_size == 21
    assert total.max_size == 30_000  # the capacity of all three
    assert total.rate_limiter_info.inserts == 21
    assert total.signature == SIGNATURE
    client.reset("t")
    assert all(
        info["t"].current_size == 0 for info in client.server_info_by_shard(timeout=10).values()
    )


def test_one_dataset_samples_every_shard_in_proportion_to_its_size(shards):
    addresses, _ = shards
    for i, count in enumerate([100, 200, 300]):
        _write(addresses[i], range(i * 1000, i * 1000 + count))
    dataset = reverb.ReverbDataset.from_table_signature(
        addresses, "t", max_in_flight_samples_per_worker=32
    ).batch(100)
    values = np.concatenate([b.data["x"].numpy() for b in dataset.take(60)])
    shares = np.bincount(values // 1000, minlength=3) / len(values)
    # 1/6, 1/3, 1/2 of 6000 samples: binomial deviations are below 0.01.
    np.testing.assert_allclose(shares, [1 / 6, 1 / 3, 1 / 2], atol=0.03)
    # Client.sample merges the same way.
    values = np.array(
        [
            s.data["x"]
            for s in reverb.Client(addresses).sample(
                "t", 3000, emit_timesteps=False, unpack_as_table_signature=True
            )
        ]
    )
    np.testing.assert_allclose(
        np.bincount(values // 1000, minlength=3) / 3000, [1 / 6, 1 / 3, 1 / 2], atol=0.04
    )


# Prioritized(1.0) table "p", by shard: the priority of item x = 10 * shard + i.
_SHARD_PRIORITIES = [[1.0, 2.0], [4.0], [8.0, 0.5, 0.0]]  # 0.0 is never chosen


def _check_merged_info(info, x):
    """`info` of item `x` is what one table holding all of _SHARD_PRIORITIES says."""
    every = [p for shard in _SHARD_PRIORITIES for p in shard]
    total = sum(every)
    priority = _SHARD_PRIORITIES[x // 10][x % 10]
    assert isinstance(info, reverb.SampleInfoWithStats)
    assert info.table_size == len(every)
    np.testing.assert_allclose(info.table_weight, total, rtol=1e-9)
    np.testing.assert_allclose(info.probability, priority / total, rtol=1e-9)
    np.testing.assert_allclose(info.min_probability, 0.5 / total, rtol=1e-9)
    np.testing.assert_allclose(info.importance_weight(1.0), 0.5 / priority, rtol=1e-9)


def test_sample_infos_are_those_of_one_table_holding_every_shards_items(shards):
    addresses, _ = shards
    for shard, priorities in enumerate(_SHARD_PRIORITIES):
        with reverb.Client(addresses[shard]).trajectory_writer(1) as writer:
            for i, priority in enumerate(priorities):
                writer.append({"x": np.int32(10 * shard + i)})
                writer.create_item("p", priority, {"x": writer.history["x"][-1]})
    seen = set()
    for sample in reverb.Client(addresses).sample(
        "p", 300, emit_timesteps=False, sampling_stats=True
    ):
        x = int(sample.data[0])
        seen.add(x)
        _check_merged_info(sample.info, x)
    assert seen == {0, 1, 10, 20, 21}
    dataset = reverb.TrajectoryDataset.from_table_signature(
        addresses, "p", max_in_flight_samples_per_worker=8, sampling_stats=True
    )
    seen = set()
    for sample in dataset.take(300):
        x = int(sample.data["x"])
        seen.add(x)
        _check_merged_info(reverb.SampleInfoWithStats(*[v.numpy() for v in sample.info]), x)
    assert seen == {0, 1, 10, 20, 21}


def test_priority_updates_from_a_sharded_dataset_reach_the_owning_shard_only(shards, caplog):
    addresses, _ = shards
    for i in range(3):
        _write(addresses[i], range(i * 1000, i * 1000 + 20), table="p")
    dataset = reverb.ReverbDataset.from_table_signature(
        addresses, "p", max_in_flight_samples_per_worker=16
    ).batch(30)
    tf_client = reverb.TFClient(addresses)

    @tf.function
    def raise_shard_one(batch):
        # Items of shard 1 get priority 100 + value; the others keep theirs.
        values = tf.cast(batch.data["x"], tf.float64)
        on_one = tf.equal(batch.data["x"] // 1000, 1)
        keys = tf.boolean_mask(batch.info.key, on_one)
        tf_client.update_priorities("p", keys, tf.boolean_mask(100.0 + values, on_one))
        return keys

    updated = set()
    for batch in dataset.take(20):
        updated.update(int(k) for k in raise_shard_one(batch).numpy())
    assert updated
    for i, address in enumerate(addresses):
        for sample in reverb.Client(address).sample(
            "p", 200, emit_timesteps=False, unpack_as_table_signature=True
        ):
            value = int(sample.data["x"])
            assert value // 1000 == i
            want = 100.0 + value if int(sample.info.key) in updated else 1.0
            assert sample.info.priority == want, (i, value, sample.info)
    # After those updates shard 1 dominates the merged sampling: its weight
    # went from 20 to about 20 * 1100.
    merged = [
        int(s.data["x"]) // 1000
        for s in reverb.Client(addresses).sample(
            "p", 500, emit_timesteps=False, unpack_as_table_signature=True
        )
    ]
    assert merged.count(1) > 450

    # A key that no shard holds is reported (logged), not silently dropped.
    with caplog.at_level(logging.WARNING):
        reverb.Client(addresses).mutate_priorities("p", updates={12345: 1.0})
    assert any(
        "no server of" in r.getMessage() and "skipped" in r.getMessage() for r in caplog.records
    ), [r.getMessage() for r in caplog.records]


def test_checkpoint_writes_one_checkpoint_per_shard(tmp_path):
    servers = [
        reverb.Server(
            [_table()],
            checkpointer=reverb.checkpointers.DefaultCheckpointer(str(tmp_path / f"shard-{i}")),
        )
        for i in range(2)
    ]
    try:
        addresses = [f"localhost:{s.port}" for s in servers]
        _write(addresses[0], range(3))
        _write(addresses[1], range(1000, 1005))
        paths = reverb.Client(addresses).checkpoint()
        assert isinstance(paths, list) and len(paths) == 2
        assert [p.startswith(str(tmp_path / f"shard-{i}")) for i, p in enumerate(paths)] == [
            True,
            True,
        ]
        # A single server still answers with one path, as dm-reverb does.
        assert isinstance(reverb.Client(addresses[0]).checkpoint(), str)
    finally:
        for server in servers:
            server.stop()
    restored = [
        reverb.Server(
            [_table()],
            checkpointer=reverb.checkpointers.DefaultCheckpointer(str(tmp_path / f"shard-{i}")),
        )
        for i in range(2)
    ]
    try:
        sizes = [
            reverb.Client(f"localhost:{s.port}").server_info()["t"].current_size for s in restored
        ]
        assert sizes == [3, 5]
    finally:
        for server in restored:
            server.stop()


def _active_streams(server):
    return int(re.search(r"^reverb_tf_active_streams (\d+)", server.metrics_text(), re.M).group(1))


def _wait_for_active_streams(server, want, timeout=10):
    deadline = time.monotonic() + timeout
    while _active_streams(server) != want and time.monotonic() < deadline:
        time.sleep(0.02)
    return _active_streams(server)


def test_num_workers_per_iterator_runs_that_many_streams_on_one_server():
    queue = reverb.Table.queue("q", 1000, signature=SIGNATURE)
    with reverb.Server([_table(), queue]) as server:
        address = f"localhost:{server.port}"
        _write(address, range(100))
        _write(address, range(100), table="q")
        dataset = reverb.ReverbDataset.from_table_signature(
            address, "t", max_in_flight_samples_per_worker=4, num_workers_per_iterator=4
        )
        iterator = iter(dataset)
        for _ in range(200):
            next(iterator)
        assert _wait_for_active_streams(server, 4) == 4
        del iterator
        assert _wait_for_active_streams(server, 0) == 0
        # A queue keeps one stream, and its order, whatever is asked.
        dataset = reverb.ReverbDataset.from_table_signature(
            address, "q", max_in_flight_samples_per_worker=1, num_workers_per_iterator=4
        )
        values = [int(s.data["x"]) for s in dataset.take(100)]
        assert values == list(range(100))


def _start_binary(server_binary, port, checkpoint_dir):
    config = (
        f'port: {port} tables {{ table_name: "t" sampler {{ uniform: true }} '
        "remover { fifo: true } max_size: 10000 rate_limiter { samples_per_insert: 1 "
        "min_size_to_sample: 1 min_diff: -1e300 max_diff: 1e300 } }"
    )
    process = subprocess.Popen(
        [server_binary, "--config=" + config, f"--checkpoint_dir={checkpoint_dir}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    match = re.search(r"on port (\d+)", process.stdout.readline())
    if match is None:
        process.kill()
        pytest.fail(f"server did not start: {process.stderr.read()}")
    return process


def test_a_killed_shard_process_restarts_from_its_checkpoint_and_clients_recover(
    server_binary, tmp_path
):
    ports = [port_outside_ephemeral_range() for _ in range(2)]
    processes = [
        _start_binary(server_binary, p, tmp_path / f"shard-{i}") for i, p in enumerate(ports)
    ]
    addresses = [f"localhost:{p}" for p in ports]
    try:
        for i, address in enumerate(addresses):
            _write(address, range(i * 1000, i * 1000 + 50))
        client = reverb.Client(addresses)
        client.checkpoint()
        dataset = reverb.TrajectoryDataset(
            addresses, "t", tf.int32, tf.TensorShape([]), max_in_flight_samples_per_worker=8
        )
        shard_counts = [0, 0]
        counts_lock = threading.Lock()
        stop = threading.Event()
        failure = []

        def learner():
            try:
                for sample in dataset:
                    with counts_lock:
                        shard_counts[1 if 1000 <= int(sample.data) < 2000 else 0] += 1
                    if stop.is_set():
                        return
            except Exception as e:  # pylint: disable=broad-except
                failure.append(e)

        def counts():
            with counts_lock:
                return list(shard_counts)

        def wait_until(predicate, timeout):
            deadline = time.monotonic() + timeout
            while not predicate():
                assert not failure, failure
                assert time.monotonic() < deadline
                time.sleep(0.05)

        thread = threading.Thread(target=learner, daemon=True)
        thread.start()
        wait_until(lambda: min(counts()) > 100, 30)
        # A writer of shard 1, connected before the kill.
        dead_writer = reverb.Client(addresses[1]).trajectory_writer(num_keep_alive_refs=1)
        dead_writer.append({"x": np.int32(1000)})
        dead_writer.create_item("t", 1.0, {"x": dead_writer.history["x"][-1]})
        dead_writer.flush()
        processes[1].kill()
        processes[1].wait()
        # The dataset goes on with shard 0 (no hang, no error).
        before = counts()
        wait_until(lambda: counts()[0] > before[0] + 500, 20)
        # The writer on the dead shard fails with a clear error.
        with pytest.raises(reverb.errors.UnavailableError, match=addresses[1]):
            dead_writer.append({"x": np.int32(1001)})
            dead_writer.create_item("t", 1.0, {"x": dead_writer.history["x"][-1]})
            dead_writer.flush()
        # New writers of the sharded client avoid the dead shard.
        for value in range(5000, 5004):
            with client.trajectory_writer(num_keep_alive_refs=1) as writer:
                writer.append({"x": np.int32(value)})
                writer.create_item("t", 1.0, {"x": writer.history["x"][-1]})
        assert reverb.Client(addresses[0]).server_info(timeout=10)["t"].current_size == 54
        # Restarted on its port, shard 1 has its checkpointed items back and
        # the dataset samples it again.
        processes[1] = _start_binary(server_binary, ports[1], tmp_path / "shard-1")
        assert reverb.Client(addresses[1]).server_info(timeout=10)["t"].current_size == 50
        # A new writer of the restarted shard works.
        _write(addresses[1], [1999])
        assert reverb.Client(addresses[1]).server_info(timeout=10)["t"].current_size == 51
        before = counts()
        wait_until(lambda: counts()[1] > before[1] + 100, 30)
        stop.set()
        thread.join(10)
        assert not failure, failure
    finally:
        for process in processes:
            process.kill()
            process.wait()
