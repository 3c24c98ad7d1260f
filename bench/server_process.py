# SPDX-License-Identifier: Apache-2.0
"""The `reverb_tf_server` binary in a child process, as our benchmarks run it.

A module, not a script.
"""

import os
import pathlib
import re
import subprocess
from typing import Optional, Tuple


def server_binary() -> str:
    """The package's `reverb_tf_server` (scripts/sync_native.sh copies it there)."""
    import reverb_tf  # pylint: disable=g-import-not-at-top

    return str(pathlib.Path(reverb_tf.__file__).parent / "reverb_tf_server")


def start_server(
    config: str, *flags: str, stderr: Optional[int] = None
) -> Tuple[subprocess.Popen, int]:
    """Starts the binary with the text-format `config` and returns it once it serves.

    Args:
      config: A ReverbServerConfig in protobuf text format (`port: 0` for a free port).
      *flags: More command-line flags.
      stderr: Where its stderr goes (subprocess.PIPE, DEVNULL; None: ours).

    Returns:
      The process and the port it serves on (from its readiness line).
    """
    process = subprocess.Popen(
        [server_binary(), "--config=" + config, *flags],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
    )
    port = int(re.search(r"on port (\d+)", process.stdout.readline()).group(1))
    return process, port


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of process `pid`, from /proc."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int:
    """The resident set size of process `pid`, from /proc."""
    status = pathlib.Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) * 1024


def table_config(name: str, max_size: int, sampler: str = "uniform: true") -> str:
    """One table of a ReverbServerConfig in text format.

    Args:
      name: The table's name.
      max_size: Its capacity.
      sampler: The sampler's text (e.g. "prioritized { priority_exponent: 0.6 }").

    Returns:
      A `tables { ... }` block: Fifo remover and a rate limiter that lets
      everything through once one item is in (MinSize(1)).
    """
    return (
        f'tables {{ table_name: "{name}" sampler {{ {sampler} }} remover {{ fifo: true }} '
        f"max_size: {max_size} rate_limiter {{ samples_per_insert: 1 min_size_to_sample: 1 "
        "min_diff: -1e300 max_diff: 1e300 } }"
    )
