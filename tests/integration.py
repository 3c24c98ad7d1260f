# SPDX-License-Identifier: Apache-2.0
"""Helpers shared by the end-to-end tests (test_*_integration.py).

Every such test starts `reverb_tf.Server` and therefore needs the native
module `reverb_tf._core`: without it they fail (ImportError), they are never
skipped.
"""

import collections
import os
import pathlib
import re
import shutil
import subprocess
import threading
import time
import urllib.request
from typing import Dict, Tuple

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

import reverb_tf as reverb

# Tests that restart a server on its old port take one outside the ephemeral range.
from reverb_tf._ports import port_outside_ephemeral_range  # noqa: F401 (re-exported to tests)

DEADLINE_S = 20.0
ROOT = pathlib.Path(__file__).resolve().parent.parent


def side_venv_python(env_var: str, setup_script: str) -> str:
    """The interpreter of a side venv that one of scripts/ makes (or checks).

    Args:
      env_var: The variable scripts/test.sh sets to it; used when set.
      setup_script: The script under scripts/ that makes the venv and prints
        its python last.

    Returns:
      The interpreter's path.

    Raises:
      pytest.fail.Exception: The variable is unset and the script is absent
        (a copy of tests/ run against a wheel) or failed.
    """
    explicit = os.environ.get(env_var)
    if explicit:
        return explicit
    setup = ROOT / "scripts" / setup_script
    if not setup.exists():  # a copy of tests/ run against a wheel
        pytest.fail(f"set {env_var} to the venv scripts/{setup_script} makes")
    result = subprocess.run(
        ["bash", str(setup)], capture_output=True, text=True, timeout=1200, check=False
    )
    if result.returncode != 0:
        pytest.fail(f"scripts/{setup_script} failed:\n{result.stderr[-3000:]}")
    return result.stdout.strip().splitlines()[-1]


# Files the tests read (fixtures written by earlier versions).
DATA_DIR = pathlib.Path(__file__).resolve().parent / "data"


@pytest.fixture
def make_server():
    servers = []

    def make(*tables, **kwargs):
        server = reverb.Server(list(tables), **kwargs)
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


def table(name="t", sampler=None, remover=None, max_size=100, limiter=None, **kwargs):
    return reverb.Table(
        name=name,
        sampler=sampler or reverb.selectors.Uniform(),
        remover=remover or reverb.selectors.Fifo(),
        max_size=max_size,
        rate_limiter=limiter or reverb.rate_limiters.MinSize(1),
        **kwargs,
    )


def write_frames(client, table_name: str, n: int) -> None:
    """Writes n different 84x84x4 uint8 frames (28 KB each), an item per frame."""
    frames = np.random.default_rng(0).integers(0, 256, (n, 84, 84, 4), dtype=np.uint8)
    with client.trajectory_writer(num_keep_alive_refs=1) as writer:
        for frame in frames:
            writer.append({"frame": frame})
            writer.create_item(table_name, 1.0, {"frame": writer.history["frame"][-1]})


def wait_until(condition, what):
    """Waits for `condition()` with a deadline (the server offers no event)."""
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.01)


def sample_one(client, name="t"):
    return next(client.sample(name, 1, emit_timesteps=False))


class Background:
    """Runs `fn` in a thread and keeps its result or exception."""

    def __init__(self, fn):
        self.result = self.error = None
        self.thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self.thread.start()

    def _run(self, fn):
        try:
            self.result = fn()
        except BaseException as e:  # pylint: disable=broad-except
            self.error = e

    def join(self, timeout: float = DEADLINE_S, what: str = "background call"):
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"{what} did not finish within {timeout:.0f} s"
        if self.error is not None:
            raise self.error
        return self.result


class CoreWriterProxy:
    """Stands in for a writer's native object (`writer._writer`), forwarding
    every call to it; subclasses intercept some."""

    def __init__(self, core):
        self._core = core

    def __getattr__(self, name):
        return getattr(self._core, name)


class GeneralPathOnly(CoreWriterProxy):
    """A native writer whose common-case calls decline: every append and
    create_item takes the Python adapter's general path."""

    def try_append(self, *args):
        return False

    def try_create_item(self, *args):
        return False


def insert_values(client, name, priorities):
    """Inserts items 0, 1, ... (one step each) with the given priorities."""
    for value, priority in enumerate(priorities):
        client.insert(np.int64(value), priorities={name: priority})


def write_from_child(port: int, n: int, results) -> None:
    """A child process's work: write `n` items to table 't' and report to `results` (a queue).

    Puts ("ok", None) or ("error", exception type name, message).
    """
    try:
        client = reverb.Client(f"localhost:{port}")
        with client.trajectory_writer(1) as writer:
            for i in range(n):
                writer.append({"x": np.float32(i)})
                writer.create_item("t", 1.0, {"x": writer.history["x"][-1]})
        results.put(("ok", None, ""))
    except Exception as e:  # pylint: disable=broad-except
        results.put(("error", type(e).__name__, str(e)))


def value_of(sample):
    """The value an `insert_values` item holds (inserts have a time dim of 1)."""
    data = sample.data[0]
    assert data.shape == (1,)
    return int(data[0])


def listening_addresses(port):
    """The local addresses (hex, as /proc/net/tcp* gives them) on which a socket
    of this machine listens at `port`."""
    addresses = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                address, hex_port = local.split(":")
                if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                    addresses.add(address)
    return addresses


def read_line(pipe, what: str, timeout: float = 60.0) -> str:
    """Reads one line from a child process's pipe, failing the test if none comes.

    Args:
      pipe: the child's stdout or stderr (text mode).
      what: what the line is, for the failure message.
      timeout: seconds to wait.

    Returns:
      The line, with its newline ('' if the child closed the pipe).

    Raises:
      AssertionError: no line within `timeout`.
    """
    return Background(pipe.readline).join(timeout, f"reading the {what}")


def native_stacks(pid: int, frames: int = 12) -> str:
    """The native stacks of process `pid`'s threads, identical ones counted once.

    For the failure message of a test that found a server hung: it tells
    where every thread waits. Needs gdb; says so if there is none.

    Args:
      pid: the process to attach to (briefly stopped while gdb reads it).
      frames: innermost frames kept per thread.

    Returns:
      Text: each distinct stack with the number of threads showing it.
    """
    if shutil.which("gdb") is None:
        return "(no gdb on this machine: no native stacks)"
    try:
        out = subprocess.run(
            ["gdb", "-p", str(pid), "-batch", "-nx", "-ex", f"thread apply all bt {frames}"],
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
    except subprocess.TimeoutExpired:
        return "(gdb did not finish within 120 s)"
    stacks = collections.Counter()
    current = []
    for line in out.splitlines() + ["Thread"]:
        if line.startswith("Thread"):
            if current:
                stacks["\n".join(current)] += 1
            current = []
        elif line.startswith("#"):
            # "#3  0x00007f... in fn(sig) (args) at file:line": keep fn and where.
            frame = re.sub(r"^#\d+\s+(0x[0-9a-f]+ in )?", "", line)
            where = ""
            for word in (" at ", " from "):
                if word in frame:
                    frame, where = frame.rsplit(word, 1)
                    where = word + where
                    break
            if frame.endswith(")") and " (" in frame:
                frame = frame[: frame.rindex(" (")]  # the arguments' values
            current.append(f"  {frame[:160]}{where}")
    return "\n".join(f"{count} thread(s):\n{stack}" for stack, count in stacks.most_common())


def proc_count(pid, what):
    """How many entries /proc/PID/WHAT has ("task": threads, "fd": open fds)."""
    return len(os.listdir(f"/proc/{pid}/{what}"))


def proc_status_bytes(pid: int, field: str) -> int:
    """A size of /proc/PID/status in bytes ("VmRSS": resident, "VmSize": address space)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"/proc/{pid}/status has no {field}")


def uniform_table_config(port: int = 0, max_size: int = 10) -> str:
    """A reverb_tf_server textproto: one uniform table "t" that never rate-limits."""
    return (
        f'port: {port} tables {{ table_name: "t" sampler {{ uniform: true }} '
        f"remover {{ fifo: true }} max_size: {max_size} rate_limiter {{ "
        "samples_per_insert: 1 min_size_to_sample: 1 min_diff: -1e300 max_diff: 1e300 } }"
    )


# Bearer tokens of the test PKI's tokens file, by role.
TOKENS = {"reader": "tok-reader-1", "writer": "tok-writer-2", "admin": "tok-admin-3"}


def _openssl(*args, cwd):
    import subprocess  # pylint: disable=g-import-not-at-top

    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_test_pki(d):
    """Writes a test PKI into directory `d` (a pathlib.Path) and returns `d`.

    ca.pem/.key: the CA; server.pem/.key: signed by it, for localhost,
    127.0.0.1 and replay.test; client.pem/.key: a client certificate signed
    by it; stranger.pem: a CA nobody trusts, and rogue.pem/.key a client
    certificate it signed; tokens.txt: a tokens file with TOKENS.
    """
    for ca in ["ca", "stranger"]:
        _openssl(
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            f"{ca}.key",
            "-out",
            f"{ca}.pem",
            "-days",
            "2",
            "-subj",
            f"/CN=reverb_tf test {ca}",
            cwd=d,
        )
    (d / "server.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1,DNS:replay.test\n")
    (d / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    for name, ca in [("server", "ca"), ("client", "ca"), ("rogue", "stranger")]:
        _openssl(
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            "-subj",
            f"/CN={name}",
            cwd=d,
        )
        ext = "server.ext" if name == "server" else "client.ext"
        _openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            f"{ca}.pem",
            "-CAkey",
            f"{ca}.key",
            "-CAcreateserial",
            "-out",
            f"{name}.pem",
            "-days",
            "2",
            "-extfile",
            ext,
            cwd=d,
        )
    (d / "tokens.txt").write_text(
        "# role token\n" + "".join(f"{role} {token}\n" for role, token in TOKENS.items())
    )
    return d


MetricSamples = Dict[Tuple[str, Tuple[Tuple[str, str], ...]], float]


def scrape_metrics(port: int) -> Tuple[MetricSamples, Dict[str, str]]:
    """Scrapes a server's /metrics.

    Returns every sample by (name, sorted labels), and each family's type.
    """
    with urllib.request.urlopen(f"http://localhost:{port}/metrics", timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = response.read().decode()
    samples, types = {}, {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples, types


def metric_value(samples: MetricSamples, name: str, **labels: str) -> float:
    """The sample `name{labels}` of a scrape_metrics() result (KeyError if absent)."""
    return samples[(name, tuple(sorted(labels.items())))]
