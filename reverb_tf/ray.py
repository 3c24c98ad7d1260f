# SPDX-License-Identifier: Apache-2.0
"""Replay shards on a Ray cluster: placed, checkpointed and restarted by Ray.

`ReplayCluster` starts N replay servers ("shards") of the same tables, each
a Ray actor in a bundle of one placement group, each with a checkpoint
directory of its own. Its `addresses` are what every client path takes as
one target (`Client`, writers, `ReverbDataset`, `TFClient`): writers spread
over the shards, datasets merge them in proportion to their sizes, and
priority updates reach the shard that holds each key (docs/scale_out.md).

When a shard's process dies, Ray restarts the actor (`max_restarts`) in the
same bundle, so on the same node; the new actor loads the shard's newest
checkpoint and serves on the port the shard had, so clients reconnect to the
address they knew. In between, datasets go on with the other shards,
writers on the dead shard fail with `UnavailableError`, and new writers
avoid it.

Actors and learners can be Ray tasks or actors themselves: they need only
the address list, a list of strings.

Ray is an optional dependency: `pip install reverb-tf[ray]`.
"""

import json
import os
import time
from typing import Any, Dict, List, Optional, Sequence

from reverb_tf import _ports

_SHARD_STATE = "shard.json"


def _ray() -> Any:
    try:
        import ray  # pylint: disable=g-import-not-at-top
    except ImportError as e:
        raise ImportError("reverb_tf.ray needs Ray: pip install 'reverb-tf[ray]'") from e
    return ray


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class ReplayShard:
    """One replay server inside a Ray actor (the body of the actor class).

    The shard's port is chosen on its first start (below the ephemeral range,
    so no reconnecting client can take it while the shard is down) and kept,
    with a count of starts, in `<checkpoint_dir>/shard.json`, where a
    restarted actor finds it.
    """

    def __init__(
        self,
        tables: Sequence[Any],
        index: int,
        checkpoint_dir: str,
        host: Optional[str],
        checkpoint_interval: Optional[float],
        metrics: bool,
        tls: Optional[Any] = None,
        auth_tokens_file: Optional[str] = None,
    ) -> None:
        """Starts the shard's server, loading its newest checkpoint if any.

        Args:
          tables: The `reverb_tf.Table`s every shard holds.
          index: The shard's position in its cluster.
          checkpoint_dir: The shard's own checkpoint directory.
          host: Interface to listen on; None: the node's IP address.
          checkpoint_interval: Seconds between the server's own checkpoints;
            None: only when asked.
          metrics: Serve Prometheus metrics on a port of its own.
          tls: The server's `reverb_tf.security.ServerTls`, or None.
          auth_tokens_file: The server's tokens file, or None.

        Raises:
          ReverbError: If the server cannot start (e.g. a damaged checkpoint).
        """
        ray = _ray()
        from reverb_tf import checkpointers  # pylint: disable=g-import-not-at-top
        from reverb_tf import server as server_lib  # pylint: disable=g-import-not-at-top

        self._index = index
        self._node_ip = ray.util.get_node_ip_address()
        bind = host or self._node_ip
        advertised = self._node_ip if bind in ("0.0.0.0", "::") else bind
        os.makedirs(checkpoint_dir, exist_ok=True)
        state_path = os.path.join(checkpoint_dir, _SHARD_STATE)
        state: Dict[str, Any] = {}
        if os.path.exists(state_path):
            with open(state_path) as f:
                state = json.load(f)
        port = state.get("port") or _ports.port_outside_ephemeral_range(
            [advertised] if bind not in ("0.0.0.0", "::") else ["0.0.0.0"]
        )
        state["starts"] = state.get("starts", 0) + 1
        started = time.monotonic()
        self._server = server_lib.Server(
            tables,
            port=port,
            host=bind,
            checkpointer=checkpointers.DefaultCheckpointer(checkpoint_dir),
            checkpoint_interval=checkpoint_interval,
            metrics_port=0 if metrics else None,
            tls=tls,
            auth_tokens_file=auth_tokens_file,
        )
        self._start_seconds = time.monotonic() - started
        state["port"] = self._server.port
        temporary = f"{state_path}.tmp"
        with open(temporary, "w") as f:
            json.dump(state, f)
        os.replace(temporary, state_path)
        self._starts = state["starts"]
        self._address = _host_port(advertised, self._server.port)

    def address(self) -> str:
        """The shard's "host:port"."""
        return self._address

    def status(self) -> Dict[str, Any]:
        """What the shard is and how it started.

        Returns:
          A dict: index, address, pid, node_ip, starts (how often a server
          of this shard started on its checkpoint directory: 2 and more after
          restarts), loaded_checkpoint (path or None), start_seconds (server
          construction, checkpoint load included), metrics_port.
        """
        return {
            "index": self._index,
            "address": self._address,
            "pid": os.getpid(),
            "node_ip": self._node_ip,
            "starts": self._starts,
            "loaded_checkpoint": self._server.loaded_checkpoint,
            "start_seconds": self._start_seconds,
            "metrics_port": self._server.metrics_port,
        }

    def stop(self) -> None:
        """Stops the server (the actor stays until killed)."""
        self._server.stop()


class ReplayCluster:
    """N replay shards of the same tables, run and kept alive by Ray.

    Use as a context manager, or call `shutdown`. Needs `ray.init()` first
    (or a Ray cluster to connect to).
    """

    def __init__(
        self,
        tables: Sequence[Any],
        num_shards: int,
        checkpoint_root: str,
        *,
        cpus_per_shard: float = 1.0,
        memory_per_shard: Optional[int] = None,
        placement_strategy: str = "SPREAD",
        host: Optional[str] = None,
        checkpoint_interval: Optional[float] = None,
        max_restarts: int = -1,
        metrics: bool = False,
        tls: Optional[Any] = None,
        auth_tokens_file: Optional[str] = None,
        client_tls: Optional[Any] = None,
        client_token: Optional[str] = None,
        start_timeout: float = 120.0,
    ) -> None:
        """Starts the shards and waits until each serves.

        Args:
          tables: The `reverb_tf.Table`s each shard holds (pickled to the
            actors).
          num_shards: How many shards.
          checkpoint_root: Directory under which shard i checkpoints into
            `shard-<i>`; it must be on a file system the shard's node can
            write (a node-local path is enough: a shard restarts on its node).
          cpus_per_shard: Ray CPUs each shard reserves.
          memory_per_shard: Bytes of Ray memory each shard reserves; None: no
            reservation.
          placement_strategy: Of the shards' placement group: "SPREAD"
            (across nodes where it can), "STRICT_SPREAD" (one node each),
            "PACK" or "STRICT_PACK".
          host: Interface each shard listens on; None: its node's IP address,
            which other nodes can reach ("0.0.0.0" for every interface).
          checkpoint_interval: Seconds between each shard's own checkpoints,
            which bound what a crash loses; None: only `checkpoint()`.
          max_restarts: How often Ray restarts a dead shard; -1: always.
          metrics: Each shard serves Prometheus metrics (see `status`).
          tls: Every shard serves TLS (`reverb_tf.security.ServerTls`; its
            files must be readable where the shards run).
          auth_tokens_file: Every shard asks for bearer tokens
            (`reverb_tf.security`); the file must be readable where they run.
          client_tls: The `reverb_tf.security.ClientTls` of the clients this
            object makes (`client`, `wait_until_serving`, `checkpoint`);
            None: the process's defaults.
          client_token: Their bearer token; None: the process's default.
          start_timeout: Seconds to wait for the placement group and for
            every shard to serve.

        Raises:
          ValueError: If `num_shards` < 1 or no tables are given.
          ImportError: If Ray is not installed.
          TimeoutError: If the shards do not start within `start_timeout`.
          ray.exceptions.RayActorError: If a shard fails to start (its
            error, e.g. a damaged checkpoint, says why).
        """
        if num_shards < 1:
            raise ValueError(f"num_shards must be >= 1, got {num_shards}")
        if not tables:
            raise ValueError("at least one table must be given")
        ray = _ray()
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy  # pylint: disable=g-import-not-at-top

        self._num_shards = num_shards
        self._client_security = {"tls": client_tls, "token": client_token}
        bundle: Dict[str, float] = {"CPU": cpus_per_shard}
        if memory_per_shard is not None:
            bundle["memory"] = memory_per_shard
        self._placement_group = ray.util.placement_group(
            [dict(bundle)] * num_shards, strategy=placement_strategy
        )
        try:
            ray.get(self._placement_group.ready(), timeout=start_timeout)
        except ray.exceptions.GetTimeoutError as e:
            ray.util.remove_placement_group(self._placement_group)
            raise TimeoutError(
                f"Ray could not place {num_shards} shards of {bundle} "
                f"({placement_strategy}) within {start_timeout} s"
            ) from e
        actor_class = ray.remote(ReplayShard)
        self._shards = []
        for i in range(num_shards):
            options = {
                "num_cpus": cpus_per_shard,
                "max_restarts": max_restarts,
                # Calls made while a shard restarts wait for the new actor.
                "max_task_retries": -1,
                "scheduling_strategy": PlacementGroupSchedulingStrategy(
                    placement_group=self._placement_group, placement_group_bundle_index=i
                ),
            }
            if memory_per_shard is not None:
                options["memory"] = memory_per_shard
            self._shards.append(
                actor_class.options(**options).remote(
                    list(tables),
                    i,
                    os.path.join(checkpoint_root, f"shard-{i}"),
                    host,
                    checkpoint_interval,
                    metrics,
                    tls,
                    auth_tokens_file,
                )
            )
        try:
            self._addresses = ray.get(
                [s.address.remote() for s in self._shards], timeout=start_timeout
            )
        except ray.exceptions.GetTimeoutError as e:
            self.shutdown()
            raise TimeoutError(f"the shards did not serve within {start_timeout} s") from e

    @property
    def addresses(self) -> List[str]:
        """Each shard's "host:port", in shard order: a target for every client."""
        return list(self._addresses)

    @property
    def server_address(self) -> str:
        """The shards as one comma-separated target string."""
        return ",".join(self._addresses)

    @property
    def shards(self) -> List[Any]:
        """The shards' Ray actor handles (`ReplayShard` methods)."""
        return list(self._shards)

    def client(self) -> Any:
        """A `reverb_tf.Client` of every shard (with `client_tls`, `client_token`).

        Returns:
          The client.
        """
        from reverb_tf import client as client_lib  # pylint: disable=g-import-not-at-top

        return client_lib.Client(self._addresses, **self._client_security)

    def status(self, timeout: Optional[float] = 60.0) -> List[Dict[str, Any]]:
        """`ReplayShard.status` of every shard (waits for restarting ones).

        Args:
          timeout: Seconds to wait for the answers.

        Returns:
          One dict per shard, in shard order.
        """
        return _ray().get([s.status.remote() for s in self._shards], timeout=timeout)

    def wait_until_serving(self, timeout: float = 60.0) -> None:
        """Blocks until every shard answers server_info (after a restart).

        Args:
          timeout: Seconds to wait in all.

        Raises:
          TimeoutError: If some shard does not answer in time.
        """
        from reverb_tf import client as client_lib  # pylint: disable=g-import-not-at-top
        from reverb_tf import errors  # pylint: disable=g-import-not-at-top

        deadline = time.monotonic() + timeout
        for address in self._addresses:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"shard {address} did not serve within {timeout} s")
                try:
                    client_lib.Client(address, **self._client_security).server_info(
                        timeout=min(left, 5.0)
                    )
                    break
                except (errors.DeadlineExceededError, errors.UnavailableError):
                    continue

    def checkpoint(self) -> List[str]:
        """Checkpoints every shard.

        Returns:
          Each shard's checkpoint path, in shard order.
        """
        paths = self.client().checkpoint()
        return [paths] if isinstance(paths, str) else paths

    def shutdown(self) -> None:
        """Stops every shard for good and frees the placement group. Idempotent."""
        ray = _ray()
        for shard in getattr(self, "_shards", []):
            ray.kill(shard, no_restart=True)
        self._shards = []
        if getattr(self, "_placement_group", None) is not None:
            ray.util.remove_placement_group(self._placement_group)
            self._placement_group = None

    def __enter__(self) -> "ReplayCluster":
        return self

    def __exit__(self, *unused_exc_info: Any) -> None:
        self.shutdown()
