# SPDX-License-Identifier: Apache-2.0
"""Per-call cost of a remote priority update, split into its parts.

`--shards` `reverb_tf_server`s in child processes each hold a Prioritized
table of small items; one client (of all of them) updates priorities in
calls of `--keys` keys, over the
client's mutation stream (what `Client.mutate_priorities` uses) and as unary
calls (what a call with a deadline uses). Each way is timed for an empty
request (the round trip alone), keys the table does not hold (the round trip
and the request's bytes) and keys it holds (and the table's work), with the
CPU time the client and the server spent per call.

    .venv/bin/python bench/mutation_bench.py [--keys 256] [--calls 3000] [--shards 1]

With several shards every call goes to every shard (each applies the keys
it holds), and the server CPU is the shards' sum.

The first line is the floor under all of them: a round trip of plain TCP
between this process and a child process on loopback (a request of the
held-keys call's size, an 8-byte answer), with no gRPC and no replay work.
"""

import argparse
import socket
import subprocess
import sys
import time

import numpy as np

import reverb_tf as reverb
from server_process import cpu_seconds, start_server, table_config

# A deadline makes the native client use a unary call instead of the stream.
_UNARY_TIMEOUT_S = 60.0


# A child process that answers every `size`-byte request with 8 bytes.
_ECHO_SERVER = """
import socket, sys
size = int(sys.argv[1])
listener = socket.create_server(("127.0.0.1", 0))
print(listener.getsockname()[1], flush=True)
conn, _ = listener.accept()
conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while True:
    got = 0
    while got < size:
        chunk = conn.recv(size - got)
        if not chunk:
            sys.exit(0)
        got += len(chunk)
    conn.sendall(b"12345678")
"""


def raw_tcp_round_trip_us(request_bytes: int, calls: int) -> float:
    """Microseconds per round trip of plain TCP to a child process on loopback."""
    child = subprocess.Popen(
        [sys.executable, "-c", _ECHO_SERVER, str(request_bytes)], stdout=subprocess.PIPE, text=True
    )
    try:
        port = int(child.stdout.readline())
        with socket.create_connection(("127.0.0.1", port)) as conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            request = b"x" * request_bytes

            def round_trip():
                conn.sendall(request)
                got = 0
                while got < 8:
                    got += len(conn.recv(8 - got))

            for _ in range(100):  # warm-up
                round_trip()
            start = time.perf_counter()
            for _ in range(calls):
                round_trip()
            return (time.perf_counter() - start) * 1e6 / calls
    finally:
        child.kill()
        child.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=256, help="keys per call")
    parser.add_argument("--calls", type=int, default=3000, help="calls per figure")
    parser.add_argument("--items", type=int, default=5000, help="items in each shard's table")
    parser.add_argument("--shards", type=int, default=1, help="servers behind the client")
    args = parser.parse_args()

    started = [
        start_server(
            "port: 0 " + table_config("prio", 100_000, "prioritized { priority_exponent: 0.6 }")
        )
        for _ in range(args.shards)
    ]
    processes = [process for process, _ in started]
    try:
        for _, port in started:
            with reverb.Client(f"localhost:{port}").trajectory_writer(1) as writer:
                for i in range(args.items):
                    writer.append({"x": np.float32(i)})
                    writer.create_item("prio", 1.0, {"x": writer.history["x"][-1]})
        client = reverb.Client([f"localhost:{port}" for _, port in started])
        held = []
        while len(held) < args.keys:
            held = list(
                dict.fromkeys(
                    held
                    + [
                        int(s.info.key)
                        for s in client.sample("prio", 4 * args.keys, emit_timesteps=False)
                    ]
                )
            )
        held = held[: args.keys]
        absent = [key ^ 1 for key in held]  # random 64-bit keys: none of these is held
        priorities = np.random.default_rng(0).random(args.keys).tolist()
        native = client._client  # pylint: disable=protected-access

        def measure(keys, timeout_s):
            values = priorities[: len(keys)]
            servers_cpu = lambda: sum(cpu_seconds(process.pid) for process in processes)
            client_cpu, server_cpu = time.process_time(), servers_cpu()
            start = time.perf_counter()
            for _ in range(args.calls):
                native.mutate_priorities("prio", keys, values, [], timeout_s)
            per_call = 1e6 / args.calls
            return (
                (time.perf_counter() - start) * per_call,
                (time.process_time() - client_cpu) * per_call,
                (servers_cpu() - server_cpu) * per_call,
            )

        measure(held, None)  # warm-up: connection, stream, caches
        measure(held, _UNARY_TIMEOUT_S)
        print(
            f"{args.keys} keys per call, {args.calls} calls per figure, {args.shards} "
            f"shard(s) of {args.items} items; microseconds per call"
        )
        print(f"{'request':<22}{'path':<8}{'wall':>8}{'client CPU':>12}{'server CPU':>12}")
        # A held key travels as 8 bytes of key and 8 of priority, plus tags.
        floor = raw_tcp_round_trip_us(20 * args.keys, args.calls)
        print(f"{'plain TCP, ' + str(20 * args.keys) + ' B':<22}{'socket':<8}{floor:>8.0f}")
        for label, keys in [
            ("empty", []),
            (f"{args.keys} absent keys", absent),
            (f"{args.keys} held keys", held),
        ]:
            for path, timeout_s in [("stream", None), ("unary", _UNARY_TIMEOUT_S)]:
                wall, client_cpu, server_cpu = measure(keys, timeout_s)
                print(f"{label:<22}{path:<8}{wall:>8.0f}{client_cpu:>12.0f}{server_cpu:>12.0f}")
    finally:
        for process in processes:
            process.kill()
            process.wait()


if __name__ == "__main__":
    main()
