# SPDX-License-Identifier: Apache-2.0
"""Smoke test of an installed reverb_tf wheel where TensorFlow is not installed.

scripts/check_wheel.sh runs it with the python of a fresh venv into which
only the wheel was installed (`pip install WHEEL`: its required
dependencies, no extra), from a directory outside the checkout. It checks
that pip brought no TensorFlow, that `import reverb_tf` and a first sample
work without it (and times them), that a NumpyDataset reads batches, that
the TensorFlow features name the extra to install, and that the
`reverb_tf_server` console script serves.

Prints one line per check, the timings, and a closing "N passed, N failed"
line; exits 1 if any check failed.
"""

import time

_started = time.perf_counter()
import reverb_tf as reverb  # noqa: E402  (timed)

_import_s = time.perf_counter() - _started

import importlib.util  # noqa: E402
import pathlib  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import sysconfig  # noqa: E402
import traceback  # noqa: E402

import numpy as np  # noqa: E402

CONFIG = (
    'port: 0 tables { table_name: "replay" sampler { uniform: true } remover { fifo: true } '
    "max_size: 100 rate_limiter { samples_per_insert: 1 min_size_to_sample: 1 "
    "min_diff: -1e300 max_diff: 1e300 } }"
)


def check_no_tensorflow_and_installed_wheel():
    assert importlib.util.find_spec("tensorflow") is None, "pip installed TensorFlow"
    site_packages = {
        pathlib.Path(sysconfig.get_paths()[k]).resolve() for k in ("purelib", "platlib")
    }
    package = pathlib.Path(reverb.__file__).resolve().parent
    assert package.parent in site_packages, f"reverb_tf imported from {package}"


def check_first_sample_and_numpy_dataset():
    started = time.perf_counter()
    signature = {"obs": reverb.ArraySpec((2,), np.float32)}
    table = reverb.Table(
        "replay",
        reverb.selectors.Uniform(),
        reverb.selectors.Fifo(),
        100,
        reverb.rate_limiters.MinSize(1),
        signature=signature,
    )
    with reverb.Server([table]) as server:
        address = f"localhost:{server.port}"
        client = reverb.Client(address)
        with client.trajectory_writer(1) as writer:
            for t in range(8):
                writer.append({"obs": np.full(2, t, np.float32)})
                writer.create_item("replay", 1.0, {"obs": writer.history["obs"][-1]})
        sample = next(client.sample("replay", emit_timesteps=False))
        first_sample_s = time.perf_counter() - started
        assert sample.data[0].shape == (2,)
        batch = next(iter(reverb.NumpyDataset(address, "replay", 4, max_samples=4)))
        assert batch.data["obs"].shape == (4, 2) and batch.info.key.shape == (4,)
    print(
        f"timing: import reverb_tf {_import_s * 1000:.0f} ms; server, 8 items and the "
        f"first sample {first_sample_s * 1000:.0f} ms"
    )


def check_tensorflow_features_name_the_extra():
    for name in ("TrajectoryDataset", "TFClient"):
        try:
            getattr(reverb, name)
        except ImportError as e:
            assert "reverb-tf[tensorflow-cpu]" in str(e), e
        else:
            raise AssertionError(f"reverb_tf.{name} did not raise ImportError")


def check_console_script_serves():
    script = shutil.which("reverb_tf_server") or str(
        pathlib.Path(sys.executable).parent / "reverb_tf_server"
    )
    process = subprocess.Popen(
        [script, "--config=" + CONFIG], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        port = int(re.search(r"on port (\d+)", process.stdout.readline()).group(1))
        info = reverb.Client(f"localhost:{port}").server_info(timeout=10)
        assert set(info) == {"replay"}, info
    finally:
        process.terminate()
        process.wait(10)


def main() -> int:
    checks = [
        check_no_tensorflow_and_installed_wheel,
        check_first_sample_and_numpy_dataset,
        check_tensorflow_features_name_the_extra,
        check_console_script_serves,
    ]
    failed = 0
    for check in checks:
        try:
            check()
            print(f"PASS {check.__name__}")
        except Exception:  # pylint: disable=broad-except
            failed += 1
            print(f"FAIL {check.__name__}\n{traceback.format_exc()}")
    print(f"no-tensorflow smoke: {len(checks) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
