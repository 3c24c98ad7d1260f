# SPDX-License-Identifier: Apache-2.0
"""Clients in the server's process reach its tables directly (local_server.h).

The behaviour of both paths is tested by the modules that set BOTH_TRANSPORTS;
these tests prove which path a call took: the server counts every RPC it
serves (reverb_tf_rpc_duration_seconds_count), its tables count samples and
updates whichever way they came.
"""

import queue

import numpy as np
import pytest
import tensorflow as tf

import reverb_tf as reverb
from integration import TOKENS, make_server, metric_value, scrape_metrics, table  # noqa: F401 (fixture)
from integration import native_stacks
from integration import write_from_child

READS = ("SampleStream", "MutatePriorities", "ServerInfo", "Reset")
WRITES = ("InsertStream",)


def _table():
    return table(signature={"x": tf.TensorSpec([], tf.float32)})


def _rpc_counts(server):
    samples, _ = scrape_metrics(server.metrics_port)
    counts = {
        method: samples.get(("reverb_tf_rpc_duration_seconds_count", (("method", method),)), 0.0)
        for method in READS + WRITES
    }
    counts["samples"] = metric_value(samples, "reverb_tf_table_samples_total", table="t")
    counts["updates"] = metric_value(samples, "reverb_tf_table_priority_updates_total", table="t")
    return counts


def _fill(client, n=20):
    with client.trajectory_writer(num_keep_alive_refs=1) as writer:
        for i in range(n):
            writer.append({"x": np.float32(i)})
            writer.create_item("t", 1.0, {"x": writer.history["x"][-1]})


def _read_every_way(address, client):
    """Samples 3 + 3 + 4 items, updates 2 priorities and resets, through each client path."""
    keys = [int(s.info.key) for s in client.sample("t", num_samples=3, emit_timesteps=False)]
    client.mutate_priorities("t", updates={keys[0]: 2.0})
    assert set(client.server_info()) == {"t"}
    dataset = reverb.TrajectoryDataset.from_table_signature(
        address, "t", max_in_flight_samples_per_worker=3
    )
    taken = list(dataset.take(3))
    tf_client = reverb.TFClient(address)
    tf_client.update_priorities(
        "t", tf.constant([keys[1]], tf.uint64), tf.constant([3.0], tf.float64)
    )
    for _ in range(4):
        tf_client.sample("t", [tf.float32])
    client.reset("t")
    return len(taken)


def test_calls_to_a_server_of_this_process_skip_grpc(make_server):
    server = make_server(_table(), metrics_port=0)
    address = f"localhost:{server.port}"
    client = reverb.Client(address)
    _fill(client)
    before = _rpc_counts(server)
    assert before["InsertStream"] == 0  # the writer's stream skipped gRPC too
    assert client.server_info()["t"].current_size == 20

    assert _read_every_way(address, client) == 3
    after = _rpc_counts(server)
    for method in READS:
        assert after[method] == before[method], method
    # 3 Client.sample + 3 dataset + 4 TFClient.sample, at least (the dataset
    # may have asked for more than it handed out).
    assert after["samples"] - before["samples"] >= 10
    assert after["updates"] - before["updates"] == 2


def test_with_the_switch_off_the_same_calls_go_over_grpc(make_server, over_grpc):
    server = make_server(_table(), metrics_port=0)
    address = f"localhost:{server.port}"
    client = reverb.Client(address)
    _fill(client)
    before = _rpc_counts(server)
    # The histogram counts InsertStream messages, not streams: the writer's
    # 20 items share one message unless appending them outlasts its linger
    # (it did under qemu-user, which sent two).
    assert before["InsertStream"] >= 1
    _read_every_way(address, client)
    after = _rpc_counts(server)
    for method in READS:
        assert after[method] > before[method], method
    assert after["updates"] - before["updates"] == 2


def test_a_server_that_asks_for_tokens_is_reached_over_grpc_only(make_server, pki):
    server = make_server(_table(), metrics_port=0, auth_tokens_file=str(pki / "tokens.txt"))
    address = f"localhost:{server.port}"
    _fill(reverb.Client(address, token=TOKENS["writer"]))
    # No back door: without a token the in-process client is refused as a
    # remote one is.
    with pytest.raises(reverb.errors.ReverbError, match="(?i)token|unauthenticated"):
        reverb.Client(address).server_info()
    with pytest.raises(reverb.errors.ReverbError, match="(?i)token|unauthenticated"):
        list(reverb.Client(address).sample("t", num_samples=1))
    before = _rpc_counts(server)
    reverb.Client(address, token=TOKENS["writer"]).sample("t", num_samples=1).__next__()
    assert _rpc_counts(server)["SampleStream"] == before["SampleStream"] + 1


def test_after_stop_in_process_calls_fail_as_remote_ones_do(make_server):
    server = make_server(table())
    client = reverb.Client(f"localhost:{server.port}")
    _fill(client, 3)
    server.stop()
    with pytest.raises(reverb.errors.ReverbError):
        client.mutate_priorities("t", updates={1: 1.0})
    with pytest.raises(reverb.errors.ReverbError):
        client.server_info()
    with pytest.raises(reverb.errors.ReverbError):
        list(client.sample("t", num_samples=1))


def test_a_writer_of_a_stopped_server_fails_and_a_blocked_one_wakes(make_server):
    server = make_server(reverb.Table.queue("q", 2), table())
    client = reverb.Client(f"localhost:{server.port}")
    writer = client.trajectory_writer(1)
    blocked = client.trajectory_writer(1)
    for i in range(3):  # the third waits for room in the queue
        blocked.append({"x": np.float32(i)})
        blocked.create_item("q", 1.0, {"x": blocked.history["x"][-1]})
    writer.append({"x": np.float32(0)})
    writer.create_item("t", 1.0, {"x": writer.history["x"][-1]})
    writer.flush()
    with pytest.raises(reverb.errors.DeadlineExceededError):
        blocked.flush(timeout_ms=200)
    server.stop()
    # The blocked insert was woken by the stop, and the writer's next
    # message meets a stopped server: errors, not hangs.
    with pytest.raises(reverb.errors.ReverbError):
        blocked.flush(timeout_ms=10_000)
    with pytest.raises(reverb.errors.ReverbError):
        writer.append({"x": np.float32(1)})
        writer.create_item("t", 1.0, {"x": writer.history["x"][-1]})
        writer.flush(timeout_ms=10_000)
    writer.close()
    blocked.close()


def test_closing_a_writer_whose_items_wait_gives_up_after_the_grace(make_server):
    import time  # pylint: disable=g-import-not-at-top

    server = make_server(reverb.Table.queue("q", 1))
    client = reverb.Client(f"localhost:{server.port}")
    writer = client.trajectory_writer(1)
    for i in range(3):
        writer.append({"x": np.float32(i)})
        writer.create_item("q", 1.0, {"x": writer.history["x"][-1]})
    start = time.monotonic()
    writer.close()
    assert time.monotonic() - start < 10
    # The server goes on: the stored item is there, the others were dropped.
    assert client.server_info()["q"].current_size == 1


def test_a_forked_child_that_collects_its_parents_garbage_lives(tmp_path):
    # A child of fork() has copies of the parent's native objects without
    # their threads. Collecting one there (a stopped server and a client in
    # a reference cycle the parent had let go) crashed the child with
    # SIGSEGV: seen twice in full suites as a multiprocessing child that
    # never reported, its collector having run inside Queue.put().
    import gc  # pylint: disable=g-import-not-at-top
    import os  # pylint: disable=g-import-not-at-top

    class Cycle:
        pass

    gc.collect()
    gc.disable()
    try:
        garbage = Cycle()
        garbage.self = garbage
        garbage.server = reverb.Server(
            [table()], memory_limit=4 << 20, spill_dir=str(tmp_path / "spill")
        )
        garbage.client = reverb.Client(f"localhost:{garbage.server.port}")
        garbage.writer = garbage.client.trajectory_writer(1)
        garbage.server.stop()
        del garbage
        pid = os.fork()
        if pid == 0:  # the child
            gc.enable()
            gc.collect()
            os._exit(0)
        _, status = os.waitpid(pid, 0)
    finally:
        gc.enable()
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, (
        f"the child ended with status {status:#x}"
        + (f" (signal {os.WTERMSIG(status)})" if os.WIFSIGNALED(status) else "")
    )


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_child_process_reaches_the_real_server_or_refuses(make_server, method):
    # A fork()ed child inherits a copy of the server (without its threads)
    # and gRPC state it cannot use: writes there once landed in the copy and
    # vanished. Now the child is refused at once; a spawned child writes
    # over gRPC into the real server.
    import multiprocessing  # pylint: disable=g-import-not-at-top

    server = make_server(table())
    client = reverb.Client(f"localhost:{server.port}")
    context = multiprocessing.get_context(method)
    results = context.Queue()
    child = context.Process(target=write_from_child, args=(server.port, 5, results))
    child.start()
    try:
        outcome = results.get(timeout=120)
    except queue.Empty:
        # A child that never reports: where its threads wait tells why (a
        # dead child has none; its exit code says how it died).
        stacks = native_stacks(child.pid)
        child.kill()
        pytest.fail(
            f"the {method} child reported nothing within 120 s (exit code "
            f"{child.exitcode}); its threads:\n{stacks}"
        )
    child.join(60)
    if method == "fork":
        assert outcome[:2] == ("error", "FailedPreconditionError"), outcome
        assert "spawn" in outcome[2]
        assert client.server_info()["t"].current_size == 0
    else:
        assert outcome[0] == "ok", outcome
        assert client.server_info()["t"].current_size == 5
