# SPDX-License-Identifier: Apache-2.0
"""Reproduces the server's death under an address-space cap (issue 49).

The `reverb_tf_server` binary runs in a child process capped (RLIMIT_AS,
set with prlimit once it serves) at its address space plus `--headroom`
MiB. `--streams` raw InsertStreams at once each send 100 MB chunks that no
item references until the server refuses them; `--waves` such rounds per
server. A healthy server ends every stream with RESOURCE_EXHAUSTED and
lives on; the script prints each server's outcome and, for a server that
died, its signal and stderr, then the number of deaths.

Measured on 2026-12-06 at 00a7691 (2 cores, Debian 12, gRPC 1.51): with one
or two streams no server died; with four, 2 of 8 servers died (SIGSEGV in
gRPC's MemoryAllocator::MakeSlice under tcp_handle_read, and SIGABRT). The
transport reads each stream's next message into slices of its own while
the service parses and stores the previous ones, so gRPC's allocations,
not ours, are the ones that fail; the 64 MiB that our checks leave it
(platform/out_of_memory.h) covers one stream, not several.

    .venv/bin/python bench/out_of_memory_streams.py [--headroom 150,470,640] \
        [--streams 4] [--waves 3]
"""

import argparse
import resource
import signal
import subprocess
import threading
from typing import Iterator, List, Optional

import grpc

from reverb_tf.cc.proto import data_pb2
from reverb_tf.cc.proto import service_pb2
from server_process import start_server, table_config

_CHUNK_BYTES = 100 << 20


def _requests(count: int) -> Iterator[bytes]:
    """`count` InsertRequests of one 100 MB chunk each, serialized."""
    data = b"\x01" * _CHUNK_BYTES
    for i in range(count):
        tensor = data_pb2.Tensor(
            dtype=4, shape=[1, _CHUNK_BYTES], data=data, uncompressed_size=_CHUNK_BYTES
        )
        chunk = data_pb2.Chunk(key=10_000 + i, tensor=tensor)
        yield service_pb2.InsertRequest(chunks=[chunk]).SerializeToString()


def _stream_until_refused(address: str) -> str:
    """Sends 20 chunks (2 GB) on one stream; the status it ended with."""
    limits = [("grpc.max_send_message_length", 256 << 20)]
    with grpc.insecure_channel(address, options=limits) as channel:
        call = channel.stream_stream(
            "/reverb_tf.proto.ReplayService/InsertStream",
            request_serializer=lambda b: b,
            response_deserializer=service_pb2.InsertResponse.FromString,
        )
        try:
            for _ in call(_requests(20), timeout=120):
                pass
        except grpc.RpcError as error:
            return f"{error.code().name}: {error.details()}"
    return "OK (the server took 2 GB)"


def _address_space(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/{pid}/status has no VmSize")


def _run_server(headroom_mib: int, streams: int, waves: int) -> Optional[str]:
    """One capped server through `waves` rounds; how it died, or None."""
    process, port = start_server("port: 0 " + table_config("t", 10), stderr=subprocess.PIPE)
    try:
        limit = _address_space(process.pid) + (headroom_mib << 20)
        resource.prlimit(process.pid, resource.RLIMIT_AS, (limit, limit))
        print(f"headroom {headroom_mib} MiB, cap {limit >> 20} MiB", flush=True)
        for wave in range(waves):
            outcomes: List[str] = [""] * streams

            def send(i: int) -> None:
                outcomes[i] = _stream_until_refused(f"localhost:{port}")

            threads = [threading.Thread(target=send, args=(i,)) for i in range(streams)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            print(f"  wave {wave}: " + " | ".join(o[:90] for o in outcomes), flush=True)
            try:
                code = process.wait(timeout=1)
            except subprocess.TimeoutExpired:
                continue
            how = signal.Signals(-code).name if code < 0 else f"exit status {code}"
            return f"died with {how}; stderr: {process.stderr.read()[-2000:]!r}"
        return None
    finally:
        process.kill()
        process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--headroom", default="150,230,310,470,550,640")
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--waves", type=int, default=3)
    args = parser.parse_args()
    deaths = 0
    for headroom in (int(h) for h in args.headroom.split(",")):
        death = _run_server(headroom, args.streams, args.waves)
        if death is not None:
            deaths += 1
            print("  " + death, flush=True)
    print(f"deaths: {deaths}")


if __name__ == "__main__":
    main()
