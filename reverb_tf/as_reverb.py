# SPDX-License-Identifier: Apache-2.0
"""Serve `import reverb` from reverb_tf, for libraries written against dm-reverb.

A program can write `import reverb_tf as reverb`, but libraries such as
TF-Agents, RLDS and Acme say `import reverb` (and `from reverb import
structured_writer`, `reverb.cc.checkpointing.checkpoint_pb2`, ...) in code the
user does not own. `install()` makes every `reverb` and `reverb.X` import
return the module object `reverb_tf` and `reverb_tf.X` already are, so a class
has one identity whichever name reached it (an `isinstance` check or an
`except reverb.errors.DeadlineExceededError` in a library sees reverb_tf's
class). Nothing is installed as a package named `reverb`, so dm-reverb and
reverb_tf can share a Python environment; the alias lives in one process.

    python -m reverb_tf.as_reverb program.py [args...]
    python -m reverb_tf.as_reverb -m pytest [args...]

runs a program or a module (as `python` would) with the alias in place.
"""

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import runpy
import sys
import types
from typing import List, Optional, Sequence

_ALIAS = "reverb"
_TARGET = "reverb_tf"


class _AliasLoader(importlib.abc.Loader):
    """Returns the already-imported reverb_tf module for a `reverb` name."""

    def __init__(self, target: str) -> None:
        self._target = target
        self._real_spec: Optional[importlib.machinery.ModuleSpec] = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        # The one object stays reverb_tf's and is only listed a second time,
        # under the dm-reverb name: the import system keeps its __name__,
        # __file__ and __loader__ (exec_module gives __spec__ back).
        module = importlib.import_module(self._target)
        self._real_spec = module.__spec__
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        # Already executed when reverb_tf's own name was imported. The import
        # system has just set __spec__ to the alias's, unconditionally; the
        # real one is what importlib.reload and pickling by module look up.
        module.__spec__ = self._real_spec


class _AliasFinder(importlib.abc.MetaPathFinder):
    """Finds `reverb` and `reverb.X` as aliases of `reverb_tf` and `reverb_tf.X`."""

    def find_spec(
        self,
        fullname: str,
        path: Optional[Sequence[str]] = None,
        target: Optional[types.ModuleType] = None,
    ) -> Optional[importlib.machinery.ModuleSpec]:
        del path, target
        if fullname != _ALIAS and not fullname.startswith(_ALIAS + "."):
            return None
        real = _TARGET + fullname[len(_ALIAS) :]
        if real not in sys.modules:
            try:
                if importlib.util.find_spec(real) is None:
                    return None  # The import fails as `reverb.X` would.
            except ModuleNotFoundError:
                return None
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(real))


def installed() -> bool:
    """Returns whether `import reverb` is served by reverb_tf in this process."""
    return any(isinstance(finder, _AliasFinder) for finder in sys.meta_path)


def install() -> None:
    """Makes `import reverb` (and every `reverb.X`) import reverb_tf's modules.

    Idempotent. Call it before the library that imports `reverb` is imported.

    Raises:
      ImportError: `reverb` is already imported in this process and is not
        reverb_tf (dm-reverb was loaded first; two replay libraries under one
        name would mix their classes).
    """
    if installed():
        return
    loaded = sys.modules.get(_ALIAS)
    if loaded is not None and loaded is not importlib.import_module(_TARGET):
        raise ImportError(
            f"module 'reverb' is already imported from {getattr(loaded, '__file__', loaded)!r}; "
            "install the reverb_tf alias before anything imports dm-reverb"
        )
    # First, so that an installed dm-reverb does not win the name.
    sys.meta_path.insert(0, _AliasFinder())


def main(argv: Optional[List[str]] = None) -> None:
    """Runs `program.py args...` or `-m module args...` with the alias installed.

    Args:
      argv: the command line after the program name (default: `sys.argv[1:]`).

    Raises:
      SystemExit: with a usage message when no program is given.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv == ["-m"]:
        raise SystemExit(
            "usage: python -m reverb_tf.as_reverb program.py [args...]\n"
            "       python -m reverb_tf.as_reverb -m module [args...]\n"
            "Runs the program with `import reverb` served by reverb_tf."
        )
    install()
    if argv[0] == "-m":
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = argv
        runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
