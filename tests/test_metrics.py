# SPDX-License-Identifier: Apache-2.0
"""The Prometheus metrics endpoint: scraped over HTTP and read with prometheus_client's parser."""

import gc
import re
import signal
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

import reverb_tf
from integration import scrape_metrics as scrape, metric_value as value, table, uniform_table_config

# What these tests check is the RPC path's (streams, RPC metrics).
pytestmark = pytest.mark.usefixtures("over_grpc")


@pytest.fixture
def served():
    tables = [
        reverb_tf.Table(
            "prio",
            sampler=reverb_tf.selectors.Prioritized(1.0),
            remover=reverb_tf.selectors.Fifo(),
            max_size=5,
            rate_limiter=reverb_tf.rate_limiters.MinSize(1),
        ),
        reverb_tf.Table.queue('odd "name" \\ here', 10),
    ]
    with reverb_tf.Server(tables, metrics_port=0) as server:
        yield server, reverb_tf.Client(f"localhost:{server.port}")


def test_values_move_with_traffic(served):
    server, client = served
    before, types = scrape(server.metrics_port)
    assert value(before, "reverb_tf_table_size", table="prio") == 0
    assert value(before, "reverb_tf_table_max_size", table="prio") == 5
    assert types["reverb_tf_table_inserts"] == "counter"
    assert types["reverb_tf_rpc_duration_seconds"] == "histogram"
    assert value(before, "process_resident_memory_bytes") > 10 << 20

    with client.trajectory_writer(num_keep_alive_refs=1) as writer:
        for step in range(8):  # 8 inserts into a table of 5: 3 evicted
            writer.append({"x": np.full(256, step, np.float32)})
            writer.create_item("prio", 1.0, {"x": writer.history["x"][-1]})
        writer.flush()
        during, _ = scrape(server.metrics_port)
        assert value(during, "reverb_tf_active_streams") == 1
    samples = list(client.sample("prio", num_samples=4, emit_timesteps=False))
    keys = [int(s.info.key) for s in samples]
    while len(set(keys)) < 2:  # sampling may repeat an item; two distinct ones are needed
        keys += [
            int(s.info.key) for s in client.sample("prio", num_samples=1, emit_timesteps=False)
        ]
    updated, deleted = list(dict.fromkeys(keys))[:2]
    client.mutate_priorities("prio", updates={updated: 3.0}, deletes=[deleted])
    client.server_info()
    after, _ = scrape(server.metrics_port)

    assert value(after, "reverb_tf_table_inserts_total", table="prio") == 8
    assert value(after, "reverb_tf_table_samples_total", table="prio") == len(keys)
    assert value(after, "reverb_tf_table_priority_updates_total", table="prio") == 1
    assert value(after, "reverb_tf_table_removed_total", table="prio", reason="evicted") == 3
    assert value(after, "reverb_tf_table_removed_total", table="prio", reason="deleted") == 1
    assert value(after, "reverb_tf_table_size", table="prio") == 4
    assert value(after, "reverb_tf_table_samples_per_insert", table="prio") == len(keys) / 8
    # 8 steps of 1 KiB went in; the samples came out, each chunk once per
    # response (samples of one item share it).
    received = value(after, "reverb_tf_received_bytes_total")
    sent = value(after, "reverb_tf_sent_bytes_total")
    assert 8 * 1024 <= received - value(before, "reverb_tf_received_bytes_total") < 8 * 1024 * 2
    assert len(set(keys)) * 1024 <= sent - value(before, "reverb_tf_sent_bytes_total") < 8 * 1024
    assert value(after, "reverb_tf_chunks") >= 4
    for method in ["InsertStream", "SampleStream", "MutatePriorities", "ServerInfo"]:
        count = value(after, "reverb_tf_rpc_duration_seconds_count", method=method)
        assert count > value(before, "reverb_tf_rpc_duration_seconds_count", method=method)
        assert (
            value(after, "reverb_tf_rpc_duration_seconds_bucket", method=method, le="+Inf") == count
        )
    # The client keeps its priority-mutation stream open for its next calls.
    assert value(after, "reverb_tf_active_streams") == 1
    # Priorities: the 5 items left all have priority 1 but one (3.0): the
    # cumulative counts by power of two say so.
    assert value(after, "reverb_tf_table_items_by_priority", table="prio", le="0.5") == 0
    assert value(after, "reverb_tf_table_items_by_priority", table="prio", le="1") == 3
    assert value(after, "reverb_tf_table_items_by_priority", table="prio", le="4") == 4
    assert value(after, "reverb_tf_table_items_by_priority", table="prio", le="+Inf") == 4
    assert (
        value(
            after,
            "reverb_tf_table_info",
            table="prio",
            sampler="SelectorOptions(kind=Prioritized, priority_exponent=1)",
            remover="SelectorOptions(kind=Fifo)",
            max_times_sampled="0",
            signature="no",
        )
        == 1
    )
    # The name with a quote and a backslash survives the round trip.
    assert value(after, "reverb_tf_table_max_size", table='odd "name" \\ here') == 10


def test_a_clients_mutation_stream_lasts_as_long_as_the_client(served):
    server, _ = served
    streams = lambda: value(scrape(server.metrics_port)[0], "reverb_tf_active_streams")
    before = streams()
    clients = [reverb_tf.Client(f"localhost:{server.port}") for _ in range(2)]
    for _ in range(3):
        for client in clients:
            client.mutate_priorities("prio", updates={12345: 1.0})
    assert streams() == before + 2  # one each, however many calls
    del clients, client
    gc.collect()
    deadline = time.monotonic() + 10
    while streams() != before:
        assert time.monotonic() < deadline, streams()
        time.sleep(0.05)


def test_rate_limiter_waits_and_checkpoints_are_reported(served):
    server, client = served
    queue = 'odd "name" \\ here'
    # A sampler that waits for the empty queue until an item arrives.
    waiter = threading.Thread(
        target=lambda: list(client.sample(queue, num_samples=1, emit_timesteps=False))
    )
    waiter.start()
    deadline = time.monotonic() + 10
    while (
        value(
            scrape(server.metrics_port)[0],
            "reverb_tf_table_rate_limiter_waiting_calls",
            table=queue,
            side="sample",
        )
        != 1
    ):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.2)
    client.insert(np.float32(1), {queue: 1.0})
    waiter.join(timeout=10)
    client.insert(np.float32(2), {"prio": 1.0})
    client.checkpoint()
    samples, _ = scrape(server.metrics_port)
    assert (
        value(samples, "reverb_tf_table_rate_limiter_waiting_calls", table=queue, side="sample")
        == 0
    )
    assert (
        value(
            samples,
            "reverb_tf_table_rate_limiter_blocked_seconds_total",
            table=queue,
            side="sample",
        )
        >= 0.2
    )
    assert (
        value(samples, "reverb_tf_table_removed_total", table=queue, reason="max_times_sampled")
        == 1
    )
    assert value(samples, "reverb_tf_checkpoints_total", outcome="ok") == 1
    assert value(samples, "reverb_tf_checkpoints_total", outcome="failed") == 0
    assert value(samples, "reverb_tf_last_checkpoint_items") == 1
    assert value(samples, "reverb_tf_last_checkpoint_bytes") > 0
    assert value(samples, "reverb_tf_last_checkpoint_duration_seconds") > 0
    assert value(samples, "reverb_tf_rpc_duration_seconds_count", method="Checkpoint") == 1


def test_only_get_of_metrics_and_dashboard_is_served(served):
    server, _ = served
    with pytest.raises(urllib.error.HTTPError) as not_found:
        urllib.request.urlopen(f"http://localhost:{server.metrics_port}/other", timeout=10)
    assert not_found.value.code == 404
    request = urllib.request.Request(
        f"http://localhost:{server.metrics_port}/metrics", data=b"x", method="POST"
    )
    with pytest.raises(urllib.error.HTTPError) as not_allowed:
        urllib.request.urlopen(request, timeout=10)
    assert not_allowed.value.code == 405
    assert 'reverb_tf_table_size{table="prio"} 0' in server.metrics_text()
    with urllib.request.urlopen(f"http://localhost:{server.metrics_port}/", timeout=10) as page:
        assert page.headers["Content-Type"].startswith("text/html")
        assert "<title>reverb_tf server</title>" in page.read().decode()


def test_no_endpoint_unless_asked_and_a_taken_port_is_a_clear_error(served):
    server, _ = served
    with reverb_tf.Server([reverb_tf.Table.queue("q", 1)]) as quiet:
        assert quiet.metrics_port is None
        assert "reverb_tf_table_size" in quiet.metrics_text()
    with pytest.raises(reverb_tf.errors.UnavailableError, match="metrics: cannot listen"):
        reverb_tf.Server([reverb_tf.Table.queue("q", 1)], metrics_port=server.metrics_port)


def test_localhost_metrics_are_served_on_both_loopbacks_or_not_at_all():
    # Scrapers of localhost:P try [::1]:P first; another process holding it
    # must not answer for us.
    import socket  # pylint: disable=g-import-not-at-top

    with reverb_tf.Server([reverb_tf.Table.queue("q", 1)], metrics_port=0) as server:
        for host in ("127.0.0.1", "[::1]"):
            url = f"http://{host}:{server.metrics_port}/metrics"
            with urllib.request.urlopen(url, timeout=10) as response:
                assert b"reverb_tf_table_size" in response.read()
    stranger = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    stranger.bind(("::1", 0))
    stranger.listen()
    try:
        with pytest.raises(
            reverb_tf.errors.UnavailableError,
            match=r"metrics: cannot listen .*127.0.0.1 and \[::1\]",
        ):
            reverb_tf.Server(
                [reverb_tf.Table.queue("q", 1)], metrics_port=stranger.getsockname()[1]
            )
    finally:
        stranger.close()


def test_the_binary_serves_metrics(server_binary):
    config = uniform_table_config()
    import subprocess  # pylint: disable=g-import-not-at-top

    process = subprocess.Popen(
        [server_binary, f"--config={config}", "--metrics_port=0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        metrics_line = process.stderr.readline()
        port = int(re.search(r"metrics on http://localhost:(\d+)/metrics", metrics_line).group(1))
        service_port = int(re.search(r"on port (\d+)", process.stdout.readline()).group(1))
        reverb_tf.Client(f"localhost:{service_port}").insert(np.float32(1), {"t": 1.0})
        samples, _ = scrape(port)
        assert value(samples, "reverb_tf_table_inserts_total", table="t") == 1
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0


def _insert_messages(server) -> float:
    """InsertStream messages the server has carried to their end."""
    samples, _ = scrape(server.metrics_port)
    return value(samples, "reverb_tf_rpc_duration_seconds_count", method="InsertStream")


def test_small_items_wait_for_an_unacknowledged_message_and_share_the_next():
    # Nagle's rule in the writer: while a message waits for its
    # acknowledgement (here a full queue holds it), small items created
    # after it go together, a message at most every 10 ms, where each would
    # otherwise go alone once its 1 ms linger was over. The histogram of
    # InsertStream counts messages.
    with reverb_tf.Server([reverb_tf.Table.queue("q", 1), table("t")], metrics_port=0) as server:
        client = reverb_tf.Client(f"localhost:{server.port}")
        client.insert(np.float32(-1), {"q": 1.0})
        writer = client.trajectory_writer(num_keep_alive_refs=1)
        writer.append({"x": np.float32(0)})
        writer.create_item("q", 1.0, writer.history["x"][-1])
        time.sleep(0.1)  # sent, and waiting on the server for room
        before = _insert_messages(server)
        items = 40
        start = time.monotonic()
        for i in range(items):
            writer.append({"x": np.float32(i)})
            writer.create_item("t", 1.0, writer.history["x"][-1])
            time.sleep(0.002)
        elapsed = time.monotonic() - start
        # Room in the queue: the held message and all after it are stored.
        sample = next(client.sample("q", 1, emit_timesteps=False))
        assert sample.data[0].item() == -1
        writer.flush(timeout_ms=10_000)
        messages = _insert_messages(server) - before
        assert client.server_info()["t"].current_size == items
        # The held message, one per 10 ms hold in the loop, the flush's.
        assert messages <= 1 + elapsed / 0.010 + 1, (messages, elapsed)
        assert messages < items / 2, (messages, elapsed)
        writer.close()
