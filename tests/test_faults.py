# SPDX-License-Identifier: Apache-2.0
"""Fault tests: a server killed with SIGKILL under load, and clients killed
mid-stream.

The server is the `reverb_tf_server` binary in a child process, so that it
can really die (and its threads and fds can be counted). Every client call
caught by the kill must raise a clear error naming the server within a
bounded time; a server restarted on the same port must serve the old
`Client` again; clients killed with open streams must leave the server's
threads and fds where they were.
"""

import re
import signal
import subprocess
import sys
import textwrap
import threading
import time

import grpc
import numpy as np
import pytest
import tensorflow as tf

import reverb_tf as reverb
from reverb_tf.cc.proto import service_pb2 as pb
from integration import listening_addresses
from integration import native_stacks
from integration import port_outside_ephemeral_range
from integration import proc_count
from integration import read_line

# How long a call caught by the kill may take to raise. Measured about 1.5 s
# (the channel's reconnect attempt); the bound leaves room for a loaded CI.
_RAISES_WITHIN_S = 10.0

_CONFIG = """
port: {port}
tables {{ table_name: "t" sampler {{ uniform: true }} remover {{ fifo: true }} max_size: 100
  rate_limiter {{ samples_per_insert: 1 min_size_to_sample: 1 min_diff: -1e300 max_diff: 1e300 }} }}
tables {{ table_name: "q" sampler {{ fifo: true }} remover {{ fifo: true }} max_size: 2
  max_times_sampled: 1
  rate_limiter {{ samples_per_insert: 1 min_size_to_sample: 1 min_diff: 0 max_diff: 2 }} }}
"""


def _start(server_binary, port=0):
    process = subprocess.Popen(
        [server_binary, "--config=" + _CONFIG.format(port=port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    match = re.search(r"on port (\d+)", read_line(process.stdout, "server readiness line"))
    if match is None:
        process.kill()
        pytest.fail(f"server did not start: {process.stderr.read()}")
    return process, int(match.group(1))


class _Outcome:
    """What a call running in a thread ended with, and when."""

    def __init__(self, call):
        self.error = None
        self.ended_at = None
        self.returned = False
        self._thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self._thread.start()

    def _run(self, call):
        try:
            call()
            self.returned = True
        except Exception as e:  # pylint: disable=broad-except
            self.error = e
        self.ended_at = time.monotonic()

    def join(self, timeout):
        self._thread.join(timeout)


def test_sigkill_fails_blocked_calls_clearly_and_a_restart_serves_the_old_client(server_binary):
    # Restarted below on the same port: see port_outside_ephemeral_range.
    process, port = _start(server_binary, port_outside_ephemeral_range())
    address = f"localhost:{port}"
    first_addresses = listening_addresses(port)
    client = reverb.Client(address)
    client.server_info(timeout=10)
    client.mutate_priorities("t", updates={1: 1.0})  # its mutation stream is open now

    def blocked_sample():  # "t" is empty: waits for its first item
        next(client.sample("t", emit_timesteps=False))

    def flushing_writer():  # "q" admits 2 items: the flush waits for a sampler
        writer = client.trajectory_writer(num_keep_alive_refs=1)
        for step in range(5):
            writer.append([np.float32(step)])
            writer.create_item("q", 1.0, writer.history[0][-1:])
        writer.flush()

    dataset = reverb.TrajectoryDataset(
        address, "t", tf.float32, tf.TensorShape([]), max_in_flight_samples_per_worker=2
    )
    iterator = iter(dataset)

    def dataset_iterator():
        next(iterator)

    outcomes = {
        name: _Outcome(call)
        for name, call in [
            ("sampler", blocked_sample),
            ("writer", flushing_writer),
            ("dataset", dataset_iterator),
        ]
    }
    deadline = time.monotonic() + 20
    while client.server_info(timeout=10)["q"].current_size < 2:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.5)  # all three are blocked now
    assert not any(outcome.ended_at for outcome in outcomes.values())

    process.kill()
    process.wait()
    killed_at = time.monotonic()
    for name, outcome in outcomes.items():
        outcome.join(_RAISES_WITHIN_S + 5)
        assert outcome.ended_at is not None, f"{name} still blocked after the kill"
        assert not outcome.returned, name
        assert isinstance(
            outcome.error, (reverb.errors.UnavailableError, tf.errors.UnavailableError)
        ), (name, outcome.error)
        assert outcome.ended_at - killed_at < _RAISES_WITHIN_S, name
        print(
            f"{name}: raised {type(outcome.error).__name__} "
            f"{outcome.ended_at - killed_at:.2f} s after the kill"
        )
    assert address in str(outcomes["sampler"].error)
    assert address in str(outcomes["writer"].error)

    # Meanwhile calls fail fast and clearly, with the server down.
    with pytest.raises(reverb.errors.DeadlineExceededError):
        client.server_info(timeout=1)

    restarted, restarted_port = _start(server_binary, port)
    try:
        assert restarted_port == port
        # Listening where the first server did (if a socket of a reconnecting
        # client held the port, it would not be).
        assert listening_addresses(port) == first_addresses
        assert client.server_info(timeout=10)["t"].current_size == 0  # nothing checkpointed
        client.insert(np.float32(7), {"t": 1.0})
        key = int(next(client.sample("t", emit_timesteps=False)).info.key)
        # The mutation stream went down with the first server: the update
        # still lands (over a unary call, until a new stream opens).
        client.mutate_priorities("t", updates={key: 5.0})
        sample = next(client.sample("t", emit_timesteps=False))
        assert sample.data[0] == 7 and sample.info.priority == 5.0
        with client.trajectory_writer(num_keep_alive_refs=1) as writer:
            writer.append([np.float32(8)])
            writer.create_item("t", 1.0, writer.history[0][-1:])
        assert client.server_info(timeout=10)["t"].current_size == 2
        # A new dataset: its fail-fast stream may first meet the channel
        # still backing off from the kill (at most 2 s), so it is retried.
        deadline = time.monotonic() + _RAISES_WITHIN_S
        while True:
            try:
                sample = next(
                    reverb.TrajectoryDataset(
                        address,
                        "t",
                        tf.float32,
                        tf.TensorShape([1]),
                        max_in_flight_samples_per_worker=2,
                    )
                    .take(1)
                    .as_numpy_iterator()
                )
                break
            except tf.errors.UnavailableError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        assert float(sample.data[0]) in (7.0, 8.0)
    finally:
        restarted.kill()
        restarted.wait()


_MANY_STREAMS_CLIENT = textwrap.dedent("""
    import faulthandler, signal, sys, threading
    import numpy as np
    import reverb_tf as reverb
    faulthandler.register(signal.SIGUSR1)  # the test asks for stacks if this hangs
    client = reverb.Client(sys.argv[1])
    writers, samplers = [], []
    for i in range(100):
        writer = client.trajectory_writer(num_keep_alive_refs=2)
        writer.append([np.float32(i)])
        writer.create_item("t", 1.0, writer.history[0][-1:])
        writer.flush()
        writer.append([np.float32(i)])  # a step sent, no item yet: the stream stays open
        writers.append(writer)
    def sample_forever():
        for _ in client.sample("q", num_samples=10**9, emit_timesteps=False):
            pass
    for _ in range(100):
        threading.Thread(target=sample_forever, daemon=True).start()
    print("streams open", flush=True)
    threading.Event().wait()
""")


def _active_insert_streams(address: str) -> int:
    """The server's open InsertStreams, from a raw ServerInfo call."""
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary(
            "/reverb_tf.proto.ReplayService/ServerInfo",
            request_serializer=pb.ServerInfoRequest.SerializeToString,
            response_deserializer=pb.ServerInfoResponse.FromString,
        )
        return call(pb.ServerInfoRequest(), timeout=10).active_insert_streams


def _hung(what, server, clients=(), client_logs=()):
    """Fails the test with where the server's threads and the clients' threads wait."""
    for client in clients:
        if client.poll() is None:
            client.send_signal(signal.SIGUSR1)  # faulthandler: Python stacks to its log
    time.sleep(1)
    logs = []
    for log in client_logs:
        log.seek(0)
        logs.append(log.read()[-20000:])
    pytest.fail(
        f"{what}\n--- server threads:\n{native_stacks(server.pid)}\n"
        + "".join(f"--- client {i} stderr:\n{log}\n" for i, log in enumerate(logs))
    )


def _within(seconds, call, what, server, clients=(), client_logs=()):
    """Runs `call` with a bound on its time; returns its result."""
    result = []
    outcome = _Outcome(lambda: result.append(call()))
    outcome.join(seconds)
    if outcome.ended_at is None:
        _hung(f"{what} still blocked after {seconds} s", server, clients, client_logs)
    if outcome.error is not None:
        raise outcome.error
    return result[0]


def test_clients_killed_mid_stream_leave_the_servers_threads_and_fds_at_baseline(
    server_binary, tmp_path
):
    process, port = _start(server_binary)
    address = f"localhost:{port}"
    logs = [open(tmp_path / f"client{i}.log", "w+") for i in range(2)]
    clients = []
    try:
        reverb.Client(address).server_info(timeout=10)
        baseline = {what: proc_count(process.pid, what) for what in ("task", "fd")}
        clients = [
            subprocess.Popen(
                [sys.executable, "-c", _MANY_STREAMS_CLIENT, address],
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
            for log in logs
        ]
        for i, client in enumerate(clients):
            line = _within(
                120, client.stdout.readline, f"client {i}'s setup", process, clients, logs
            )
            if line.strip() != "streams open":
                _hung(f"client {i} said {line!r}", process, clients, logs)
        # All 400 streams open: a thread per sample stream, and the 200
        # writers' streams (served from one thread) counted by the server.
        deadline = time.monotonic() + 20
        while (
            proc_count(process.pid, "task") < baseline["task"] + 190
            or _active_insert_streams(address) < 200
        ):
            assert time.monotonic() < deadline, (
                proc_count(process.pid, "task"),
                _active_insert_streams(address),
            )
            time.sleep(0.1)
        for client in clients:
            client.send_signal(signal.SIGKILL)
            client.wait()
        deadline = time.monotonic() + 20
        while any(proc_count(process.pid, what) > baseline[what] + 5 for what in baseline):
            if time.monotonic() > deadline:
                _hung(
                    f"threads and fds above baseline {baseline}: "
                    f"{ {w: proc_count(process.pid, w) for w in baseline} }",
                    process,
                )
            time.sleep(0.1)
        # Every killed sampler's call ends (the last few within the
        # cancellation watcher's check interval): none is left to take the
        # item inserted below.
        client = reverb.Client(address)
        while client.server_info(timeout=10)["q"].rate_limiter_info.sample_stats.pending > 0:
            if time.monotonic() > deadline:
                _hung("killed clients' sample calls still waiting on table 'q'", process)
            time.sleep(0.1)
        # Still serving, and the killed writers' flushed items are kept.
        assert client.server_info(timeout=10)["t"].current_size == 100
        _within(30, lambda: client.insert(np.float32(1), {"q": 1.0}), "insert", process)
        sample = _within(
            30, lambda: next(client.sample("q", emit_timesteps=False)), "sample", process
        )
        assert sample.data[0] == 1
    finally:
        for client in clients:
            client.kill()
            client.wait()
        for log in logs:
            log.close()
        process.kill()
        process.wait()
