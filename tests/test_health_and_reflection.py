# SPDX-License-Identifier: Apache-2.0
"""The standard gRPC health service and server reflection, beside the replay
service, in the in-process server and in the binary.

Checked with the ecosystem's own clients (grpcio-health-checking,
grpcio-reflection), as grpc_health_probe, Kubernetes probes and grpcurl would.
"""

import os
import pathlib
import queue
import signal
import subprocess
import threading
import time

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

import reverb_tf as reverb
from integration import port_outside_ephemeral_range
from integration import uniform_table_config

_REPLAY = "reverb_tf.proto.ReplayService"


def _table():
    return reverb.Table.queue("q", 10)


def _status(channel, service):
    stub = health_pb2_grpc.HealthStub(channel)
    return stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10).status


def test_serving_while_up_and_not_serving_once_stopping():
    server = reverb.Server([_table()])
    try:
        with grpc.insecure_channel(f"localhost:{server.port}") as channel:
            assert _status(channel, "") == health_pb2.HealthCheckResponse.SERVING
            assert _status(channel, _REPLAY) == health_pb2.HealthCheckResponse.SERVING
            with pytest.raises(grpc.RpcError) as unknown:
                _status(channel, "no.such.Service")
            assert unknown.value.code() == grpc.StatusCode.NOT_FOUND

            # A watcher (what a probe that streams does) sees the change.
            seen = queue.Queue()
            watch = health_pb2_grpc.HealthStub(channel).Watch(
                health_pb2.HealthCheckRequest(service=_REPLAY), timeout=30
            )

            def follow():
                try:
                    for response in watch:
                        seen.put(response.status)
                except grpc.RpcError as e:
                    seen.put(e.code())

            thread = threading.Thread(target=follow, daemon=True)
            thread.start()
            assert seen.get(timeout=10) == health_pb2.HealthCheckResponse.SERVING
            server.stop()
            assert seen.get(timeout=10) == health_pb2.HealthCheckResponse.NOT_SERVING
            watch.cancel()
    finally:
        server.stop()


def test_reflection_describes_the_replay_and_health_services():
    with (
        reverb.Server([_table()]) as server,
        grpc.insecure_channel(f"localhost:{server.port}") as channel,
    ):
        database = ProtoReflectionDescriptorDatabase(channel)
        services = set(database.get_services())
        assert {_REPLAY, "grpc.health.v1.Health"} <= services
        replay = database.FindFileContainingSymbol(_REPLAY)
        assert replay.package == "reverb_tf.proto"
        methods = {m.name for s in replay.service if s.name == "ReplayService" for m in s.method}
        assert {
            "InsertStream",
            "SampleStream",
            "MutatePriorities",
            "Reset",
            "ServerInfo",
            "Checkpoint",
        } <= methods


def test_the_binary_answers_health_probes(server_binary, start_server):
    config = (
        'port: 0 tables { table_name: "q" sampler { fifo: true } remover { fifo: true } '
        "max_size: 10 rate_limiter { samples_per_insert: 1 min_size_to_sample: 1 "
        "min_diff: 0 max_diff: 10 } }"
    )
    process, port = start_server(server_binary, "--config=" + config)
    try:
        with grpc.insecure_channel(f"localhost:{port}") as channel:
            assert _status(channel, "") == health_pb2.HealthCheckResponse.SERVING
            assert _status(channel, _REPLAY) == health_pb2.HealthCheckResponse.SERVING
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0


def test_not_serving_and_unavailable_while_a_checkpoint_loads(server_binary, tmp_path):
    # A checkpoint of 1M items takes about a second to load; meanwhile the
    # port is open, health says NOT_SERVING and replay calls UNAVAILABLE.
    port = port_outside_ephemeral_range()
    config = uniform_table_config(port, max_size=2_000_000)
    args = [server_binary, "--config=" + config, f"--checkpoint_dir={tmp_path}"]
    first = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "serving" in first.stdout.readline()
        client = reverb.Client(f"localhost:{port}")
        with client.trajectory_writer(num_keep_alive_refs=1) as writer:
            for step in range(1_000_000 // 50):
                writer.append({"x": np.float32(step)})
                column = writer.history["x"][-1]
                for _ in range(50):
                    writer.create_item("t", 1.0, {"x": column})
                if step % 100 == 0:
                    writer.flush(block_until_num_items=5000)
        client.checkpoint()
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=60) == 0

    restarted = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = []
    try:
        # Retry connecting every few ms: grpcio's default first backoff (1 s)
        # could outlast the load.
        # (Not grpc.min_reconnect_backoff_ms: that is the connect timeout.)
        options = [("grpc.initial_reconnect_backoff_ms", 5), ("grpc.max_reconnect_backoff_ms", 20)]
        with grpc.insecure_channel(f"localhost:{port}", options=options) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    status = stub.Check(
                        health_pb2.HealthCheckRequest(service=_REPLAY), timeout=1
                    ).status
                except grpc.RpcError:
                    continue  # the port is not open yet
                if status == health_pb2.HealthCheckResponse.NOT_SERVING and not seen:
                    # A replay call now is refused, saying why.
                    with pytest.raises(reverb.errors.UnavailableError, match="loading"):
                        reverb.Client(f"localhost:{port}").server_info(timeout=5)
                seen.append(status)
                if status == health_pb2.HealthCheckResponse.SERVING:
                    break
        assert seen and seen[0] == health_pb2.HealthCheckResponse.NOT_SERVING, seen
        assert seen[-1] == health_pb2.HealthCheckResponse.SERVING, seen
        assert "serving" in restarted.stdout.readline()
        info = reverb.Client(f"localhost:{port}").server_info(timeout=10)
        assert info["t"].current_size == 1_000_000
    finally:
        restarted.send_signal(signal.SIGTERM)
        assert restarted.wait(timeout=60) == 0


def _thread_names(pid):
    tasks = pathlib.Path(f"/proc/{pid}/task")
    names = []
    for task in tasks.iterdir():
        try:
            names.append((task / "comm").read_text().strip())
        except FileNotFoundError:  # the thread ended meanwhile
            pass
    return names


def test_neither_side_starts_grpcs_callback_pollers(server_binary, start_server):
    # gRPC's callback API (its own health service, callback client calls)
    # starts "nexting_thread" pollers that take turns with the threads that
    # wait on our streams, a wake-up more per message (health_service.h).
    # Health checks, server info and priority updates must not start them.
    process, port = start_server(
        server_binary,
        "--config=port: 0 "
        + (
            'tables { table_name: "p" sampler { prioritized { priority_exponent: 1 } } '
            "remover { fifo: true } max_size: 10 rate_limiter { samples_per_insert: 1 "
            "min_size_to_sample: 1 min_diff: -1e9 max_diff: 1e9 } }"
        ),
    )
    try:
        with grpc.insecure_channel(f"localhost:{port}") as channel:
            assert _status(channel, "") == health_pb2.HealthCheckResponse.SERVING
        client = reverb.Client(f"localhost:{port}")
        assert client.server_info()["p"].current_size == 0
        client.mutate_priorities("p", updates={1: 1.0})
        client.mutate_priorities("p", updates={1: 1.0}, deletes=[2])
        for pid in (process.pid, os.getpid()):
            names = _thread_names(pid)
            assert "nexting_thread" not in names, (pid, sorted(names))
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
