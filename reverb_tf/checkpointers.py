# SPDX-License-Identifier: Apache-2.0
"""Checkpointers: where a `Server` saves its tables and loads them from.

A checkpointer names a root directory. `Server(tables, checkpointer=...)`
loads the newest checkpoint under it before it starts serving (or, if the
root holds none, the checkpoint at `fallback_checkpoint_path`), and every
`Client.checkpoint()` writes a new one there, returning its path. Saving and
loading run in the native server: see docs/checkpointing.md for the format
and its guarantees (atomic renames, checksums, a short pause per table).

    checkpointer = reverb_tf.checkpointers.DefaultCheckpointer('/data/replay')
    server = reverb_tf.Server(tables, checkpointer=checkpointer)
"""

import abc
import os
import tempfile
from typing import Any, Dict, Optional


class CheckpointerBase(abc.ABC):
    """What a `Server` needs from a checkpointer.

    As in dm-reverb, a checkpointer hands the server the object that does the
    work through `internal_checkpointer()`; in reverb_tf that is a
    `DefaultCheckpointer` (what `pybind.create_default_checkpointer` returns),
    whose directory settings the native server uses.
    """

    @abc.abstractmethod
    def internal_checkpointer(self) -> "DefaultCheckpointer":
        """Returns the checkpointer whose settings the native server uses."""


class DefaultCheckpointer(CheckpointerBase):
    """Checkpoints in a directory of your choice.

    Each checkpoint is a subdirectory named by its UTC creation time. The
    newest `keep` are kept; older ones are deleted once a new one is complete.
    """

    def __init__(
        self,
        path: str,
        group: str = "",
        fallback_checkpoint_path: Optional[str] = None,
        keep: int = 1,
        *,
        load_previous_if_damaged: bool = False,
    ) -> None:
        """Describes a checkpointer.

        Args:
          path: Root directory of the checkpoints; created if missing.
          group: If not empty, the Unix group given to checkpoint files.
          fallback_checkpoint_path: A checkpoint directory (e.g. a path that
            `Client.checkpoint()` returned in another run) loaded when `path`
            holds no checkpoint yet.
          keep: How many checkpoints to keep under `path` (>= 1).
          load_previous_if_damaged: If the newest checkpoint is damaged (a
            record fails its checksum or a file is missing), load the newest
            intact one instead of failing; the server logs a warning and
            lists what it skipped in `Server.skipped_checkpoints`. Needs
            `keep` > 1 to have an older one. Not in dm-reverb.

        Raises:
          ValueError: If `path` is empty or `keep` < 1.
        """
        if not path:
            raise ValueError("DefaultCheckpointer needs a path")
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self._path = os.fspath(path)
        self._group = group
        self._fallback = fallback_checkpoint_path or ""
        self._keep = int(keep)
        self._load_previous_if_damaged = bool(load_previous_if_damaged)

    @property
    def path(self) -> str:
        """The root directory of the checkpoints."""
        return self._path

    def internal_checkpointer(self) -> "DefaultCheckpointer":
        """Returns this checkpointer: its settings are what the server uses."""
        return self

    def native_options(self) -> Dict[str, Any]:
        return {
            "checkpoint_root": self._path,
            "fallback_checkpoint_path": os.fspath(self._fallback),
            "checkpoint_keep": self._keep,
            "checkpoint_group": self._group,
            "checkpoint_load_previous_if_damaged": self._load_previous_if_damaged,
        }

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(path={self._path!r}, group={self._group!r}, "
            f"fallback_checkpoint_path={self._fallback!r}, keep={self._keep})"
        )


class TempDirCheckpointer(DefaultCheckpointer):
    """Checkpoints in a new temporary directory (what a `Server` uses by default).

    Nothing is loaded on start unless `fallback_checkpoint_path` is given,
    because the directory is new.
    """

    def __init__(self, fallback_checkpoint_path: Optional[str] = None, group: str = "") -> None:
        """Creates the temporary directory.

        Args:
          fallback_checkpoint_path: A checkpoint directory to load on start.
          group: If not empty, the Unix group given to checkpoint files.
        """
        super().__init__(
            tempfile.mkdtemp(prefix="reverb_tf_checkpoints_"),
            group=group,
            fallback_checkpoint_path=fallback_checkpoint_path,
        )

    def native_options(self) -> Dict[str, Any]:
        # A restart will not find these checkpoints: the native server
        # refuses a write-ahead log with them.
        return dict(super().native_options(), checkpoint_temporary=True)


def default_checkpointer() -> CheckpointerBase:
    """The checkpointer a `Server` uses when none is given.

    Returns:
      A `TempDirCheckpointer`.
    """
    return TempDirCheckpointer()


_WAL_SYNC = ("every_write", "every_n_ms", "none")


class WriteAheadLog:
    """A write-ahead log for a `Server`: no acknowledged change is lost (reverb_tf extension).

    With it, a server acknowledges an insert, a priority update or delete and
    a reset only once the change is in the log; when it starts it loads its
    newest checkpoint and replays the log after it, so a crash (SIGKILL
    included) loses nothing that a client was told is stored. Checkpoints
    truncate the log. A damaged or torn log is replayed up to the damage,
    with a warning (`Server.wal_replay`), and checkpointed at once.

    A log that cannot be written (a full disk) does not stop the server:
    it goes on sampling, and refuses inserts, priority updates, deletes and
    resets with `ResourceExhaustedError` ("the write-ahead log cannot be
    written: ...") until a checkpoint succeeds, which it retries every
    `retry_interval_ms` and on every `checkpoint()` call.
    """

    def __init__(
        self,
        path: str,
        sync: Optional[str] = None,
        sync_interval_ms: Optional[float] = None,
        retry_interval_ms: Optional[float] = None,
    ) -> None:
        """Names the log's directory and its sync policy.

        A setting left None is the native server's default: its one
        definition is `WalOptions` (checkpointing/wal.h), which the server
        binary's --wal_* flags share.

        Args:
          path: Directory of the log's files (created if missing). One
            server's: never share it.
          sync: When the log is synced to disk. "every_write": before each
            acknowledgement (a crashed machine loses nothing); "every_n_ms":
            every `sync_interval_ms` (a killed process loses nothing, a
            crashed machine at most that long); "none": when the kernel
            decides (a killed process still loses nothing). None: the native
            server's default, "every_write".
          sync_interval_ms: The interval of "every_n_ms". None: the native
            server's default, 10 ms.
          retry_interval_ms: While the log cannot be written, how often the
            server tries the checkpoint that lets it accept writes again.
            None: the native server's default, 5 s.

        Raises:
          ValueError: For an empty path, an unknown policy or a sync
            interval that is not positive (a retry interval that is not
            positive fails when the `Server` starts).
        """
        if not path:
            raise ValueError("the write-ahead log needs a directory")
        if sync is not None and sync not in _WAL_SYNC:
            raise ValueError(f"sync must be one of {', '.join(_WAL_SYNC)}, got {sync!r}")
        if sync_interval_ms is not None and not sync_interval_ms > 0:
            raise ValueError(f"sync_interval_ms must be > 0, got {sync_interval_ms!r}")
        self._path = os.fspath(path)
        self._sync = sync
        self._sync_interval_ms = None if sync_interval_ms is None else float(sync_interval_ms)
        self._retry_interval_ms = None if retry_interval_ms is None else float(retry_interval_ms)

    @property
    def path(self) -> str:
        """The log's directory."""
        return self._path

    def native_options(self) -> Dict[str, Any]:
        """The native server's keyword arguments (an interval left None: its default)."""
        options: Dict[str, Any] = {"wal_dir": self._path}
        if self._sync is not None:
            options["wal_sync"] = self._sync
        if self._sync_interval_ms is not None:
            options["wal_sync_interval_s"] = self._sync_interval_ms / 1000.0
        if self._retry_interval_ms is not None:
            options["wal_retry_interval_s"] = self._retry_interval_ms / 1000.0
        return options

    def __repr__(self) -> str:
        return (
            f"WriteAheadLog(path={self._path!r}, sync={self._sync!r}, "
            f"sync_interval_ms={self._sync_interval_ms}, "
            f"retry_interval_ms={self._retry_interval_ms})"
        )
