# SPDX-License-Identifier: Apache-2.0
"""CPU a reverb_tf_server spends on idle, blocked sample streams.

Opens `--streams` SampleStreams that wait on a table that never fills, then
reads the server process's CPU time over `--seconds`. Blocked calls should
cost (almost) nothing: they are woken by the table or by one cancellation
watcher, not by per-call timers.

  .venv/bin/python bench/idle_streams.py --streams 1000
"""

import argparse
import os
import pathlib
import time

import grpc

from reverb_tf.cc.proto import service_pb2 as pb
from server_process import start_server

_CONFIG = (
    'port: 0 tables { table_name: "never" sampler { uniform: true } '
    "remover { fifo: true } max_size: 10 rate_limiter { samples_per_insert: 1 "
    "min_size_to_sample: 1000000 min_diff: -1e300 max_diff: 1e300 } }"
)


def _cpu_s(pid: int) -> float:
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    server, port = start_server(_CONFIG)
    try:
        request = pb.SampleRequest(
            table="never", num_samples=1, rate_limiter_timeout_ms=-1
        ).SerializeToString()
        channel = grpc.insecure_channel(f"localhost:{port}")
        stream = channel.stream_stream(
            "/reverb_tf.proto.ReplayService/SampleStream",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        calls = [stream(iter([request])) for _ in range(args.streams)]
        while len(os.listdir(f"/proc/{server.pid}/task")) < args.streams:
            time.sleep(0.1)
        time.sleep(1.0)
        before, started = _cpu_s(server.pid), time.monotonic()
        time.sleep(args.seconds)
        used = _cpu_s(server.pid) - before
        elapsed = time.monotonic() - started
        print(
            f"{args.streams} blocked streams: server CPU {100 * used / elapsed:.2f}% of a core "
            f"({used:.2f} s over {elapsed:.1f} s)"
        )
        for call in calls:
            call.cancel()
        channel.close()
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    main()
