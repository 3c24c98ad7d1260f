# SPDX-License-Identifier: Apache-2.0
"""reverb_tf next to TensorFlow, and behaviour when things go wrong.

Each scenario runs in a fresh interpreter so that the import order is the
one under test (TensorFlow first) and a crash shows up as a failed test, not
a dead test runner.
"""

import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _run_python(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def test_real_rpcs_in_a_process_that_imported_tensorflow_first():
    result = _run_python("""
        import tensorflow as tf  # first, with its own protobuf, gRPC and BoringSSL
        import numpy as np
        import reverb_tf as reverb

        table = reverb.Table(name="t", sampler=reverb.selectors.Prioritized(0.8),
                             remover=reverb.selectors.Fifo(), max_size=1000,
                             rate_limiter=reverb.rate_limiters.MinSize(1))
        with reverb.Server([table], metrics_port=0) as server:
            client = reverb.Client(f"localhost:{server.port}")
            with client.trajectory_writer(num_keep_alive_refs=3) as writer:
                for step in range(30):
                    writer.append({"obs": np.full(4, step, np.float32), "done": step == 29})
                    if step >= 2:
                        writer.create_item("t", priority=1.0,
                                           trajectory={"obs": writer.history["obs"][-3:]})
                writer.flush()
            info = client.server_info()["t"]
            assert info.current_size == 28, info.current_size
            sample = next(client.sample("t", num_samples=1, emit_timesteps=False))
            obs = sample.data[0]
            assert obs.shape == (3, 4), obs.shape
            assert np.all(obs[1] == obs[0] + 1)
            client.mutate_priorities("t", updates={int(sample.info.key): 5.0})
            # The health service and reflection (our static gRPC, hidden from
            # TF's) answer a client of the process's grpcio.
            import grpc
            from grpc_health.v1 import health_pb2, health_pb2_grpc
            from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
                ProtoReflectionDescriptorDatabase)
            with grpc.insecure_channel(f"localhost:{server.port}") as channel:
                health = health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(), timeout=10)
                assert health.status == health_pb2.HealthCheckResponse.SERVING
                services = ProtoReflectionDescriptorDatabase(channel).get_services()
                assert "reverb_tf.proto.ReplayService" in services, services
            # The metrics endpoint (our static libmicrohttpd) answers too.
            import urllib.request
            page = urllib.request.urlopen(
                f"http://localhost:{server.metrics_port}/metrics", timeout=10).read().decode()
            assert 'reverb_tf_table_size{table="t"} 28' in page, page[:500]
            # TF still works alongside.
            assert float(tf.reduce_sum(tf.constant(obs))) == float(obs.sum())
        print("OK")
    """)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("OK")


def _communicate_or_dump(process, timeout):
    """Like communicate(), but on a hang fails with every thread's stack.

    The child registers faulthandler on SIGUSR1 (see the scripts below).
    """
    try:
        return process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGUSR1)
        time.sleep(1.0)
        process.kill()
        out, err = process.communicate()
        pytest.fail(f"the child hung; its stacks:\n{err[-6000:]}\nstdout: {out!r}")


# Also restores Python's Ctrl-C handling: a suite started in the background
# (`cmd &` without job control) passes SIGINT on as ignored, and Python then
# never raises KeyboardInterrupt.
_DUMP_ON_SIGUSR1 = (
    "import faulthandler, signal; faulthandler.register(signal.SIGUSR1); "
    "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
)


def test_ctrl_c_interrupts_a_blocked_sample():
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _DUMP_ON_SIGUSR1
            + textwrap.dedent("""
            import sys, time
            import reverb_tf as reverb
            table = reverb.Table(name="t", sampler=reverb.selectors.Uniform(),
                                 remover=reverb.selectors.Fifo(), max_size=10,
                                 rate_limiter=reverb.rate_limiters.MinSize(1))
            server = reverb.Server([table])
            client = reverb.Client(f"localhost:{server.port}")
            print("blocking", flush=True)
            try:
                next(client.sample("t", num_samples=1))  # empty table: blocks
            except KeyboardInterrupt:
                print("interrupted", flush=True)
                server.stop()
                sys.exit(0)
            sys.exit(1)
        """),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert process.stdout.readline().strip() == "blocking"
    time.sleep(0.5)
    start = time.monotonic()
    process.send_signal(signal.SIGINT)
    out, err = _communicate_or_dump(process, timeout=30)
    assert process.returncode == 0, err[-3000:]
    assert "interrupted" in out
    assert time.monotonic() - start < 10


_SILENT_PEER = """
import socket
silent = socket.socket(socket.AF_INET6)
silent.bind(("::1", 0))
silent.listen()  # accepts connections and never answers: a call to it blocks in gRPC
"""


def test_ctrl_c_interrupts_a_call_blocked_in_grpc():
    # On the main thread, mutate_priorities waits for its mutation stream
    # itself, in slices, checking for Ctrl-C between them; the interrupted
    # request ends the stream, so the next call (within a second) is a unary
    # call, which runs on a reused worker thread while the main thread
    # watches for Ctrl-C (RunCancellable in cc/python/calls.h). Both ways
    # are interrupted here.
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _DUMP_ON_SIGUSR1
            + _SILENT_PEER
            + textwrap.dedent("""
            import sys
            import reverb_tf as reverb
            client = reverb.Client(f"[::1]:{silent.getsockname()[1]}")
            for _ in range(3):  # the worker is reused after an interrupted call
                print("blocking", flush=True)
                try:
                    client.mutate_priorities("t", updates={1: 1.0})
                    sys.exit(1)
                except KeyboardInterrupt:
                    print("interrupted", flush=True)
            sys.exit(0)
        """),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    for _ in range(3):
        assert process.stdout.readline().strip() == "blocking"
        time.sleep(0.5)
        start = time.monotonic()
        process.send_signal(signal.SIGINT)
        line = process.stdout.readline().strip()
        assert line == "interrupted", (line, process.stderr.read()[-3000:] if not line else "")
        assert time.monotonic() - start < 5
    out, err = _communicate_or_dump(process, timeout=30)
    assert process.returncode == 0, err[-3000:]


@pytest.mark.parametrize("blocked_in", ["sample", "flush", "server_wait", "grpc_call"])
def test_exit_with_a_daemon_thread_blocked_in_a_call_is_clean(blocked_in):
    # A daemon thread blocked in a native call when the interpreter finalizes
    # used to abort the process ("terminate called without an active
    # exception"): retaking the GIL ends such a thread with a forced unwind.
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _DUMP_ON_SIGUSR1
            + _SILENT_PEER
            + textwrap.dedent(f"""
            import threading, time
            import numpy as np
            import reverb_tf as reverb
            server = reverb.Server([reverb.Table.queue("q", 1)])
            client = reverb.Client(f"localhost:{{server.port}}")
            def blocked():
                if "{blocked_in}" == "sample":
                    next(client.sample("q"))  # empty queue
                elif "{blocked_in}" == "flush":
                    writer = client.trajectory_writer(1)
                    for i in range(3):  # the queue holds 1
                        writer.append([np.float32(i)])
                        writer.create_item("q", 1.0, writer.history[0][-1:])
                    writer.flush()
                elif "{blocked_in}" == "grpc_call":  # inline off the main thread
                    reverb.Client(f"[::1]:{{silent.getsockname()[1]}}").server_info(timeout=60)
                else:
                    server.wait()
            threading.Thread(target=blocked, daemon=True).start()
            time.sleep(0.5)
            print("exiting", flush=True)
        """),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    out, err = _communicate_or_dump(process, timeout=60)
    assert out.strip() == "exiting"
    assert process.returncode == 0, err[-3000:]
    assert "terminate called" not in err


def test_server_stopped_while_a_sampler_blocks_and_a_writer_flushes():
    result = _run_python("""
        import threading, time
        import numpy as np
        import reverb_tf as reverb
        from reverb_tf import errors

        sample_table = reverb.Table(name="empty", sampler=reverb.selectors.Uniform(),
                                    remover=reverb.selectors.Fifo(), max_size=10,
                                    rate_limiter=reverb.rate_limiters.MinSize(1))
        queue = reverb.Table.queue(name="queue", max_size=1)
        server = reverb.Server([sample_table, queue])
        client = reverb.Client(f"localhost:{server.port}")
        outcome = {}

        def sampler():
            try:
                next(client.sample("empty", num_samples=1))
                outcome["sample"] = "returned"
            except errors.ReverbError as e:
                outcome["sample"] = type(e).__name__

        writer = client.trajectory_writer(num_keep_alive_refs=1)
        for i in range(2):  # the queue holds one; the second waits
            writer.append({"x": np.int32(i)})
            writer.create_item("queue", 1.0, {"x": writer.history["x"][-1]})

        def flusher():
            try:
                writer.flush(timeout_ms=20000)
                outcome["flush"] = "returned"
            except errors.ReverbError as e:
                outcome["flush"] = type(e).__name__

        threads = [threading.Thread(target=sampler), threading.Thread(target=flusher)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        start = time.monotonic()
        server.stop()
        for t in threads:
            t.join(timeout=15)
        assert not any(t.is_alive() for t in threads), "a call hung after stop()"
        assert outcome["sample"] != "returned" and outcome["flush"] != "returned", outcome
        print("OK", outcome, round(time.monotonic() - start, 2))
    """)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("OK")


def test_unreachable_server_fails_within_the_timeout():
    result = _run_python("""
        import time, portpicker
        import reverb_tf as reverb
        from reverb_tf import errors
        client = reverb.Client(f"localhost:{portpicker.pick_unused_port()}")
        start = time.monotonic()
        try:
            client.server_info(timeout=2)
        except errors.ReverbError as e:
            print("raised", type(e).__name__, round(time.monotonic() - start, 2))
    """)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("raised")
    assert float(result.stdout.split()[-1]) < 10
