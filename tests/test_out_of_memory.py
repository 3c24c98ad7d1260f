# SPDX-License-Identifier: Apache-2.0
"""A server that runs out of memory answers RESOURCE_EXHAUSTED and goes on serving.

The `reverb_tf_server` binary runs in a child process whose address space
is then capped (RLIMIT_AS, set with prlimit once it is up) at what it uses
plus a few hundred MB: the limit a memory cgroup or `ulimit -v` sets. A raw
InsertStream (plain grpcio, as a broken or hostile writer would send it)
sends 100 MB chunks that no item references and that it never releases,
until an allocation fails. The stream must end with RESOURCE_EXHAUSTED
saying what did not fit (not UNKNOWN "Unexpected error in RPC handling",
the answer gRPC gives for an exception that escaped a handler), and the
server must then answer every kind of call. Several such streams at once
make gRPC's transport read the next messages while ours are parsed; the
server bounds those buffers (a gRPC resource quota sized from the cap), so
it refuses streams instead of dying in gRPC's allocator.
"""

import concurrent.futures
import resource
import signal
import subprocess
import time

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

import reverb_tf as reverb
from reverb_tf.cc.proto import data_pb2
from reverb_tf.cc.proto import service_pb2 as pb
from integration import (
    port_outside_ephemeral_range,
    proc_status_bytes,
    scrape_metrics,
    uniform_table_config,
)

_CHUNK_BYTES = 100 << 20
_HEADROOM = 640 << 20  # above the server's address space once it is up


def _chunk_requests(count: int):
    data = b"\x01" * _CHUNK_BYTES
    for i in range(count):
        tensor = data_pb2.Tensor(
            dtype=4,
            shape=[1, _CHUNK_BYTES],
            data=data,  # uint8
            uncompressed_size=_CHUNK_BYTES,
        )
        yield pb.InsertRequest(
            chunks=[data_pb2.Chunk(key=10_000 + i, tensor=tensor)]
        ).SerializeToString()


def _send_chunks_until_refused(address: str) -> grpc.RpcError:
    """Streams 20 chunks of 100 MB (2 GB, far beyond the headroom); the stream's error."""
    options = [
        ("grpc.max_send_message_length", 256 << 20),
        ("grpc.max_receive_message_length", 256 << 20),
    ]
    with grpc.insecure_channel(address, options=options) as channel:
        call = channel.stream_stream(
            "/reverb_tf.proto.ReplayService/InsertStream",
            request_serializer=lambda b: b,
            response_deserializer=pb.InsertResponse.FromString,
        )
        with pytest.raises(grpc.RpcError) as error:
            for _ in call(_chunk_requests(20), timeout=120):
                pass
    return error.value


def _wait_for_quota(metrics_port: int, limit: int) -> int:
    """The server's bound on gRPC's buffers once it has seen the cap."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        samples, _ = scrape_metrics(metrics_port)
        quota = int(samples[("reverb_tf_grpc_buffer_quota_bytes", ())])
        if quota > 0:
            return quota
        time.sleep(0.05)
    pytest.fail(f"the server did not bound gRPC's buffers within 10 s of a cap of {limit} bytes")


def _assert_alive(process: subprocess.Popen, when: str) -> None:
    """Fails with the server's exit signal or status and its stderr if it has ended."""
    try:
        process.wait(timeout=1)  # a dying server may take a moment to be reaped
    except subprocess.TimeoutExpired:
        return
    code = process.returncode
    how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
    stderr = process.stderr.read()  # it has ended: read to its end
    pytest.fail(f"the server died {when}, with {how}; its stderr ended:\n{stderr[-4000:]}")


def test_running_out_of_memory_ends_the_call_with_resource_exhausted_and_the_server_serves_on(
    start_server, server_binary
):
    port, metrics_port = port_outside_ephemeral_range(), port_outside_ephemeral_range()
    process, port = start_server(
        server_binary, "--config=" + uniform_table_config(port), f"--metrics_port={metrics_port}"
    )
    try:
        samples, _ = scrape_metrics(metrics_port)
        assert samples[("reverb_tf_grpc_buffer_quota_bytes", ())] == 0  # no cap yet
        limit = proc_status_bytes(process.pid, "VmSize") + _HEADROOM
        resource.prlimit(process.pid, resource.RLIMIT_AS, (limit, limit))
        quota = _wait_for_quota(metrics_port, limit)
        # Room for one largest message being read while another is parsed,
        # and at most half of what the cap leaves.
        assert 16 << 20 <= quota <= _HEADROOM // 2, quota
        address = f"localhost:{port}"
        error = _send_chunks_until_refused(address)
        _assert_alive(process, "during the first wave")
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error
        details = error.details()
        assert "the server ran out of memory while" in details, details
        assert "storing chunk" in details or "reading message" in details, details
        print(f"address space capped at {limit >> 20} MiB; the stream ended with: {details}")

        # Everything else still works: health, metrics, info, insert, sample.
        with grpc.insecure_channel(address) as channel:
            health = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=10
            )
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        samples, _ = scrape_metrics(metrics_port)
        # The failed stream's chunks were given back.
        assert samples[("reverb_tf_chunk_bytes", ())] == 0
        client = reverb.Client(address)
        assert client.server_info(timeout=10)["t"].current_size == 0
        client.insert(np.arange(1000, dtype=np.float32), {"t": 1.0})
        sample = next(client.sample("t", emit_timesteps=False))
        np.testing.assert_array_equal(sample.data[0], [np.arange(1000, dtype=np.float32)])
        # And the limit still holds: a second wave fails the same way.
        again = _send_chunks_until_refused(address)
        _assert_alive(process, "during the second wave")
        assert again.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, again
        assert client.server_info(timeout=10)["t"].current_size == 1

        held, _ = scrape_metrics(metrics_port)
        # Four such streams at once, three times: every one is refused with
        # RESOURCE_EXHAUSTED (by our check, or by gRPC's quota cancelling
        # it), and the server lives through all of them.
        for wave in range(3):
            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                errors = list(pool.map(lambda _: _send_chunks_until_refused(address), range(4)))
            _assert_alive(process, f"during concurrent wave {wave + 1}")
            for error in errors:
                assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error
        assert client.server_info(timeout=10)["t"].current_size == 1
        samples, _ = scrape_metrics(metrics_port)
        # The refused streams' chunks were given back: only the item's remain.
        assert samples[("reverb_tf_chunk_bytes", ())] == held[("reverb_tf_chunk_bytes", ())]
        client.insert(np.ones(10, dtype=np.float32), {"t": 1.0})
        assert client.server_info(timeout=10)["t"].current_size == 2
    finally:
        process.kill()
        stderr = process.communicate()[1]
    assert "terminate called" not in stderr, stderr
