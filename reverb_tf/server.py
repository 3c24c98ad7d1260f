# SPDX-License-Identifier: Apache-2.0
"""The replay server and the tables it hosts.

`Table` describes one table (selectors, rate limiter, size, signature);
`Server` starts the native gRPC server (`_core.Server`) hosting a set of
tables. Clients (`reverb_tf.Client`, datasets) connect to `localhost:<port>`
or any address that reaches it.
"""

import abc
import contextlib
import os
from typing import Any, Dict, List, Optional, Sequence

from absl import logging

from reverb_tf import _arguments
from reverb_tf import _native
from reverb_tf import checkpointers as checkpointers_lib
from reverb_tf import client as client_lib
from reverb_tf import errors
from reverb_tf import item_selectors
from reverb_tf import rate_limiters
from reverb_tf import security
from reverb_tf import signatures


class TableExtensionBase(abc.ABC):
    """dm-reverb's base of Python table extensions.

    reverb_tf tables take no extensions (`Table(extensions=...)` refuses any);
    the class exists so that code defining extensions still imports.
    """

    @abc.abstractmethod
    def build_internal_extensions(self, table_name: str) -> Sequence[Any]:
        """Returns the native extensions for the table named `table_name`."""


class Table:
    """A table of items: what a server stores and clients sample.

    An item references data (steps of trajectories) that may be shared with
    other items and tables; the data stays on the server until no item
    references it. The `sampler` picks what a sample returns, the `remover`
    what an insert into a full table evicts, and the `rate_limiter` when
    inserts and samples may proceed.

    A `Table` is a description until a `Server` hosts it; `info` then reports
    the live table.
    """

    def __init__(
        self,
        name: str,
        sampler: item_selectors.ItemSelector,
        remover: item_selectors.ItemSelector,
        max_size: int,
        rate_limiter: rate_limiters.RateLimiter,
        max_times_sampled: int = 0,
        extensions: Sequence[Any] = (),
        signature: Optional[Any] = None,
    ) -> None:
        """Describes a table.

        Args:
          name: The table's name, unique within a server.
          sampler: Selector that picks the item a sample returns.
          remover: Selector that picks the item evicted when an insert finds
            the table full.
          max_size: Maximum number of items.
          rate_limiter: Decides when inserts and samples may proceed.
          max_times_sampled: An item is removed after this many samples;
            values < 1 mean no limit.
          extensions: Table extensions. reverb_tf has none; must be empty.
          signature: Optional nested structure of `tf.TensorSpec` that every
            item's data must match (checked by writers and by the server).

        Raises:
          ValueError: If `name` is empty, `max_size` is not a positive
            integer, the rate limiter can deadlock a table whose items stay
            until removed (`max_times_sampled` < 1; the core's
            `RateLimiterOptions::CheckLive`), or the signature is not a structure of `tf.TensorSpec`
            with known ranks.
          TypeError: If `sampler`/`remover` are not selectors or
            `rate_limiter` is not a rate limiter.
          NotImplementedError: If `extensions` is not empty.
        """
        name = _arguments.table_name(name)
        # Values are checked by the core when the table is made (below).
        max_size = _arguments.integer("max_size", max_size)
        for arg, value in (("sampler", sampler), ("remover", remover)):
            if not isinstance(value, item_selectors.ItemSelector):
                raise TypeError(f"{arg} must be a selector from reverb_tf.selectors, got {value!r}")
        if not isinstance(rate_limiter, rate_limiters.RateLimiter):
            raise TypeError(
                f"rate_limiter must be a reverb_tf.rate_limiters.RateLimiter, got {rate_limiter!r}"
            )
        if extensions is None:
            raise TypeError("extensions must be a sequence (empty: reverb_tf has none), got None")
        if extensions:
            raise errors.UnimplementedError(
                "reverb_tf does not support table extensions; pass extensions=()"
            )
        max_times_sampled = _arguments.integer("max_times_sampled", max_times_sampled)

        self._name = name
        self._sampler = sampler
        self._remover = remover
        self._max_size = max_size
        self._rate_limiter = rate_limiter
        # As given: values < 1 all mean no limit, and TableInfo reports it so.
        self._max_times_sampled = max_times_sampled
        self._signature = signature
        flat = signatures.flatten_signature(signature)
        self._columns: Optional[List[signatures.Column]] = None if flat is None else flat[0]
        self._nested_structure = b"" if flat is None else flat[1]
        # The live table, from now on (as in dm-reverb): the one owner of its
        # state, which the servers that host it share.
        self._core = _native.core().Table(self._core_config())

    @classmethod
    def queue(
        cls,
        name: str,
        max_size: int,
        extensions: Sequence[Any] = (),
        signature: Optional[Any] = None,
    ) -> "Table":
        """Describes a table that behaves as a FIFO queue.

        Every item is sampled exactly once, oldest first; inserts block while
        `max_size` items wait, samples block while none does.

        Args:
          name: The table's name.
          max_size: Maximum number of waiting items.
          extensions: As in the constructor (must be empty).
          signature: As in the constructor.

        Returns:
          A `Table` with Fifo sampler and remover, `max_times_sampled=1` and a
          `rate_limiters.Queue(max_size)` limiter.

        Raises:
          ValueError: As the constructor.
        """
        return cls._single_use(
            name, max_size, item_selectors.Fifo, rate_limiters.Queue, extensions, signature
        )

    @classmethod
    def stack(
        cls,
        name: str,
        max_size: int,
        extensions: Sequence[Any] = (),
        signature: Optional[Any] = None,
    ) -> "Table":
        """Describes a table that behaves as a LIFO stack.

        Every item is sampled exactly once, newest first; inserts block while
        `max_size` items wait, samples block while none does.

        Args:
          name: The table's name.
          max_size: Maximum number of waiting items.
          extensions: As in the constructor (must be empty).
          signature: As in the constructor.

        Returns:
          A `Table` with Lifo sampler and remover, `max_times_sampled=1` and a
          `rate_limiters.Stack(max_size)` limiter.

        Raises:
          ValueError: As the constructor.
        """
        return cls._single_use(
            name, max_size, item_selectors.Lifo, rate_limiters.Stack, extensions, signature
        )

    @classmethod
    def _single_use(cls, name, max_size, selector, limiter, extensions, signature) -> "Table":
        # Queue and stack differ only in the order their items leave.
        return cls(
            name=name,
            sampler=selector(),
            remover=selector(),
            max_size=max_size,
            max_times_sampled=1,
            rate_limiter=limiter(max_size),
            extensions=extensions,
            signature=signature,
        )

    @property
    def name(self) -> str:
        """The table's name."""
        return self._name

    @property
    def sampler(self) -> item_selectors.ItemSelector:
        """The selector that picks sampled items."""
        return self._sampler

    @property
    def remover(self) -> item_selectors.ItemSelector:
        """The selector that picks evicted items."""
        return self._remover

    @property
    def max_size(self) -> int:
        """Maximum number of items."""
        return self._max_size

    @property
    def max_times_sampled(self) -> int:
        """Samples after which an item is removed (0: no limit)."""
        return self._max_times_sampled

    @property
    def rate_limiter(self) -> rate_limiters.RateLimiter:
        """The table's rate limiter."""
        return self._rate_limiter

    @property
    def signature(self) -> Optional[Any]:
        """The nested `tf.TensorSpec` signature given at construction, or None."""
        return self._signature

    @property
    def info(self) -> Any:
        """The table's `reverb_types.TableInfo` now.

        The table is live from its construction: before any server hosts it,
        while one does, and after it stopped (read in this process, without
        an RPC).
        """
        native = self._core.info()
        return client_lib.table_info(
            native,
            signatures.decode_structure(bytes(native.nested_structure))
            if native.nested_structure
            else None,
        )

    def can_insert(self, num_inserts: int) -> bool:
        """Whether `num_inserts` inserts would pass the rate limiter now.

        Args:
          num_inserts: Number of consecutive inserts (>= 1).

        Returns:
          True if none of them would block.

        Raises:
          InvalidArgumentError: If `num_inserts` < 1.
        """
        return self._core.can_insert(_arguments.integer("num_inserts", num_inserts))

    def can_sample(self, num_samples: int) -> bool:
        """Whether `num_samples` samples would pass the rate limiter now.

        Args:
          num_samples: Number of consecutive samples (>= 1).

        Returns:
          True if none of them would block.

        Raises:
          InvalidArgumentError: If `num_samples` < 1.
        """
        return self._core.can_sample(_arguments.integer("num_samples", num_samples))

    def replace(
        self,
        name: Optional[str] = None,
        sampler: Optional[item_selectors.ItemSelector] = None,
        remover: Optional[item_selectors.ItemSelector] = None,
        max_size: Optional[int] = None,
        rate_limiter: Optional[rate_limiters.RateLimiter] = None,
        max_times_sampled: Optional[int] = None,
        extensions: Optional[Sequence[Any]] = None,
        signature: Optional[Any] = None,
    ) -> "Table":
        """Returns a new, empty table defined like this one except where given.

        Args:
          name: The new table's name; None keeps this table's.
          sampler: As in the constructor; None keeps this table's.
          remover: As in the constructor; None keeps this table's.
          max_size: As in the constructor; None keeps this table's.
          rate_limiter: As in the constructor; None keeps this table's.
          max_times_sampled: As in the constructor; None keeps this table's.
          extensions: As in the constructor (must be empty).
          signature: As in the constructor; None keeps this table's.

        Returns:
          The new `Table` (not hosted by any server).

        Raises:
          ValueError: As the constructor.
          NotImplementedError: If `extensions` is not empty.
        """

        def pick(value: Any, current: Any) -> Any:
            return current if value is None else value

        return Table(
            name=pick(name, self._name),
            sampler=pick(sampler, self._sampler),
            remover=pick(remover, self._remover),
            max_size=pick(max_size, self._max_size),
            rate_limiter=pick(rate_limiter, self._rate_limiter),
            max_times_sampled=pick(max_times_sampled, self._max_times_sampled),
            extensions=pick(extensions, ()),
            signature=pick(signature, self._signature),
        )

    def __reduce__(self) -> Any:
        # Picklable as its description (a new, unhosted table), so that a
        # table can be handed to another process, e.g. a Ray actor.
        return Table, (
            self._name,
            self._sampler,
            self._remover,
            self._max_size,
            self._rate_limiter,
            self._max_times_sampled,
            (),
            self._signature,
        )

    def _core_config(self) -> Any:
        """Builds the `_core.TableOptions` this table describes."""
        core_signature = None
        if self._columns is not None:
            core_signature = [(c.name, c.dtype, list(c.shape)) for c in self._columns]
        return _native.core().TableOptions(
            self._name,
            self._sampler._core_options,
            self._remover._core_options,
            self._max_size,
            self._max_times_sampled,
            self._rate_limiter._core_options,
            core_signature,
            self._nested_structure,
        )

    def __repr__(self) -> str:
        return (
            f"Table(name={self._name!r}, sampler={self._sampler!r}, "
            f"remover={self._remover!r}, max_size={self._max_size}, "
            f"max_times_sampled={self._max_times_sampled}, "
            f"rate_limiter={self._rate_limiter!r}, "
            f"signature={self._signature!r})"
        )


class Server:
    """A replay server: hosts tables and serves clients over gRPC.

    The server runs in native threads of this process; it serves until `stop`
    is called (also by `__exit__` and when the object is garbage collected).
    """

    # Until a native server runs (a constructor that failed never ran one).
    _stopped = True

    def __init__(
        self,
        tables: Optional[Sequence[Table]] = None,
        port: Optional[int] = None,
        checkpointer: Optional[Any] = None,
        *,
        host: str = "localhost",
        max_active_streams: int = 4096,
        metrics_port: Optional[int] = None,
        checkpoint_interval: Optional[float] = None,
        tls: Optional[security.ServerTls] = None,
        auth_tokens_file: Optional[str] = None,
        wal: Optional[checkpointers_lib.WriteAheadLog] = None,
        memory_limit: Optional[int] = None,
        spill_dir: Optional[str] = None,
        stream_threads: int = 2,
        spill_mmap: bool = True,
    ) -> None:
        """Starts a server.

        Args:
          tables: The tables to host; at least one, with distinct names.
          port: Port to listen on. None picks a free port; read it back from
            `port`.
          checkpointer: Where `Client.checkpoint()` saves the tables and
            from where the newest checkpoint is loaded before the server
            starts serving (`reverb_tf.checkpointers`). None: a
            `TempDirCheckpointer` (nothing to load, checkpoints go to a new
            temporary directory).
          host: Interface to listen on. The default, "localhost", accepts
            only connections from this machine (loopback);
            "0.0.0.0" or "::" accept them on every interface, an address on
            that one. Anyone who can connect may insert, sample, reset and
            checkpoint. Not in dm-reverb, which listens on every interface.
          max_active_streams: Most streams served at once: writer
            (InsertStream), sampler (SampleStream) and priority-mutation
            (MutateStream) streams alike; more fail with
            `ResourceExhaustedError` until others end. Each sampler stream
            holds a server thread; writer streams and MutateStreams take a
            slot but share `stream_threads`. Not in dm-reverb.
          metrics_port: Serve Prometheus metrics at
            `http://<host>:<metrics_port>/metrics` (0 picks a free port; read
            it back from `metrics_port`). None: no metrics endpoint. Not in
            dm-reverb.
          checkpoint_interval: Seconds between checkpoints the server writes
            on its own with `checkpointer` (as the binary's
            --checkpoint_interval); None: only when `Client.checkpoint()`
            asks. Not in dm-reverb.
          tls: Serve TLS, and with a client CA mutual TLS
            (`reverb_tf.security.ServerTls`); health, reflection and every
            client path use the same port. None: plaintext. Not in dm-reverb.
          auth_tokens_file: A file of `ROLE TOKEN` lines: every call then
            needs a bearer token whose role may make it
            (`reverb_tf.security`). None: no tokens. Not in dm-reverb.
          wal: A write-ahead log (`reverb_tf.checkpointers.WriteAheadLog`):
            changes are acknowledged only once logged and replayed after the
            checkpoint on start, so a crash loses no acknowledged item. Needs
            a `checkpointer` of its own (not a temporary one). Not in
            dm-reverb.
          memory_limit: A memory budget in bytes: the bytes of the chunks
            the server holds plus a fixed cost per item. While it is used
            up, inserts of new items into tables that are not full, and
            writers' new chunks, wait like a rate-limited insert (within the
            writer's timeout; deletes, evictions, resets and items sampled
            out make room) and then fail with `ResourceExhaustedError`
            naming the budget; sampling, priority updates, deletes and
            resets go on. Leave room above it for the process's own
            overhead. None: no budget. Not in dm-reverb.
          spill_dir: With `memory_limit`, a directory on local disk where
            chunk bytes beyond the budget go instead of making writers wait:
            RAM keeps the items, the selectors and the chunks most recently
            written or read, and samples of the others read them back. The
            directory is this server's alone while it runs, and what an
            earlier run left in it is deleted (checkpoints and the `wal`
            keep what must survive a restart). A full disk makes writers
            wait as a used-up budget does, and their `ResourceExhaustedError`
            names the directory; a damaged file fails the sample with
            `DataLossError` naming it and the item. None: no spilling. Not
            in dm-reverb.
          stream_threads: Most threads (1 to 16) that serve the writers' and
            priority mutators' streams; they alone read and write the
            server's connections. The first always polls, the others only
            while it is busy: a busy server reads a stream's next message
            while it stores the last, and a quiet one does not hand each
            message from thread to thread. Not in dm-reverb.
          spill_mmap: With `spill_dir`, read spilled chunks through mappings
            of their files, about twice as fast as `pread`; the pages read
            count in the process's RSS (as the page cache they are, which
            the kernel reclaims). False reads them with `pread`, and RSS
            stays near `memory_limit` while sampling too. Not in dm-reverb.

        Raises:
          ValueError: If `tables` is empty or has duplicate names (an
            `InvalidArgumentError`, as the native server checks it), a table
            is hosted by another running server (stop it first), or `wal`
            comes without a checkpointer whose directory outlives the
            process.
          TypeError: If an element of `tables` is not a `Table`.
          ImportError: If the native module is not built.
          ReverbError: If the native server rejects the configuration,
            cannot bind the port (e.g. `InvalidArgumentError`,
            `UnavailableError`) or cannot load the checkpoint: a table of
            the checkpoint is missing or has another signature
            (`InvalidArgumentError` naming the table), or the checkpoint
            file is damaged (`DataLossError` naming the file and record).
            Nothing is served then.
        """
        if not tables:
            raise ValueError("at least one table must be provided")
        for table in tables:
            if not isinstance(table, Table):
                raise TypeError(f"tables must be reverb_tf.Table objects, got {table!r}")
        if port is None:
            port = 0
        port = _arguments.integer("port", port)
        if checkpoint_interval is not None and not checkpoint_interval > 0:
            raise ValueError(
                f"checkpoint_interval must be None or > 0 seconds, got {checkpoint_interval!r}"
            )
        made_checkpointer = checkpointer is None
        if checkpointer is None:
            checkpointer = checkpointers_lib.default_checkpointer()
        if not isinstance(checkpointer, checkpointers_lib.CheckpointerBase):
            raise TypeError(
                f"checkpointer must be a reverb_tf.checkpointers checkpointer, got {checkpointer!r}"
            )
        self._checkpointer = checkpointer
        self._tables = list(tables)
        core = _native.core()
        # The native server checks the rest (unique names, a table hosted by
        # one running server at a time, a write-ahead log's checkpointer)
        # before it changes anything.
        try:
            self._server = core.Server(
                [table._core for table in self._tables],  # pylint: disable=protected-access
                int(port),
                # max_message_bytes: the native default (wire/message_limits.h).
                max_active_streams=int(max_active_streams),
                host=str(host),
                metrics_port=-1 if metrics_port is None else int(metrics_port),
                checkpoint_interval_s=float(checkpoint_interval or 0.0),
                auth_tokens_file=os.fspath(auth_tokens_file or ""),
                memory_limit=_arguments.integer("memory_limit", memory_limit or 0),
                spill_dir=os.fspath(spill_dir or ""),
                stream_threads=_arguments.integer("stream_threads", stream_threads),
                spill_mmap=bool(spill_mmap),
                **(tls.native_options() if tls is not None else {}),
                **(wal.native_options() if wal is not None else {}),
                **checkpointer.internal_checkpointer().native_options(),
            )
        except BaseException:
            if made_checkpointer:
                # The temporary directory made above, still empty: a server
                # that did not start leaves nothing behind.
                with contextlib.suppress(OSError):
                    os.rmdir(checkpointer.path)
            raise
        self._stopped = False
        # A damaged log or skipped checkpoints were reported by the core
        # (through _native's log sink); the checkpoint loaded is not.
        if self._server.loaded_checkpoint and not self._server.skipped_checkpoints:
            logging.info("reverb_tf.Server: loaded checkpoint %s", self._server.loaded_checkpoint)

    @property
    def port(self) -> int:
        """The port the server listens on."""
        return self._server.port

    @property
    def metrics_port(self) -> Optional[int]:
        """The port of the Prometheus metrics endpoint, or None without one."""
        port = self._server.metrics_port
        return None if port < 0 else port

    def metrics_text(self) -> str:
        """The server's metrics in the Prometheus text format (what GET /metrics returns).

        Returns:
          The exposition text, whether or not an endpoint serves it.
        """
        return self._server.metrics_text()

    @property
    def loaded_checkpoint(self) -> Optional[str]:
        """The checkpoint loaded when the server started, or None."""
        return self._server.loaded_checkpoint or None

    @property
    def wal_replay(self) -> Dict[str, Any]:
        """What the write-ahead log replayed on start.

        Returns:
          A dict: `entries` applied, `files` read, `last_position` (of the
          last good entry), `damage` ("" if the log was intact, else what was
          damaged and what was not replayed). All zero without a log.
        """
        return dict(self._server.wal_replay)

    def spill_stats(self) -> Dict[str, Any]:
        """The disk tier's figures now (see `spill_dir`).

        Returns:
          A dict: `dir` (empty without a spill directory), `ram_bytes` (of
          spillable chunks in RAM), `disk_bytes` (of live chunks on disk),
          `disk_file_bytes` (the spill files' size), `spilled_chunks` and
          `spilled_bytes` (written so far), `ram_reads` and `disk_reads`
          (reads of spillable chunks served from RAM and from disk),
          `disk_read_bytes`, `disk_read_seconds` (summed over disk reads),
          `compactions` and `compacted_bytes` (spill segments emptied by
          compaction and the bytes of live records it moved, counted in none
          of the figures above), `last_error` ("" unless writing to the
          directory fails now), `compaction_error` ("" unless the last
          compaction pass failed; writers do not wait for compaction).
        """
        return dict(self._server.spill_stats())

    @property
    def skipped_checkpoints(self) -> List[str]:
        """Newer checkpoints skipped as damaged at start ("path: damage").

        Empty unless the checkpointer was created with
        `load_previous_if_damaged=True` and the newest checkpoint was damaged.
        """
        return list(self._server.skipped_checkpoints)

    def stop(self) -> None:
        """Stops the server; blocked calls on its tables fail with CancelledError.

        Idempotent.
        """
        server = getattr(self, "_server", None)
        if server is not None:
            server.stop()
        self._stopped = True

    def wait(self) -> None:
        """Blocks until the server is stopped (by `stop` from another thread).

        Raises:
          KeyboardInterrupt: If interrupted by Ctrl-C (SIGINT).
        """
        self._server.wait()

    def localhost_client(self) -> Any:
        """Creates a client connected to this server through localhost.

        Returns:
          A `reverb_tf.Client` for `localhost:<port>`.
        """
        return client_lib.Client(f"localhost:{self.port}")

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *unused_exc_info: Any) -> None:
        self.stop()

    def __del__(self) -> None:
        try:
            self.stop()
        except Exception:  # pylint: disable=broad-except
            # Nothing sensible can be done with an error during garbage
            # collection or interpreter shutdown.
            pass

    def __repr__(self) -> str:
        server = getattr(self, "_server", None)
        port = server.port if server is not None else None
        names = [t.name for t in getattr(self, "_tables", [])]
        return f"Server(port={port}, tables={names})"
