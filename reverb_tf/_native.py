# SPDX-License-Identifier: Apache-2.0
"""Lazy access to the native module `reverb_tf._core`.

The pure-Python parts of reverb_tf (selectors, rate limiters, errors,
signatures) work without the native module, and `import reverb_tf` must not
fail or slow down because of it; only objects that talk to a server need it,
and they fetch it through `core()` when they are created.
"""

import importlib
from types import ModuleType
from typing import Optional

_CORE: Optional[ModuleType] = None


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
    return _CORE
