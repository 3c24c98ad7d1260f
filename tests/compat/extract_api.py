# SPDX-License-Identifier: Apache-2.0
"""Writes dm-reverb's public API as JSON: the checked list of tests/compat.

Run under the dm-reverb 0.14 oracle venv (scripts/setup_oracle.sh makes it):

    $ORACLE/bin/python tests/compat/extract_api.py > tests/compat/dm_reverb_0_14_api.json

For every public module of the `reverb` package it records each public name
with its kind and, for callables, the parameters (name, kind, default) that
a program can pass; for classes, their public methods and properties too.
`test_api_surface.py` checks reverb_tf against the file.
"""

import enum
import importlib
import inspect
import json
import sys
import types
import typing
from typing import Any, Dict, List, Optional

# Modules a program imports. The rest of the package is build plumbing
# (lib*.so, pip_package) or generated ops (`cc.ops.gen_reverb_ops`, whose
# functions a generated module of another name owns; scenarios
# `module_paths.*` compare it instead).
PUBLIC_MODULES = [
    "reverb",
    "reverb.cc.checkpointing.checkpoint_pb2",
    "reverb.cc.patterns_pb2",
    "reverb.client",
    "reverb.errors",
    "reverb.item_selectors",
    "reverb.pattern_dataset",
    "reverb.platform.checkpointers_lib",
    "reverb.platform.default.checkpointers",
    "reverb.platform.default.ensure_tf_install",
    "reverb.platform.default.load_op_library",
    "reverb.platform.default.server_main_command_line_args",
    "reverb.pybind",
    "reverb.rate_limiters",
    "reverb.replay_sample",
    "reverb.reverb_types",
    "reverb.server",
    "reverb.server_executable.server_from_proto",
    "reverb.server_executable.server_main",
    "reverb.server_executable.reverb_config_pb2",
    "reverb.structured_writer",
    "reverb.tf_client",
    "reverb.timestep_dataset",
    "reverb.trajectory_dataset",
    "reverb.trajectory_writer",
]

# Names a module imports for its own use rather than offers.
_IMPORTED_MODULES = {
    "tf",
    "np",
    "tree",
    "typing",
    "logging",
    "dataclasses",
    "functools",
    "collections",
    "itertools",
    "abc",
    "os",
    "tempfile",
    "time",
    "threading",
    "datetime",
    "weakref",
    "contextlib",
    "pybind",
    "errors",
    "dataset_ops",
    "nest",
}


def _kind(value: Any) -> str:
    if isinstance(value, types.ModuleType):
        return "module"
    if inspect.isclass(value):
        return "class"
    if getattr(value, "__module__", None) == "typing":
        return "type_alias"
    if callable(value):
        return "function"
    return "constant"


def _parameters(fn: Any) -> Optional[List[Dict[str, Any]]]:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return None  # pybind and other builtins without a Python signature
    result = []
    for p in signature.parameters.values():
        if p.name == "self":
            continue
        entry = {"name": p.name, "kind": p.kind.name}
        if p.default is not inspect.Parameter.empty:
            default = p.default
            if isinstance(default, enum.Enum):
                default = default.name
            entry["default"] = (
                default
                if isinstance(default, (int, float, str, bool, type(None)))
                else repr(type(default).__name__)
            )
        result.append(entry)
    return result


def _members(cls: type) -> Dict[str, Any]:
    members = {}
    for name in dir(cls):
        if name.startswith("_") and name not in (
            "__init__",
            "__enter__",
            "__exit__",
            "__iter__",
            "__next__",
            "__call__",
        ):
            continue
        try:
            raw = inspect.getattr_static(cls, name)
        except AttributeError:
            continue
        # What every object or tuple has is not part of the API.
        if any(
            name in vars(base)
            for base in (object, tuple, Exception, BaseException, dict)
            if base not in cls.__mro__[:1]
        ) and name not in vars(cls):
            continue
        if isinstance(raw, property):
            members[name] = {"kind": "property"}
        elif isinstance(raw, (staticmethod, classmethod)):
            members[name] = {
                "kind": type(raw).__name__,
                "parameters": _parameters(getattr(cls, name)),
            }
        elif callable(raw):
            members[name] = {"kind": "method", "parameters": _parameters(raw)}
        else:
            members[name] = {"kind": "attribute"}
    return members


def extract() -> Dict[str, Any]:
    api = {}
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        names = {}
        for name in sorted(vars(module)):
            if name.startswith("_") or name in _IMPORTED_MODULES:
                continue
            value = getattr(module, name)
            # Modules imported for internal use, and typing aliases of other
            # packages, are not part of reverb's API.
            if isinstance(value, types.ModuleType) and (
                module_name != "reverb"
                or not value.__name__.startswith("reverb")
                or name == "libpybind"
            ):
                continue
            if name in ("DESCRIPTOR", "annotations") or value is getattr(typing, name, None):
                continue
            owner = getattr(value, "__module__", None) or ""
            if (inspect.isclass(value) or inspect.isfunction(value)) and not (
                owner.startswith("reverb")
                or owner.startswith("_reverb")
                or owner == "builtins"
                or owner.endswith("_pb2")
            ):
                continue
            entry = {"kind": _kind(value)}
            if entry["kind"] == "function":
                entry["parameters"] = _parameters(value)
            elif entry["kind"] == "class":
                entry["parameters"] = _parameters(value)
                entry["bases"] = [
                    b.__name__
                    for b in value.__mro__[1:]
                    if b.__module__ == "builtins" and b is not object
                ]
                entry["members"] = _members(value)
            names[name] = entry
        api[module_name] = names
    return api


if __name__ == "__main__":
    json.dump(
        {"dm_reverb_version": "0.14.0", "modules": extract()}, sys.stdout, indent=1, sort_keys=True
    )
    sys.stdout.write("\n")
