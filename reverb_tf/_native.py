# SPDX-License-Identifier: Apache-2.0
"""Lazy access to the native module `reverb_tf._core`.

The pure-Python parts of reverb_tf (selectors, rate limiters, errors,
signatures) work without the native module, and `import reverb_tf` must not
fail or slow down because of it; only objects that talk to a server need it,
and they fetch it through `core()` when they are created.
"""

import atexit
import gc
import importlib
import os
from types import ModuleType
from typing import Optional

from absl import logging

_CORE: Optional[ModuleType] = None

# The core's severities (platform/logging.h) as absl logging's functions.
_LOG_FUNCTIONS = (logging.info, logging.warning, logging.error)


def _log_core_line(severity: int, line: str) -> None:
    """Writes one of the core's log lines to Python's logging (absl's).

    Args:
      severity: 0 info, 1 warning, 2 error.
      line: The line, without a newline.
    """
    _LOG_FUNCTIONS[min(max(severity, 0), 2)]("reverb_tf: %s", line)


def core() -> ModuleType:
    """Returns `reverb_tf._core`, importing it on first use.

    Returns:
      The native module.

    Raises:
      ImportError: If the native module is not built or cannot be loaded; the
        message says how to build it.
    """
    global _CORE
    if _CORE is None:
        try:
            _CORE = importlib.import_module("reverb_tf._core")
        except ImportError as e:
            raise ImportError(
                "reverb_tf's native module reverb_tf._core could not be imported "
                f"({e}). Build it with `bash scripts/setup.sh` (the offline Bazel "
                "build) before creating a Server, Client or writer."
            ) from e
        # The core reports what no caller can be told (a damaged log, a
        # skipped checkpoint) to this process's logging, once; before the
        # interpreter goes, back to stderr (its thread must not outlive it).
        _CORE.set_log_sink(_log_core_line)
        atexit.register(_CORE.set_log_sink, None)
        os.register_at_fork(after_in_child=_keep_inherited_objects)
    return _CORE


def _keep_inherited_objects() -> None:
    """In a fork()ed child: the parent's objects are never garbage-collected.

    The child has copies of the parent's native servers, clients and writers
    but none of their threads; destroying one there (joining a thread that
    is not there, ending a gRPC call) crashes the child. A child that only
    runs its own work (multiprocessing's fork method) must not die because
    the cyclic garbage collector met an object its parent had already let
    go. gc.freeze() moves every object that exists at the fork out of the
    collector's reach, as Python's documentation advises for fork without
    exec; objects the child creates are collected as usual.
    """
    gc.freeze()
