# SPDX-License-Identifier: Apache-2.0
"""Every public name of dm-reverb 0.14 exists in reverb_tf, callable the same way.

The checked list is `dm_reverb_0_14_api.json`, extracted from dm-reverb
itself by `extract_api.py`. For each module `reverb.X` the test imports
`reverb_tf.X` and checks every name: its kind (module, class, function,
constant, type alias), and for callables and class members that every
parameter dm-reverb accepts is accepted here under the same name, in the same
position, with the same default. reverb_tf may add parameters that have
defaults; those are extensions, not differences a program can trip on.
"""

import importlib
import inspect
import json
import os
from typing import Any, Dict, List, Optional

import pytest

_API = json.load(open(os.path.join(os.path.dirname(__file__), "dm_reverb_0_14_api.json")))

# Differences we chose, each with its reason. Key: "module:Class.member", or
# "module:Class.*" for all of a class's members: test_name consults the list
# only for a class's constructor and members, so a top-level name cannot be
# excused (test_every_deliberate_difference_is_checked holds keys to that).
_BUILT_BY_THE_CLIENT = (
    "constructed by the Client from a native "
    "object, in dm-reverb as in reverb_tf; the native objects differ, so no program "
    "can call this constructor portably"
)
_NATIVE_METHODS = (
    "dm-reverb's native methods (CamelCase) are the interface between its C++ and its "
    "Python layer, which programs do not call; reverb_tf's native classes have their own"
)
# Methods of tf.data.Dataset that TensorFlow 2.21 no longer has (dm-reverb's
# datasets inherit them from TF 2.14's); not reverb's to provide.
_TF_REMOVED = {
    "filter_with_legacy_function",
    "map_with_legacy_function",
    "from_sparse_tensor_slices",
}

DELIBERATE = {
    "reverb:Writer.__init__": _BUILT_BY_THE_CLIENT,
    "reverb.client:Writer.__init__": _BUILT_BY_THE_CLIENT,
    "reverb:TrajectoryWriter.__init__": _BUILT_BY_THE_CLIENT,
    "reverb.trajectory_writer:TrajectoryWriter.__init__": _BUILT_BY_THE_CLIENT,
    "reverb.pybind:Client.*": _NATIVE_METHODS,
    "reverb.pybind:Server.*": _NATIVE_METHODS,
    "reverb.pybind:Writer.*": _NATIVE_METHODS,
    "reverb.pybind:TrajectoryWriter.*": _NATIVE_METHODS,
    "reverb.pybind:StructuredWriter.*": _NATIVE_METHODS,
    "reverb.pybind:Sampler.*": _NATIVE_METHODS,
    "reverb.pybind:WeakCellRef.*": _NATIVE_METHODS,
}


def _ours(module_name: str) -> str:
    return "reverb_tf" + module_name[len("reverb") :]


def _entries():
    for module_name, names in sorted(_API["modules"].items()):
        for name, entry in sorted(names.items()):
            yield pytest.param(module_name, name, entry, id=f"{module_name}:{name}")


def _check_parameters(where: str, want: Optional[List[Dict[str, Any]]], got_fn: Any) -> None:
    if want is None:
        return  # a native callable: existence is what can be checked
    try:
        got = [p for p in inspect.signature(got_fn).parameters.values() if p.name != "self"]
    except (TypeError, ValueError):
        pytest.fail(f"{where}: no Python signature to check against dm-reverb's {want}")
    by_name = {p.name: p for p in got}
    var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in got)
    positional = [
        p.name
        for p in got
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    want_positional = [
        w["name"] for w in want if w["kind"] in ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")
    ]
    assert positional[: len(want_positional)] == want_positional, (
        f"{where}: positional parameters {positional} do not start with dm-reverb's "
        f"{want_positional}"
    )
    for w in want:
        if w["kind"] in ("VAR_POSITIONAL", "VAR_KEYWORD"):
            assert any(p.kind.name == w["kind"] for p in got), f"{where}: no {w['kind']}"
            continue
        p = by_name.get(w["name"])
        if p is None:
            assert var_kw, f"{where}: parameter {w['name']!r} missing"
            continue
        if "default" in w:
            assert p.default is not inspect.Parameter.empty, (
                f"{where}: {w['name']!r} needs a default ({w['default']!r} in dm-reverb)"
            )
            if not isinstance(w["default"], str) or not w["default"].startswith("'"):
                assert p.default == w["default"], (
                    f"{where}: default of {w['name']!r} is {p.default!r}, dm-reverb's is "
                    f"{w['default']!r}"
                )
    for p in got:
        if p.name not in {w["name"] for w in want} and p.kind not in (
            inspect.Parameter.VAR_POSITIONAL,
            inspect.Parameter.VAR_KEYWORD,
        ):
            assert p.default is not inspect.Parameter.empty, (
                f"{where}: extra parameter {p.name!r} must have a default"
            )


@pytest.mark.parametrize("module_name,name,entry", list(_entries()))
def test_name(module_name: str, name: str, entry: Dict[str, Any]) -> None:
    key = f"{module_name}:{name}"
    module = importlib.import_module(_ours(module_name))
    assert hasattr(module, name), f"{_ours(module_name)} has no {name!r}"
    value = getattr(module, name)
    kind = entry["kind"]
    if kind == "module":
        assert inspect.ismodule(value), f"{key} should be a module"
        return
    if kind == "class":
        assert inspect.isclass(value), f"{key} should be a class, is {type(value)}"
        builtin_bases = {b.__name__ for b in value.__mro__[1:] if b.__module__ == "builtins"}
        missing_bases = set(entry["bases"]) - builtin_bases
        assert not missing_bases, f"{key} should also be a {missing_bases}"
        if entry.get("parameters") is not None and f"{key}.__init__" not in DELIBERATE:
            _check_parameters(key, entry["parameters"], value)
        is_proto = hasattr(value, "DESCRIPTOR") and hasattr(value, "ListFields")
        import tensorflow as tf  # pylint: disable=g-import-not-at-top

        is_dataset = issubclass(value, tf.data.Dataset)
        failures = []  # every member is checked; all failures are reported
        for member, spec in sorted(entry["members"].items()):
            where = f"{key}.{member}"
            if where in DELIBERATE or f"{key}.*" in DELIBERATE:
                continue
            if is_proto and spec["kind"] != "attribute" and spec["kind"] != "property":
                continue  # the protobuf library's Message API, not reverb's
            if is_dataset and (
                member in _TF_REMOVED
                or (hasattr(tf.data.Dataset, member) and member not in vars(value))
            ):
                continue  # tf.data.Dataset's own API, as this TensorFlow defines it
            try:
                assert hasattr(value, member), f"{where} missing"
                if spec["kind"] == "property":
                    assert isinstance(inspect.getattr_static(value, member), property), (
                        f"{where} should be a property"
                    )
                elif (
                    spec["kind"] in ("method", "staticmethod", "classmethod")
                    and member != "__init__"
                ):
                    _check_parameters(where, spec.get("parameters"), getattr(value, member))
            except AssertionError as e:
                failures.append(str(e).splitlines()[0])
        assert not failures, "\n".join(failures)
        return
    if kind == "function":
        # dm-reverb's MinHeap is a functools.partial; a class is as callable.
        assert callable(value), f"{key} should be callable"
        _check_parameters(key, entry.get("parameters"), value)
    if kind == "type_alias":
        assert value is not None


def _excuses_something(key: str) -> bool:
    """Whether test_name would consult `key` while checking dm-reverb's list."""
    module_name, _, path = key.partition(":")
    name, _, member = path.partition(".")
    entry = _API["modules"].get(module_name, {}).get(name)
    if entry is None or entry["kind"] != "class" or not member:
        return False
    if member == "*":
        return bool(entry["members"])
    if member == "__init__" and entry.get("parameters") is not None:
        return True
    return member in entry["members"]


def test_every_deliberate_difference_is_checked() -> None:
    """A key that names nothing test_name checks excuses nothing: stale, or misspelt."""
    stale = sorted(key for key in DELIBERATE if not _excuses_something(key))
    assert not stale, f"DELIBERATE keys that name nothing checked: {stale}"


def test_the_list_is_dm_reverbs() -> None:
    """Guards the list itself: it was extracted from dm-reverb 0.14, not written."""
    assert _API["dm_reverb_version"] == "0.14.0"
    assert sum(len(names) for names in _API["modules"].values()) >= 100
