# SPDX-License-Identifier: Apache-2.0
"""Smoke test of an installed reverb_tf wheel.

scripts/check_wheel.sh runs it with the python of a fresh venv that holds
TensorFlow and the wheel only, from a directory outside the checkout. It
imports TensorFlow first, as a user's program does (TF then exports its own
gRPC and protobuf to everything loaded after it), and checks:

  * the package and its metadata are the installed wheel's (not a
    checkout's), and it requires TensorFlow only through its extra for the
    installed distribution, pinned to this TensorFlow's minor version;
  * an in-process Server with a TrajectoryWriter writing overlapping
    trajectories;
  * ReverbDataset sampling them through the TF op library;
  * TFClient insert, sample and update_priorities inside tf.function;
  * the `reverb_tf_server` console entry point serving a textproto config to
    a Client, stopping on SIGTERM, and refusing a bad config.

Prints one line per check and a closing "N passed, N failed" line; exits 1
if any check failed.
"""

import tensorflow as tf  # first, on purpose

import importlib.metadata
import json
import pathlib
import re
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import traceback
import urllib.request

import numpy as np
import tree
from packaging.requirements import Requirement

import reverb_tf as reverb

SIGNATURE = {"obs": tf.TensorSpec([3, 4], tf.float32), "action": tf.TensorSpec([], tf.int32)}
SERVER_CONFIG = """
port: 0
tables {
  table_name: "served"
  sampler { fifo: true }
  remover { fifo: true }
  max_size: 100
  max_times_sampled: 1
  rate_limiter { samples_per_insert: 1 min_size_to_sample: 1 min_diff: -1e300 max_diff: 1e300 }
}
"""


def check_installed_wheel():
    site_packages = {
        pathlib.Path(sysconfig.get_paths()[k]).resolve() for k in ("purelib", "platlib")
    }
    package = pathlib.Path(reverb.__file__).resolve().parent
    assert package.parent in site_packages, (
        f"reverb_tf imported from {package}, not {site_packages}"
    )
    assert importlib.metadata.version("reverb-tf") == reverb.__version__
    requirements = [Requirement(r) for r in importlib.metadata.requires("reverb-tf")]
    # TensorFlow only through the extras, each pinned to the build's minor version.
    assert not [r for r in requirements if r.name.startswith("tensorflow") and not r.marker], (
        requirements
    )
    owners = importlib.metadata.packages_distributions()["tensorflow"]
    assert len(owners) == 1, f"more than one TensorFlow installed: {owners}"
    installed = importlib.metadata.distribution(owners[0]).metadata["Name"].replace("_", "-")
    extra = [
        r
        for r in requirements
        if r.name == installed and r.marker is not None and r.marker.evaluate({"extra": installed})
    ]
    assert len(extra) == 1, (installed, requirements)
    assert tf.__version__ in extra[0].specifier, (tf.__version__, str(extra[0]))


def check_server_writer_and_dataset():
    table = reverb.Table(
        name="replay",
        sampler=reverb.selectors.Prioritized(0.8),
        remover=reverb.selectors.Fifo(),
        max_size=100,
        rate_limiter=reverb.rate_limiters.MinSize(1),
        signature=SIGNATURE,
    )
    with reverb.Server([table]) as server:
        address = f"localhost:{server.port}"
        client = reverb.Client(address)
        with client.trajectory_writer(num_keep_alive_refs=3) as writer:
            for step in range(10):
                writer.append({"obs": np.full(4, step, np.float32), "action": np.int32(step)})
                if step >= 2:
                    writer.create_item(
                        "replay",
                        priority=1.0,
                        trajectory={
                            "obs": writer.history["obs"][-3:],
                            "action": writer.history["action"][-1],
                        },
                    )
            writer.flush()
        assert client.server_info()["replay"].current_size == 8

        dataset = reverb.ReverbDataset.from_table_signature(
            address, "replay", max_in_flight_samples_per_worker=16
        ).batch(6)
        batch = next(iter(dataset))
        obs, action = batch.data["obs"].numpy(), batch.data["action"].numpy()
        assert obs.shape == (6, 3, 4) and action.shape == (6,), (obs.shape, action.shape)
        # Each item is three consecutive steps ending at the step of its action.
        np.testing.assert_array_equal(obs[:, :, 0], action[:, None] + np.arange(-2, 1))
        assert set(action.tolist()) <= set(range(2, 10)), action
        np.testing.assert_array_equal(batch.info.table_size.numpy(), 8)


def check_tf_client_in_tf_function():
    table = reverb.Table(
        name="actor",
        sampler=reverb.selectors.MaxHeap(),
        remover=reverb.selectors.Fifo(),
        max_size=100,
        rate_limiter=reverb.rate_limiters.MinSize(1),
        signature={"x": tf.TensorSpec([], tf.int64), "obs": tf.TensorSpec([2], tf.float32)},
    )
    with reverb.Server([table]) as server:
        address = f"localhost:{server.port}"
        tf_client = reverb.TFClient(address)

        @tf.function
        def act(i):
            # Columns in the signature's flattened (sorted-key) order: obs, x.
            tf_client.insert(
                [tf.fill([2], tf.cast(i, tf.float32)), tf.cast(i, tf.int64)],
                tables=tf.constant(["actor"]),
                priorities=tf.reshape(tf.cast(i + 1, tf.float64), [1]),
            )

        for i in range(5):
            act(tf.constant(i))
        client = reverb.Client(address)
        assert client.server_info()["actor"].current_size == 5

        @tf.function
        def learn():
            sample = tf_client.sample("actor", [tf.float32, tf.int64])
            tf_client.update_priorities(
                "actor", tf.reshape(sample.info.key, [1]), tf.constant([0.5], tf.float64)
            )
            return sample.info.priority, sample.data[1]

        # The max-heap serves the highest priority: x=4 (inserted with 5.0)...
        priority, x = learn()
        assert (float(priority), int(x)) == (5.0, 4), (priority, x)
        # ...and after its update to 0.5, x=3 (priority 4.0).
        # TFClient.insert keeps a time dimension of 1, as dm-reverb's does.
        top = next(client.sample("actor", num_samples=1, emit_timesteps=False))
        obs, x = tree.flatten(top.data)
        assert (top.info.priority, x.tolist()) == (4.0, [3]), top
        np.testing.assert_array_equal(obs, [[3.0, 3.0]])


def _start_server_command(*args):
    """Starts the console script; returns (process, port) after its readiness line."""
    command = pathlib.Path(sys.executable).parent / "reverb_tf_server"
    assert command.is_file(), f"{command}: the wheel's console entry point is not installed"
    assert command.read_bytes().startswith(b"#!"), f"{command} is not a console script"
    process = subprocess.Popen(
        [str(command), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    watchdog = threading.Timer(60, process.kill)  # no readiness line: fail, don't hang
    watchdog.start()
    try:
        line = process.stdout.readline()
    finally:
        watchdog.cancel()
    match = re.search(r"on port (\d+)", line)
    if match is None:
        process.kill()
        raise AssertionError(f"no readiness line: {line!r} {process.stderr.read()!r}")
    return process, int(match.group(1))


def check_server_console_script():
    with tempfile.TemporaryDirectory() as tmp:
        config = pathlib.Path(tmp) / "server.textproto"
        config.write_text(SERVER_CONFIG)
        process, port = _start_server_command(f"--config_file={config}")
        try:
            client = reverb.Client(f"localhost:{port}")
            info = client.server_info(timeout=10)
            assert list(info) == ["served"] and info["served"].max_size == 100, info
            client.insert(np.arange(3, dtype=np.int64), priorities={"served": 1.0})
            sample = next(client.sample("served", num_samples=1, emit_timesteps=False))
            # One step, with its time dimension of 1.
            np.testing.assert_array_equal(tree.flatten(sample.data)[0], [[0, 1, 2]])
            # max_times_sampled: 1 removed it.
            assert client.server_info(timeout=10)["served"].current_size == 0
        finally:
            process.send_signal(signal.SIGTERM)
            code = process.wait(timeout=30)
        assert code == 0, (code, process.stderr.read())


def check_server_console_script_rejects_a_bad_config():
    command = pathlib.Path(sys.executable).parent / "reverb_tf_server"
    result = subprocess.run(
        [str(command), "--config=port: 0"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2 and "no tables" in result.stderr, result


def check_cli_console_script():
    command = pathlib.Path(sys.executable).parent / "reverb_tf"
    table = reverb.Table.queue("q", 10)
    with reverb.Server([table], metrics_port=0) as server:
        reverb.Client(f"localhost:{server.port}").insert(np.float32(1), {"q": 1.0})
        result = subprocess.run(
            [str(command), "info", f"localhost:{server.port}", "--json"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result
        tables = json.loads(result.stdout)["tables"]
        assert [(t["name"], t["current_size"]) for t in tables] == [("q", 1)], tables
        # The metrics endpoint of the wheel's native library.
        page = (
            urllib.request.urlopen(f"http://localhost:{server.metrics_port}/metrics", timeout=10)
            .read()
            .decode()
        )
        assert 'reverb_tf_table_size{table="q"} 1' in page, page[:300]


def main():
    checks = [
        check_installed_wheel,
        check_server_writer_and_dataset,
        check_tf_client_in_tf_function,
        check_server_console_script,
        check_server_console_script_rejects_a_bad_config,
        check_cli_console_script,
    ]
    failed = 0
    for check in checks:
        try:
            check()
            print(f"PASS {check.__name__}", flush=True)
        except Exception:  # pylint: disable=broad-except
            failed += 1
            print(f"FAIL {check.__name__}\n{traceback.format_exc()}", flush=True)
    print(f"smoke: {len(checks) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
