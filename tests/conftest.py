# SPDX-License-Identifier: Apache-2.0
"""Shared pytest fixtures for reverb_tf's Python tests.

The tests run against whichever reverb_tf is imported: a checkout's (its
.pth in .venv, native files copied next to the Python files by
scripts/setup.sh) or an installed wheel's (scripts/check_wheel.sh runs a
copy of tests/ in a venv with the wheel and sets REVERB_TF_TEST_INSTALLED=1,
which makes the session fail unless reverb_tf comes from site-packages).
"""

import faulthandler
import os
import pathlib
import re
import subprocess
import sysconfig
from collections.abc import Iterator

import pytest

# No test may take longer than this. Past it the watchdog prints every
# thread's stack and ends the session: a hung native call must cost CI
# minutes and leave a trace, not its whole budget. The slowest test takes
# well under a minute on a loaded 2-core machine.
WATCHDOG_S = 300


def _package_dir() -> pathlib.Path:
    import reverb_tf  # pylint: disable=g-import-not-at-top

    return pathlib.Path(reverb_tf.__file__).resolve().parent


def pytest_report_header(config):
    del config
    return f"reverb_tf: {_package_dir()}"


# The session's real stderr: while a test runs, fd 2 is pytest's capture
# file, which a watchdog exit would lose.
_stderr_copy = None


# Where a test can run, as markers the tests carry (each with its reason), so
# that a copy of tests/ run against an installed wheel (check_wheel.sh
# --pytest) runs every test that does not say why it cannot:
#   checkout_only: reads the source tree (sources, scripts, the Bazel
#     outputs), which a wheel does not ship;
#   installed_only: checks what only an installed wheel has;
#   side_venv: needs a side venv of scripts/setup_*.sh whose pinned packages
#     exist for Python 3.11 only (dm-reverb 0.14 and TF 2.14, the CPU
#     PyTorch file, TF-Agents 0.19); left out of a portable run
#     (REVERB_TF_TEST_PORTABLE=1, builds on other Pythons).
PLACE_MARKERS = {
    "checkout_only": "runs in a source checkout, not against an installed wheel",
    "installed_only": "runs against an installed wheel only",
    "side_venv": "needs a Python 3.11 side venv; not in a portable run",
}


def pytest_configure(config):
    global _stderr_copy
    for name, meaning in PLACE_MARKERS.items():
        config.addinivalue_line("markers", f"{name}(reason): {meaning}")
    _stderr_copy = os.dup(2)
    if os.environ.get("REVERB_TF_TEST_INSTALLED"):
        site_packages = {
            pathlib.Path(sysconfig.get_paths()[key]).resolve() for key in ("purelib", "platlib")
        }
        if _package_dir().parent not in site_packages:
            raise pytest.UsageError(
                f"REVERB_TF_TEST_INSTALLED is set but reverb_tf is "
                f"{_package_dir()}, not an installed package"
            )


def pytest_collection_modifyitems(config, items):
    """Skips the tests that cannot run in this place, with their markers' reasons.

    Raises:
      pytest.UsageError: A place marker carries no reason.
    """
    del config
    installed = bool(os.environ.get("REVERB_TF_TEST_INSTALLED"))
    portable = bool(os.environ.get("REVERB_TF_TEST_PORTABLE"))
    out_of_place = {
        "checkout_only": installed,
        "installed_only": not installed,
        "side_venv": portable,
    }
    for item in items:
        for name in PLACE_MARKERS:
            marker = item.get_closest_marker(name)
            if marker is None:
                continue
            reason = marker.kwargs.get("reason") or (marker.args[0] if marker.args else "")
            if not reason:
                raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{name} needs a reason")
            if out_of_place[name]:
                item.add_marker(pytest.mark.skip(reason=f"{name}: {reason}"))


@pytest.fixture(autouse=True)
def watchdog():
    """Bounds every test's time (see WATCHDOG_S); a hang ends the session with stacks."""
    faulthandler.dump_traceback_later(WATCHDOG_S, exit=True, file=_stderr_copy)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="session")
def package_dir() -> pathlib.Path:
    """The directory of the imported reverb_tf package, native files included."""
    path = _package_dir()
    if not (path / "libreverb_tf.so").exists():
        pytest.fail(f"{path} has no native files: run scripts/setup.sh first")
    return path


@pytest.fixture(scope="session")
def package_path(package_dir, tmp_path_factory) -> str:
    """A directory holding only the reverb_tf package under test (checkout or wheel).

    For the interpreters of side venvs: put on their PYTHONPATH, it gives them
    this package and nothing else of the checkout or of the main venv.
    """
    path = tmp_path_factory.mktemp("package_only")
    (path / "reverb_tf").symlink_to(package_dir, target_is_directory=True)
    return str(path)


@pytest.fixture(scope="session")
def server_binary(package_dir) -> str:
    """The reverb_tf_server binary of the package (the console script runs it)."""
    path = package_dir / "reverb_tf_server"
    if not path.exists():
        pytest.fail(f"{path} missing: run scripts/setup.sh")
    return str(path)


@pytest.fixture
def start_server():
    """Starts a server command (the binary, or its Python entry point).

    Returns a function `start(*command)` that launches the command, waits for
    its one readiness line and returns `(process, port)`; it fails the test,
    with the server's stderr, if the line does not come.
    """

    def start(*command):
        process = subprocess.Popen(
            list(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        from integration import read_line  # pylint: disable=g-import-not-at-top

        line = read_line(process.stdout, "readiness line from " + command[0])
        match = re.search(r"on port (\d+)", line)
        if match is None:
            process.kill()
            pytest.fail(f"no readiness line, got {line!r} / {process.stderr.read()!r}")
        return process, int(match.group(1))

    return start


@pytest.fixture(scope="session")
def pki(tmp_path_factory):
    """A test CA with server and client certificates and a tokens file (integration.py)."""
    from integration import make_test_pki  # pylint: disable=g-import-not-at-top

    return make_test_pki(tmp_path_factory.mktemp("pki"))


def _set_in_process(enabled: bool) -> bool:
    """Sets whether clients reach servers of this process directly; returns the old value."""
    from reverb_tf import _native  # pylint: disable=g-import-not-at-top

    core = _native.core()
    before = core.in_process_enabled()
    core.set_in_process_enabled(enabled)
    return before


@pytest.fixture
def transport(request):
    """Runs a test with calls to in-process servers over gRPC or in-process.

    Modules that set `BOTH_TRANSPORTS = True` get every test twice, as
    `[grpc]` and `[in_process]` (local_server.h).
    """
    before = _set_in_process(request.param == "in_process")
    yield request.param
    _set_in_process(before)


@pytest.fixture
def over_grpc():
    """For tests of what only the RPC path has (stream limits, RPC metrics)."""
    before = _set_in_process(False)
    yield
    _set_in_process(before)


def pytest_generate_tests(metafunc):
    if getattr(metafunc.module, "BOTH_TRANSPORTS", False):
        if "transport" not in metafunc.fixturenames:
            metafunc.fixturenames.append("transport")
        metafunc.parametrize("transport", ["grpc", "in_process"], indirect=True)


def _may_mount() -> bool:
    """Whether this process holds CAP_SYS_ADMIN (capability 21) in its effective set."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> 21 & 1)
    return False


SMALL_DISK_BYTES = 8 << 20


@pytest.fixture
def small_disk(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    """A tmpfs of SMALL_DISK_BYTES (8 MiB) at tmp_path/disk, unmounted afterwards."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={SMALL_DISK_BYTES}", "tmpfs", str(disk)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        reason = f"cannot mount a tmpfs at {disk}: {mounted.stderr.strip()}"
        # CI runs with the right to mount, where a failed mount is a broken
        # environment that would otherwise pass this test by skipping it. A
        # process without it (not root, or root in a container that drops
        # CAP_SYS_ADMIN, as the wheel's container build does) skips, saying so.
        if _may_mount():
            pytest.fail(reason)
        pytest.skip(f"{reason} (this process lacks CAP_SYS_ADMIN, which mount needs)")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
