# SPDX-License-Identifier: Apache-2.0
"""The short check of the aarch64 wheel under emulation (CI's container_check.sh --arch arm64).

Run by the arm64 check image's python (under qemu-user) with the wheel's
path: unpacks the wheel into a temporary directory (its dependencies are
already in the venv), imports reverb_tf from there, checks that its
extension is an aarch64 ELF file, serves one item written by a
TrajectoryWriter and samples it back, and runs the packaged binary with
--helpfull. Prints what it checked; the last line is the machine and the time.

Usage: python arm64_check.py WHEEL
"""

import pathlib
import platform
import subprocess
import sys
import tempfile
import time
import zipfile

EM_AARCH64 = 183


def main(wheel: str) -> None:
    started = time.perf_counter()
    assert platform.machine() == "aarch64", platform.machine()
    with tempfile.TemporaryDirectory() as root:
        with zipfile.ZipFile(wheel) as archive:
            for info in archive.infolist():
                path = archive.extract(info, root)
                mode = (info.external_attr >> 16) & 0o777
                if mode:
                    pathlib.Path(path).chmod(mode)
        sys.path.insert(0, root)
        import numpy as np  # pylint: disable=g-import-not-at-top

        import reverb_tf as reverb  # pylint: disable=g-import-not-at-top
        from reverb_tf import _core  # pylint: disable=g-import-not-at-top

        extension = pathlib.Path(_core.__file__)
        assert extension.is_relative_to(root), extension
        header = extension.read_bytes()[:20]
        machine = int.from_bytes(header[18:20], "little")
        assert header[:4] == b"\x7fELF" and machine == EM_AARCH64, (extension, machine)
        print(f"imported {extension.name} (ELF machine {machine}, aarch64)")

        table = reverb.Table(
            "replay",
            reverb.selectors.Uniform(),
            reverb.selectors.Fifo(),
            10,
            reverb.rate_limiters.MinSize(1),
        )
        with reverb.Server(tables=[table]) as server:
            client = reverb.Client(f"localhost:{server.port}")
            with client.trajectory_writer(num_keep_alive_refs=1) as writer:
                writer.append({"obs": np.arange(3, dtype=np.float32)})
                writer.create_item("replay", 1.0, {"obs": writer.history["obs"][-1]})
                writer.flush()
            sample = next(client.sample("replay", num_samples=1, emit_timesteps=False))
            np.testing.assert_array_equal(sample.data[0], np.arange(3, dtype=np.float32))
        print("served and sampled one item")
        binary = pathlib.Path(reverb.__file__).parent / "reverb_tf_server"
        # absl's --helpfull lists every flag (and exits 1).
        result = subprocess.run(
            [str(binary), "--helpfull"], capture_output=True, text=True, timeout=60
        )
        assert "-config" in result.stdout + result.stderr, result
        print("reverb_tf_server --helpfull lists --config")
    elapsed = time.perf_counter() - started
    print(f"{platform.machine()}, Python {platform.python_version()}: {elapsed:.1f} s")


if __name__ == "__main__":
    main(sys.argv[1])
