# SPDX-License-Identifier: Apache-2.0
"""The short check of a wheel target CI cannot run natively (scripts/container_check.sh).

Run inside a build root of the target, with that root's Python:

* the aarch64 wheel under emulation (`container_check.sh --arch arm64`):
  the argument is the wheel, unpacked into a temporary directory;
* the stable-ABI extension under Python 3.14 (`scripts/abi3_check.sh`): the
  argument is a directory holding the package as CI staged it (`reverb_tf/`
  with the abi3 `_core.so` and `libreverb_tf.so`), without the binary.

Either way the package's dependencies are already in the running venv. It
imports reverb_tf from there (never another copy), checks that the
extension is an ELF file for this machine, serves one item written by a
TrajectoryWriter and samples it back, and, for a wheel, runs the packaged
binary with --helpfull. With --abi3, the interpreter must be newer than the
3.12 the extension was limited to. Prints what it checked; the last line is
the machine, the Python and the time.

Usage: python target_check.py WHEEL_OR_DIRECTORY [--abi3]
"""

import argparse
import pathlib
import platform
import subprocess
import sys
import tempfile
import time
import zipfile

# e_machine of the ELF header, by platform.machine().
ELF_MACHINES = {"aarch64": 183, "x86_64": 62}


def unpack(wheel: pathlib.Path, root: pathlib.Path) -> None:
    """Extracts `wheel` into `root`, keeping the files' modes (the binary's x bit)."""
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            path = archive.extract(info, root)
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                pathlib.Path(path).chmod(mode)


def check(root: pathlib.Path, binary: bool, abi3: bool) -> None:
    """Imports reverb_tf from `root` and serves one item; raises AssertionError on a failure."""
    if abi3:
        assert sys.version_info >= (3, 13), "an abi3 check wants a Python newer than 3.12"
    sys.path.insert(0, str(root))
    import numpy as np  # pylint: disable=g-import-not-at-top

    import reverb_tf as reverb  # pylint: disable=g-import-not-at-top
    from reverb_tf import _core  # pylint: disable=g-import-not-at-top

    extension = pathlib.Path(_core.__file__)
    assert extension.is_relative_to(root), extension
    header = extension.read_bytes()[:20]
    machine = int.from_bytes(header[18:20], "little")
    want = ELF_MACHINES[platform.machine()]
    assert header[:4] == b"\x7fELF" and machine == want, (extension, machine, want)
    print(f"imported {extension.name} (ELF machine {machine}, {platform.machine()})")

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
            writer.append({"obs": np.arange(3, dtype=np.float32), "name": "step"})
            writer.create_item(
                "replay",
                1.0,
                {"obs": writer.history["obs"][-1], "name": writer.history["name"][-1]},
            )
            writer.flush()
        sample = next(client.sample("replay", num_samples=1, emit_timesteps=False))
        name, obs = sample.data  # The columns in the order of their sorted keys.
        np.testing.assert_array_equal(obs, np.arange(3, dtype=np.float32))
        assert name == b"step", name
    print("served and sampled one item")
    if binary:
        path = pathlib.Path(reverb.__file__).parent / "reverb_tf_server"
        # absl's --helpfull lists every flag (and exits 1).
        result = subprocess.run(
            [str(path), "--helpfull"], capture_output=True, text=True, timeout=60
        )
        assert "-config" in result.stdout + result.stderr, result
        print("reverb_tf_server --helpfull lists --config")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "path", type=pathlib.Path, help="a wheel, or a directory holding reverb_tf/"
    )
    parser.add_argument("--abi3", action="store_true", help="the extension is a stable-ABI build")
    args = parser.parse_args()
    started = time.perf_counter()
    if args.path.is_dir():
        check(args.path.resolve(), binary=False, abi3=args.abi3)
    else:
        with tempfile.TemporaryDirectory() as root:
            unpack(args.path, pathlib.Path(root))
            check(pathlib.Path(root), binary=True, abi3=args.abi3)
    elapsed = time.perf_counter() - started
    print(f"{platform.machine()}, Python {platform.python_version()}: {elapsed:.1f} s")


if __name__ == "__main__":
    main()
