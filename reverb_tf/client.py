# SPDX-License-Identifier: Apache-2.0
"""The Python client of a reverb_tf server.

`Client` inserts, samples, updates priorities and reads table metadata. For
writing, prefer `Client.trajectory_writer`; for training, prefer the datasets
(they stream many samples per request). `Writer` is dm-reverb's legacy
sequence writer, kept for code that still uses `Client.writer`.
"""

import collections
import functools
from typing import Any, Callable, Dict, Generator, List, Optional, Sequence, Union

from absl import logging
import numpy as np
import tree

from reverb_tf import _arguments
from reverb_tf import _native
from reverb_tf import batched_trajectory_writer as batched_trajectory_writer_lib
from reverb_tf import errors
from reverb_tf import replay_sample
from reverb_tf import reverb_types
from reverb_tf import security
from reverb_tf import signatures
from reverb_tf import trajectory_writer as trajectory_writer_lib
from reverb_tf.cc import schema_pb2

# dm-reverb's TrajectoryWriter has no limit on unconfirmed items (flush is
# the caller's brake); a large window keeps create_item from blocking.
_UNLIMITED_IN_FLIGHT_ITEMS = 1_000_000


def check_sampler_arguments(
    max_in_flight_samples_per_worker: int,
    num_workers_per_iterator: int,
    max_samples_per_stream: int,
    max_samples: int,
    rate_limiter_timeout_ms: int,
) -> None:
    """Checks the knobs the readers (datasets, NumpyDataset) share.

    Args:
      max_in_flight_samples_per_worker: Must be >= 1.
      num_workers_per_iterator: -1 or >= 1.
      max_samples_per_stream: -1 or >= 1.
      max_samples: -1 or >= 1.
      rate_limiter_timeout_ms: >= -1.

    Raises:
      ValueError: Naming the first argument out of range.
    """
    # dm-reverb's words, which programs match on.
    if max_in_flight_samples_per_worker < 1:
        raise ValueError(
            f"max_in_flight_samples_per_worker ({max_in_flight_samples_per_worker}) "
            "must be a positive integer"
        )
    for name, value in [
        ("num_workers_per_iterator", num_workers_per_iterator),
        ("max_samples_per_stream", max_samples_per_stream),
        ("max_samples", max_samples),
    ]:
        if value == 0 or value < -1:
            raise ValueError(f"{name} ({value}) must be a positive integer or -1")
    if rate_limiter_timeout_ms < -1:
        raise ValueError(
            f"rate_limiter_timeout_ms ({rate_limiter_timeout_ms}) must be an integer >= -1"
        )


def _in_flight_limit(max_in_flight_items: Optional[int]) -> int:
    """A writer's in-flight window: None is unlimited.

    Raises:
      ValueError: If `max_in_flight_items` < 1.
    """
    if max_in_flight_items is None:
        return _UNLIMITED_IN_FLIGHT_ITEMS
    if max_in_flight_items < 1:
        raise ValueError(f"max_in_flight_items ({max_in_flight_items}) must be a positive integer")
    return int(max_in_flight_items)


# Client.sample: samples requested ahead of what the generator has yielded.
_SAMPLES_IN_FLIGHT = 256


def table_info(info: Any, signature: Optional[Any]) -> reverb_types.TableInfo:
    """Converts the native module's table info into dm-reverb's TableInfo.

    Args:
      info: A `_core.TableInfo`.
      signature: The table's decoded nested signature, or None.

    Returns:
      The `reverb_types.TableInfo`, read from the `schema_pb2.TableInfo` the
      native core serializes (the message remote clients get too).
    """
    return reverb_types.TableInfo.from_proto(
        schema_pb2.TableInfo.FromString(info.serialized_proto()), signature
    )


def _timeout_s(timeout_ms: Optional[float]) -> Optional[float]:
    return None if timeout_ms is None else timeout_ms / 1000.0


# What a server address may be: one target, or several naming shards.
ServerAddress = Union[str, Sequence[str]]


def target_string(server_address: ServerAddress) -> str:
    """The one target string a server address (or a list of shards) stands for.

    A list or tuple of addresses names the shards of one set of tables; it
    becomes the comma-separated target the native client parses
    (docs/scale_out.md). A string is returned as it is.

    Args:
      server_address: "host:port", any gRPC target, a comma-separated list of
        them, or a list or tuple of them.

    Returns:
      The target string.

    Raises:
      ValueError: If a list is empty or an element is empty or not a string.
    """
    if isinstance(server_address, str):
        return server_address
    if isinstance(server_address, (bytes, bytearray)):
        return bytes(server_address).decode()
    addresses = list(server_address)
    if not addresses or not all(isinstance(a, str) and a.strip() for a in addresses):
        raise ValueError(
            "a list of server addresses must be non-empty and hold non-empty strings, "
            f"got {server_address!r}"
        )
    return ",".join(a.strip() for a in addresses)


class Writer:
    """dm-reverb's legacy writer: items are the last N appended steps.

    Created by `Client.writer`. Every step must have the same structure, and
    every item references all columns of its last `num_timesteps` steps, so
    samples have a leading time dimension. Prefer `TrajectoryWriter`.
    """

    def __init__(
        self,
        core_writer: Any,
        max_sequence_length: int,
        check_table: Optional[Callable[[str], None]] = None,
    ) -> None:
        """Wraps a native writer. Use `Client.writer` instead.

        Args:
          core_writer: A `_core.TrajectoryWriter`.
          max_sequence_length: The longest item that can be created.
          check_table: Raises if the server has no such table; called once
            per table name, on its first item.
        """
        self._check_table = check_table
        self._known_tables: set = set()
        self._writer = core_writer
        self._steps: collections.deque = collections.deque(maxlen=max_sequence_length)
        # Leaves per step, fixed by the first step.
        self._num_leaves: Optional[int] = None
        self._closed = False

    def __enter__(self) -> "Writer":
        if self._closed:
            raise ValueError("Cannot reuse already closed Writer")
        return self

    def __exit__(self, *unused_exc_info: Any) -> None:
        if self._closed:
            # As dm-reverb: leaving a `with` block of a writer closed inside it.
            raise self._closed_error("Flush")
        self.close()

    @staticmethod
    def _closed_error(method: str) -> errors.FailedPreconditionError:
        # dm-reverb's words; a RuntimeError as there.
        return errors.FailedPreconditionError(
            f"Calling method {method} after Close has been called"
        )

    def __del__(self) -> None:
        if getattr(self, "_closed", True):
            return
        logging.warning("reverb_tf.Writer deleted without calling close(); closing it")
        try:
            self.close()
        except Exception:  # pylint: disable=broad-except
            # Errors cannot propagate out of garbage collection.
            pass

    def append(self, data: Any) -> None:
        """Appends one step; items reference the most recent steps.

        Args:
          data: The step (a nested structure of array-likes). Every step must
            have the same structure, dtypes and shapes.

        Raises:
          InvalidArgumentError: (a ValueError) If the step's structure,
            dtypes or shapes differ from the first step's.
          TypeError: If a leaf is None or no array-like value (also when the
            writer is closed).
          ReverbError: If the native writer fails.
        """
        flat = tree.flatten(data)
        for i, value in enumerate(flat):
            if value is None:
                # TypeError, as dm-reverb raises for a None leaf here.
                raise TypeError(
                    f"Writer.append: leaf {i} of the step is None; every step of the legacy "
                    "Writer must have a value in every leaf"
                )
        if self._closed:
            # As dm-reverb: a value of the wrong type first, then "closed".
            _arguments.array_like_leaves(flat)
            raise self._closed_error("Append")
        if self._num_leaves is None:
            self._num_leaves = len(flat)
            for i in range(len(flat)):
                self._writer.set_column_name(i, f"leaf {i}")
        elif len(flat) != self._num_leaves:
            raise errors.InvalidArgumentError(
                "Number of tensors per timestep was inconsistent. Previously it was "
                f"{self._num_leaves}, but is now {len(flat)}."
            )
        # The native writer copies the values and checks each leaf's dtype
        # and shape against its first value.
        try:
            self._steps.append(self._writer.append(flat))
        except errors.InvalidArgumentError as e:
            if "wrong dtype" not in str(e):
                raise
            raise errors.InvalidArgumentError(
                f"Cannot concatenate tensors that have different data types. ({e})"
            ) from None

    def append_sequence(self, sequence: Any) -> None:
        """Appends several steps given with a shared leading time dimension.

        Equivalent to calling `append` once per slice along dimension 0.

        Args:
          sequence: A nested structure of arrays that all have the same
            leading dimension T.

        Raises:
          InvalidArgumentError: If the leading dimensions differ, or as
            `append`.
        """
        if sequence is None:
            raise TypeError("Writer.append_sequence: the sequence is None")
        flat = [np.asarray(leaf) for leaf in tree.flatten(sequence)]
        if not flat:
            raise errors.InvalidArgumentError("AppendSequence called with empty data.")
        for i, array in enumerate(flat):
            if not array.ndim:
                raise errors.InvalidArgumentError(
                    f"AppendSequence called with scalar tensor at index {i}."
                )
        lengths = {a.shape[0] for a in flat}
        if len(lengths) != 1:
            raise errors.InvalidArgumentError(
                "Writer.append_sequence: every leaf needs the same leading (time) "
                f"dimension, got shapes {[a.shape for a in flat]}"
            )
        for t in range(lengths.pop()):
            self.append(tree.unflatten_as(sequence, [a[t] for a in flat]))

    def create_item(self, table: str, num_timesteps: int, priority: float) -> None:
        """Inserts an item referencing the last `num_timesteps` steps.

        The item is sent in the background; `flush` or `close` waits for it.

        Args:
          table: Name of the table.
          num_timesteps: Number of most recent steps the item covers.
          priority: The item's priority.

        Raises:
          ValueError: If `num_timesteps` < 1.
          InvalidArgumentError: If fewer steps are available, or `priority`
            is NaN (a ValueError).
          ReverbError: If the native writer fails.
        """
        table = _arguments.string("table", table)
        num_timesteps = _arguments.integer("num_timesteps", num_timesteps)
        priority = _arguments.number("priority", priority, allow_nan=True)
        if num_timesteps < 1:
            raise ValueError(f"num_timesteps ({num_timesteps}) must be a positive integer")
        if self._closed:
            raise self._closed_error("CreateItem")
        if num_timesteps > len(self._steps):
            raise errors.InvalidArgumentError(
                "Argument `num_timesteps` is larger than number of buffered timesteps. "
                f"(num_timesteps={num_timesteps}, {len(self._steps)} steps buffered, "
                f"max_sequence_length={self._steps.maxlen})"
            )
        if table not in self._known_tables and self._check_table is not None:
            self._check_table(table)
            self._known_tables.add(table)
        # The native writer refuses a NaN priority first (validate_item).
        steps = list(self._steps)[-num_timesteps:]
        columns = [(c, steps, False) for c in range(self._num_leaves)]
        self._writer.create_item(table, priority, columns)

    def flush(self) -> None:
        """Blocks until every created item has been confirmed by the server.

        Raises:
          ReverbError: If an item was rejected or the connection failed.
          RuntimeError: If the writer is closed.
        """
        if self._closed:
            raise self._closed_error("Flush")
        self._writer.flush(0, None)

    def close(self, retry_on_unavailable: bool = True) -> None:
        """Flushes and closes the writer; it cannot be used afterwards.

        Args:
          retry_on_unavailable: Accepted for dm-reverb compatibility and
            ignored: reverb_tf's writer does not retry a lost connection (the
            error is raised by the call that meets it).

        Raises:
          ValueError: If the writer is already closed.
          ReverbError: If flushing failed (the writer is closed regardless).
        """
        if self._closed:
            raise ValueError("close() has already been called on this Writer")
        # Ignored (see above), but checked as dm-reverb's binding does.
        _arguments.boolean("retry_on_unavailable", retry_on_unavailable)
        self._closed = True
        try:
            self._writer.flush(0, None)
        finally:
            self._writer.close()


class Client:
    """Client of a reverb_tf server.

    Cheap to create and safe to share between threads; writers it creates
    must each be used by one thread at a time.
    """

    def __init__(
        self,
        server_address: ServerAddress,
        *,
        tls: Optional["security.ClientTls"] = None,
        token: Optional[str] = None,
    ) -> None:
        """Creates a client. Connecting happens on the first call.

        Args:
          server_address: "host:port" of the server, or the shards of one set
            of tables (reverb_tf extension): a list of addresses, a
            comma-separated string of them, gRPC's "ipv4:a:p,b:q" lists, or a
            "dns:///name:port" that resolves to several addresses. Writers
            then spread across the shards, sampling merges them in
            proportion to their sizes (their priority sums), and priority
            updates reach the shard that holds each key (docs/scale_out.md).
          tls: Connect with TLS (`reverb_tf.security.ClientTls`; reverb_tf
            extension). None: the process's defaults (plaintext unless set).
          token: The bearer token sent with every call ("" for none;
            reverb_tf extension). None: the process's default
            (`REVERB_TF_TOKEN`).

        Raises:
          ValueError: If the address is empty or malformed.
          ReverbError: If a TLS file cannot be read or is not valid PEM.
          ImportError: If the native module is not built.
        """
        self._server_address = target_string(server_address)
        self._security = (tls, token)
        # max_message_bytes: the native default (wire/message_limits.h).
        self._client = _native.core().Client(
            self._server_address, security=security.client_security(tls, token)
        )
        # Per table: flat signature columns and encoded nested structure, from
        # the first server_info; tables do not change while a server runs.
        self._flat_signatures: Dict[str, Optional[List[signatures.Column]]] = {}
        self._nested_structures: Dict[str, bytes] = {}
        self._decoded: Dict[bytes, Any] = {}

    def __reduce__(self) -> Any:
        tls, token = self._security
        return functools.partial(self.__class__, tls=tls, token=token), (self._server_address,)

    def __repr__(self) -> str:
        return f"Client(server_address={self._server_address!r})"

    @property
    def server_address(self) -> str:
        """The target this client talks to ("host:port", or its shards)."""
        return self._server_address

    @property
    def shard_addresses(self) -> List[str]:
        """The servers the target names now, one per shard (reverb_tf extension).

        A dns: target that resolves to several addresses lists each of them.
        """
        return list(self._client.shard_addresses)

    # -- metadata ------------------------------------------------------------

    def _fetch_tables(
        self, timeout_s: Optional[float], *, aggregate: bool = False
    ) -> Dict[str, Any]:
        # Signatures are the same on every shard: any shard that answers
        # will do, unless the caller wants every shard's counts summed.
        try:
            if aggregate:
                infos = self._client.server_info(timeout_s)
            else:
                infos = self._client.server_info_of_any_shard(timeout_s)
        except errors.DeadlineExceededError as e:
            # dm-reverb's words, which programs match on.
            raise errors.DeadlineExceededError(
                f"ServerInfo call did not complete within provided timeout of "
                f"{timeout_s if timeout_s is None else format(timeout_s, 'g')}s ({e})"
            ) from None
        for name, info in infos.items():
            flat = info.signature
            self._flat_signatures[name] = (
                None
                if flat is None
                else [signatures.Column(n, np.dtype(d), tuple(s)) for n, d, s in flat]
            )
            self._nested_structures[name] = bytes(info.nested_structure)
        return infos

    def _signatures(self, timeout_s: Optional[float]) -> Dict[str, Optional[Any]]:
        """Each table's nested signature (None without one), from any shard."""
        self._fetch_tables(timeout_s)
        return {name: self._decode(blob) for name, blob in self._nested_structures.items()}

    def _decode(self, blob: bytes) -> Optional[Any]:
        if not blob:
            return None
        if blob not in self._decoded:
            self._decoded[blob] = signatures.decode_structure(blob)
        return self._decoded[blob]

    def _ensure_table(self, table: str, timeout_s: Optional[float]) -> None:
        if table not in self._flat_signatures:
            self._fetch_tables(timeout_s)
            if table not in self._flat_signatures:
                raise errors.NotFoundError(
                    f"table {table!r} not found on {self._server_address}; it has: "
                    f"{', '.join(sorted(self._flat_signatures)) or 'no tables'}"
                )

    def _flat_signature(
        self, table: str, timeout_s: Optional[float] = None
    ) -> Optional[List[signatures.Column]]:
        self._ensure_table(table, timeout_s)
        return self._flat_signatures[table]

    def server_info(self, timeout: Optional[float] = None) -> Dict[str, reverb_types.TableInfo]:
        """Returns metadata and counters of every table on the server.

        Args:
          timeout: Seconds to wait for the answer; None (or 0) waits forever.

        Returns:
          A dict from table name to `TableInfo`.

        Raises:
          DeadlineExceededError: If the timeout expires.
          UnavailableError: If the server cannot be reached.
        """
        infos = self._fetch_tables(timeout or None, aggregate=True)
        return {
            name: table_info(info, self._decode(self._nested_structures[name]))
            for name, info in infos.items()
        }

    def server_info_by_shard(
        self, timeout: Optional[float] = None
    ) -> Dict[str, Union[Dict[str, reverb_types.TableInfo], errors.ReverbError]]:
        """Returns the tables of every shard (reverb_tf extension).

        `server_info` sums sizes and counters over the shards; this shows
        each. The shards are asked in parallel.

        Args:
          timeout: Seconds to wait for each answer; None (or 0) waits forever.

        Returns:
          A dict from shard address to its tables (name -> `TableInfo`), or
          to the `ReverbError` it failed with (e.g. `UnavailableError` for a
          shard that is down).
        """
        out: Dict[str, Any] = {}
        for address, tables, failure, _ in self._client.server_info_by_shard(timeout or None):
            if failure is not None:
                out[address] = errors.from_status(*failure)
                continue
            out[address] = {}
            for name, info in tables.items():
                nested = bytes(info.nested_structure)
                out[address][name] = table_info(info, self._decode(nested))
        return out

    def spill_stats(
        self, timeout: Optional[float] = None
    ) -> Dict[str, Union[Optional[Dict[str, Any]], errors.ReverbError]]:
        """Returns every shard's disk tier figures (reverb_tf extension).

        What `Server.spill_stats()` gives in the server's process, for
        servers started with a `spill_dir` (or `--spill_dir`).

        Args:
          timeout: Seconds to wait for each answer; None (or 0) waits forever.

        Returns:
          A dict from shard address to its figures (see `Server.spill_stats`),
          to None for a shard without a spill directory, or to the
          `ReverbError` it failed with.
        """
        out: Dict[str, Any] = {}
        for address, _, failure, spill in self._client.server_info_by_shard(timeout or None):
            if failure is not None:
                out[address] = errors.from_status(*failure)
            else:
                out[address] = dict(spill) if spill["dir"] else None
        return out

    # -- writing -------------------------------------------------------------

    def insert(self, data: Any, priorities: Dict[str, float]) -> None:
        """Inserts one step of data as an item into one or more tables.

        The data is sent once however many tables reference it. Each item has
        one step with a leading time dimension of 1 (`sample` with
        `emit_timesteps=True` yields it as a list of one `ReplaySample`).

        Args:
          data: A nested structure of array-likes.
          priorities: Table name -> priority of the item in that table.

        Raises:
          ValueError: If `priorities` is empty.
          ReverbError: If an insert fails (e.g. `InvalidArgumentError` for a
            signature mismatch or an unknown table).
        """
        if priorities is not None and not isinstance(priorities, dict):
            raise TypeError(
                f"priorities must be a dict of table name to priority, got {priorities!r}"
            )
        if not priorities:
            raise ValueError("priorities must contain at least one item")
        with self.writer(max_sequence_length=1) as writer:
            writer.append(data)
            for table, priority in priorities.items():
                writer.create_item(table=table, num_timesteps=1, priority=priority)

    def writer(
        self,
        max_sequence_length: int,
        delta_encoded: bool = False,
        chunk_length: Optional[int] = None,
        max_in_flight_items: Optional[int] = 25,
    ) -> Writer:
        """Creates a legacy `Writer` (prefer `trajectory_writer`).

        Args:
          max_sequence_length: The longest item (in steps) the writer can
            create.
          delta_encoded: Accepted for dm-reverb compatibility; reverb_tf picks
            its own chunk encoding.
          chunk_length: Steps per chunk; default `min(10, max_sequence_length)`.
          max_in_flight_items: Items sent but not yet confirmed before
            `create_item` blocks; None for no limit.

        Returns:
          A `Writer`; close it (or use it as a context manager).

        Raises:
          ValueError: If `max_sequence_length` < 1, `chunk_length` is not in
            [1, max_sequence_length] or `max_in_flight_items` < 1.
        """
        _arguments.boolean("delta_encoded", delta_encoded)  # Ignored, but checked.
        max_sequence_length = _arguments.integer("max_sequence_length", max_sequence_length)
        if chunk_length is not None:
            chunk_length = _arguments.integer("chunk_length", chunk_length)
        if max_in_flight_items is not None:
            max_in_flight_items = _arguments.integer("max_in_flight_items", max_in_flight_items)
        if max_sequence_length < 1:
            raise ValueError(
                f"max_sequence_length ({max_sequence_length}) must be a positive integer"
            )
        if chunk_length is None:
            chunk_length = min(10, max_sequence_length)
        if not 1 <= chunk_length <= max_sequence_length:
            raise ValueError(
                f"chunk_length ({chunk_length}) must be a positive integer <= "
                f"max_sequence_length ({max_sequence_length})"
            )
        core_writer = self._client.new_writer(
            max_sequence_length,
            chunk_length,
            _in_flight_limit(max_in_flight_items),
            legacy_items=True,
        )
        return Writer(core_writer, max_sequence_length, self._check_item_table)

    def _check_item_table(self, table: str) -> None:
        """Raises, with dm-reverb's words, if the server has no `table`."""
        try:
            self._ensure_table(table, None)
        except errors.NotFoundError:
            raise errors.InvalidArgumentError(
                f"Unable to find signatures for table {table!r} in signature cache.  "
                f"Available tables: {sorted(self._flat_signatures)}."
            ) from None

    def trajectory_writer(
        self,
        num_keep_alive_refs: int,
        *,
        validate_items: bool = True,
        get_signature_timeout_ms: Optional[int] = 3000,
        rate_limiter_timeout_ms: Optional[int] = None,
    ) -> trajectory_writer_lib.TrajectoryWriter:
        """Creates a `TrajectoryWriter`.

        Args:
          num_keep_alive_refs: How many of each column's most recent cells stay
            referenceable: the longest trajectory an item can span.
          validate_items: Check items against their table's signature in
            `create_item`, before they are sent (the server checks them in any
            case; this only makes the error come sooner).
          get_signature_timeout_ms: Milliseconds to wait for table signatures,
            fetched once per table on its first `create_item` when
            `validate_items`. None skips the client-side check as
            `validate_items=False` does (reverb_tf's extension).
          rate_limiter_timeout_ms: How long the server may hold an item back
            (its table's rate limiter, the server's memory budget) before
            it fails the writer: `DeadlineExceededError` for the rate
            limiter, `ResourceExhaustedError` for the budget, raised by the
            next `flush` or `create_item`. None waits as long as it takes,
            as dm-reverb does (reverb_tf's extension).

        Returns:
          A `TrajectoryWriter` (usable as a context manager).

        Raises:
          ValueError: If `num_keep_alive_refs` < 1.
        """
        num_keep_alive_refs = _arguments.integer("num_keep_alive_refs", num_keep_alive_refs)
        if num_keep_alive_refs < 1:
            raise ValueError(
                f"num_keep_alive_refs ({num_keep_alive_refs}) must be a positive integer"
            )
        validate_items = _arguments.boolean("validate_items", validate_items)
        core_writer = self._client.new_writer(
            num_keep_alive_refs,
            None,
            _UNLIMITED_IN_FLIGHT_ITEMS,
            validate_items=validate_items,
            rate_limiter_timeout_s=_arguments.timeout_ms_in_s(rate_limiter_timeout_ms),
        )
        return trajectory_writer_lib.TrajectoryWriter(
            core_writer, self._signature_getter(validate_items, get_signature_timeout_ms)
        )

    def batched_trajectory_writer(
        self,
        num_envs: int,
        num_keep_alive_refs: int,
        *,
        max_in_flight_items: Optional[int] = None,
        validate_items: bool = True,
        get_signature_timeout_ms: Optional[int] = 3000,
    ) -> batched_trajectory_writer_lib.BatchedTrajectoryWriter:
        """Creates a `BatchedTrajectoryWriter` for `num_envs` environments (reverb_tf's).

        One writer, one stream and one call per step for a vectorised
        environment, instead of `num_envs` TrajectoryWriters.

        Args:
          num_envs: The number of environments B that step together (>= 1).
          num_keep_alive_refs: As for `trajectory_writer`, per environment.
          max_in_flight_items: Items created but not yet confirmed beyond
            which `create_items` blocks; None: no limit (as
            `trajectory_writer`).
          validate_items: As for `trajectory_writer`.
          get_signature_timeout_ms: As for `trajectory_writer`.

        Returns:
          A `BatchedTrajectoryWriter` (usable as a context manager).

        Raises:
          ValueError: If `num_envs` < 1, `num_keep_alive_refs` < 1 or
            `max_in_flight_items` < 1.
        """
        if int(num_envs) < 1:
            raise ValueError(f"num_envs ({num_envs}) must be a positive integer")
        core_writer = self._client.new_writer(
            int(num_keep_alive_refs),
            None,
            _in_flight_limit(max_in_flight_items),
            num_lanes=int(num_envs),
            validate_items=bool(validate_items),
        )
        return batched_trajectory_writer_lib.BatchedTrajectoryWriter(
            core_writer, self._signature_getter(validate_items, get_signature_timeout_ms)
        )

    def _signature_getter(
        self, validate_items: bool, timeout_ms: Optional[int]
    ) -> Optional[Callable[[str], Any]]:
        """What writers call for a table's flat signature (None: do not check)."""
        if not validate_items or timeout_ms is None:
            return None
        return functools.partial(self._flat_signature, timeout_s=_timeout_s(timeout_ms))

    def structured_writer(self, configs: Sequence[Any]):
        """Creates a `StructuredWriter` that inserts items as `configs` say.

        Args:
          configs: `structured_writer.Config` protos (see
            `structured_writer.create_config`).

        Returns:
          A `reverb_tf.structured_writer.StructuredWriter`.

        Raises:
          ValueError: If `configs` is empty or a config is invalid (the
            message names its position, table and node).
        """
        # Imported here: the module needs TensorFlow (the configs' pattern
        # structure is a tensorflow.StructuredValue).
        from reverb_tf import structured_writer as structured_writer_lib  # pylint: disable=g-import-not-at-top

        if not configs:
            raise ValueError("At least one config must be provided.")
        serialized = [config.SerializeToString() for config in configs]
        return structured_writer_lib.StructuredWriter(
            self._client.new_structured_writer(serialized)
        )

    # -- sampling ------------------------------------------------------------

    def _unflattener(self, table: str) -> Optional[Callable[[List[Any]], Any]]:
        self._ensure_table(table, None)
        structure = self._decode(self._nested_structures[table])
        if structure is None:
            return None
        if type(structure) is dict and not any(tree.is_nested(v) for v in structure.values()):
            keys = sorted(structure)  # tree.flatten's order for a dict
            return lambda flat: dict(zip(keys, flat))
        return functools.partial(tree.unflatten_as, structure)

    def sample(
        self,
        table: str,
        num_samples: int = 1,
        *,
        emit_timesteps: bool = True,
        unpack_as_table_signature: bool = False,
        rate_limiter_timeout_ms: Optional[int] = None,
        sampling_stats: bool = False,
    ) -> Generator[Union[List[replay_sample.ReplaySample], replay_sample.ReplaySample], None, None]:
        """Samples `num_samples` items from `table`.

        A generator: nothing happens until it is iterated, and iterating
        blocks while the table's rate limiter holds samples back. One stream
        serves the whole generator with at most 256 samples requested ahead
        of what was yielded, so memory stays bounded for any `num_samples`.
        For training, prefer the datasets.

        Args:
          table: Name of the table.
          num_samples: Number of items to yield.
          emit_timesteps: If True, each item is yielded as a list of
            `ReplaySample`s, one per step (every column must then have the
            same leading time dimension). If False, each item is one
            `ReplaySample` holding whole columns.
          unpack_as_table_signature: If True and the table has a signature,
            `data` is structured like the signature; otherwise it is the flat
            list of columns.
          rate_limiter_timeout_ms: How long to wait for the table's rate
            limiter (reverb_tf extension); None waits forever.
          sampling_stats: If True (reverb_tf extension), `info` is a
            `SampleInfoWithStats`, which adds the table's total weight and
            smallest sampling probability at that moment, so that
            `info.importance_weight(beta)` needs no other call.

        Yields:
          Lists of per-step `ReplaySample`s (emit_timesteps=True) or
          `ReplaySample`s.

        Raises:
          ValueError: If `num_samples` < 1, or `emit_timesteps` is True and
            the item cannot be split into steps.
          NotFoundError: If the table does not exist.
          CancelledError: If the server stops while the call is blocked.
          DeadlineExceededError: If `rate_limiter_timeout_ms` expires.
        """
        if num_samples < 1:
            raise ValueError(f"num_samples ({num_samples}) must be a positive integer")
        timeout_s = None if rate_limiter_timeout_ms is None else rate_limiter_timeout_ms / 1000
        unflatten = self._unflattener(table) if unpack_as_table_signature else None
        info_cls = replay_sample.info_type(sampling_stats)
        num_fields = len(info_cls._fields)
        sample_info = lambda fields: info_cls._make(fields[:num_fields])  # noqa: E731
        sample = replay_sample.ReplaySample
        sampler = self._client.new_sampler(
            table, num_samples, min(num_samples, _SAMPLES_IN_FLIGHT), timeout_s
        )
        while True:
            batch = sampler.next_batch(_SAMPLES_IN_FLIGHT)
            if not batch:
                return
            for info_tuple, data, squeezed in batch:
                info = sample_info(info_tuple)
                if not emit_timesteps:
                    yield sample(info, data if unflatten is None else unflatten(data))
                    continue
                if all(squeezed):  # one step stored without a time dimension
                    yield [sample(info, data if unflatten is None else unflatten(data))]
                    continue
                lengths = {a.shape[0] if a.ndim and not s else None for a, s in zip(data, squeezed)}
                if len(lengths) != 1 or None in lengths:
                    raise ValueError(
                        "cannot split the sampled item into timesteps: its columns do "
                        f"not share a leading time dimension (shapes "
                        f"{[a.shape for a in data]}); use emit_timesteps=False"
                    )
                steps = []
                for t in range(lengths.pop()):
                    step = [np.asarray(a[t], a.dtype) for a in data]
                    steps.append(sample(info, step if unflatten is None else unflatten(step)))
                yield steps

    # -- table maintenance ---------------------------------------------------

    def mutate_priorities(
        self,
        table: str,
        updates: Optional[Dict[int, float]] = None,
        deletes: Optional[List[int]] = None,
    ) -> None:
        """Updates priorities of and/or deletes items; unknown keys are skipped.

        Updates are applied before deletes. With several shards every shard
        is asked at once and the one holding a key applies it; shards that
        cannot be reached are skipped (their keys with them) unless none can
        be. Skipped keys are logged as a warning, at most once a minute.

        Args:
          table: Name of the table.
          updates: Item key -> new priority.
          deletes: Keys of items to delete.

        Raises:
          InvalidArgumentError: If a priority is NaN, negative or infinite
            (nothing is changed then).
          NotFoundError: If the table does not exist.
        """
        deletes = list(deletes) if deletes else []
        # A dict of int keys and plain priorities is read by the native call
        # itself; anything else (or a bad key) takes the lists.
        report = None
        if type(updates) is dict:
            report = self._client.mutate_priorities_dict(table, updates, deletes, None)
        if report is None:
            keys = list(updates) if updates else []
            priorities = list(updates.values()) if updates else []
            report = self._client.mutate_priorities(table, keys, priorities, deletes, None)
        *_, warning = report
        if warning:  # the native client words it, at most once a minute
            logging.warning("reverb_tf: %s", warning)

    def reset(self, table: str) -> None:
        """Removes every item from `table` and resets its rate limiter.

        With several shards, every shard's table is reset.

        Args:
          table: Name of the table.

        Raises:
          NotFoundError: If the table does not exist.
        """
        self._client.reset(table, None)

    def checkpoint(self) -> Union[str, List[str]]:
        """Asks the server to write a checkpoint of all its tables.

        The server pauses each table only while it copies the table's item
        index (no data is copied); inserts and samples continue while the
        checkpoint is written.

        Returns:
          The path of the checkpoint directory the server wrote; with
          several shards, the list of every shard's path, in shard order
          (each shard checkpoints its own tables with its own checkpointer).

        Raises:
          FailedPreconditionError: If the server has no checkpointer (a
            `reverb_tf_server` started without a checkpoint directory).
          ReverbError: If the checkpoint could not be written, by the
            operating system's reason: `ResourceExhaustedError` for a full
            disk, `PermissionDeniedError` for a forbidden directory,
            `UnavailableError` only for transient faults. The previous
            checkpoints are untouched.
        """
        paths = self._client.checkpoint(None)
        return paths[0] if len(paths) == 1 else list(paths)
