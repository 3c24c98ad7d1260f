# SPDX-License-Identifier: Apache-2.0
"""Picking a port for a server that must come back on the same one."""

import random
import socket
from typing import Sequence


def port_outside_ephemeral_range(hosts: Sequence[str] = ("127.0.0.1", "::1")) -> int:
    """A free port below the kernel's ephemeral range, for a server that restarts.

    A port the kernel picks for port 0 lies in the ephemeral range, the one
    outgoing connections take their local ports from. While a server on such
    a port is down, a client reconnecting to it can be handed that very port
    and connect to itself (TCP simultaneous open); the restarted server then
    cannot bind it. Real deployments use fixed ports below the range (e.g.
    8000); so do replay shards that restart on their old port.

    Args:
      hosts: Addresses on which the port must be free.

    Returns:
      A port in [10000, start of the ephemeral range) that could be bound on
      every one of `hosts` just now.

    Raises:
      RuntimeError: If 100 random ports in that range were all taken.
    """
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
    rng = random.Random()
    for _ in range(100):
        port = rng.randrange(10000, low)
        try:
            for host in hosts:
                family = socket.AF_INET6 if ":" in host else socket.AF_INET
                with socket.socket(family, socket.SOCK_STREAM) as sock:
                    sock.bind((host, port))
            return port
        except OSError:
            continue
    raise RuntimeError(f"no free port in [10000, {low})")
