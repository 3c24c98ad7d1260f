# SPDX-License-Identifier: Apache-2.0
"""What a program can observe, as JSON: the heart of the differential tests.

A scenario is a function `scenario_<name>(ctx)` in `scenarios/*.py`. It
uses `ctx.reverb` (either `reverb` from dm-reverb 0.14 or `reverb_tf`; the
scenario cannot tell which) and returns what a program would see: return
values, shapes, dtypes, exceptions. `run_scenarios.py` runs every scenario
under one module and writes `normalize`d observations as JSON;
`test_differential.py` runs it under both and compares.

This file is imported under both interpreters (Python 3.11 with TF 2.14 and
with TF 2.21), so it uses nothing but the standard library, numpy, dm-tree
and TensorFlow.
"""

import dataclasses
import difflib
import math
import re
from typing import Any, Callable, Dict, List, Tuple

import numpy as np


def _class_name(cls: type) -> str:
    return cls.__qualname__


def _tf():
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    return tf


def _exception(error: BaseException) -> Dict[str, Any]:
    tf = _tf()
    mro = type(error).__mro__
    return {
        "__raises__": {
            "builtin_bases": sorted(
                c.__name__
                for c in mro
                if c.__module__ == "builtins" and c not in (BaseException, Exception, object)
            ),
            "tf_errors": sorted(
                c.__name__
                for c in mro
                if issubclass(c, tf.errors.OpError) and c is not tf.errors.OpError
            ),
            "reverb_errors": sorted(
                c.__name__ for c in mro if c.__module__ in ("reverb.errors", "reverb_tf.errors")
            ),
        }
    }


class PhrasedError:
    """An exception together with the phrase its message must contain.

    `Context.call_expecting` returns one; `normalize` records the phrase and
    the message, and `differences` requires the phrase in both messages:
    reverb_tf's message contains dm-reverb's key phrase verbatim and may add
    detail around it.
    """

    def __init__(self, error: BaseException, phrase: str) -> None:
        self.error = error
        self.phrase = phrase


class MessagedError:
    """An exception recorded with its message, which `differences` compares
    mechanically (`messages_agree`) instead of by a scenario's phrase: what
    the API walk (`walk.py`) records."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


# Messages no program can rely on, whose exception class alone is compared:
# pybind11's for arguments dm-reverb's bindings cannot convert (they list
# its internal C++ signatures), and the interpreter's own for an operation
# dm-reverb's Python code happened to attempt on an argument of the wrong
# type (comparing None with an int, iterating an int).
_INCIDENTAL = re.compile(
    r"\(\): incompatible (function|constructor) arguments\."
    r"|not supported between instances of"
    r"|object is not (iterable|callable|subscriptable)"
    r"|object has no attribute"
    r"|unsupported operand type"
    r"|argument must be a string, a bytes-like object or a real number"
    r"|^expected str, bytes or os\.PathLike object"
    r"|can't multiply sequence by non-int"
    r"|(not enough|too many) values to unpack"
    # The protobuf library's own wording, which changed between versions.
    r"|Parameter to MergeFrom\(\) must be instance of same class"
    r"|Message must be initialized with a dict"
)


def incidental(message: str) -> bool:
    """Whether dm-reverb's `message` is one whose wording no program relies on."""
    return bool(_INCIDENTAL.search(message))


_VOLATILE = re.compile(r"0x[0-9a-fA-F]+|[0-9]+(?:\.[0-9]+)?(?:e[-+]?[0-9]+)?")


def _essential(message: str) -> str:
    """An error message without TensorFlow's wrapping, which differs between
    TF versions: the "in user code:" traceback of a tf.function (only its
    last line, the error itself, is kept), a graph error's "Detected at
    node" traceback, and the function-node and op names around an op's
    message."""
    lines = [line for line in message.splitlines() if line.strip()]
    if "in user code:" in message and lines:
        return re.sub(r"^[A-Za-z_.]+(Error|Exception): ", "", lines[-1].strip())
    kept = [
        line
        for line in lines
        if not line[0].isspace()
        and not line.startswith(("Graph execution error:", "Detected at node"))
    ]
    text = " ".join(kept)
    text = re.sub(r"\{\{function_node [^}]*\}\}", "", text)
    return re.sub(r"\[\[\{\{node [^}]*\}\}\]\]|\[Op:[^\]]*\]", "", text)


def _message_core(message: str) -> str:
    """A message without what varies between runs and TF versions: TF's
    wrapping, numbers, addresses, whitespace runs, case."""
    return " ".join(_VOLATILE.sub("#", _essential(message)).lower().split())


def messages_agree(want: str, got: str) -> bool:
    """Whether reverb_tf's message `got` says what dm-reverb's `want` says.

    They agree when dm-reverb's message, numbers aside, is part of ours, or
    when the longest stretch the two share is at least half of dm-reverb's
    message and at least 16 characters (ours may word the context around
    dm-reverb's key phrase differently, for example gRPC's status wrapping).
    An empty dm-reverb message agrees with anything, and so does an
    `incidental` one.
    """
    if incidental(want):
        return True
    w, g = _message_core(want), _message_core(got)
    if w in g:
        return True
    match = difflib.SequenceMatcher(None, w, g, autojunk=False).find_longest_match(
        0, len(w), 0, len(g)
    )
    return match.size >= 16 and match.size >= len(w) / 2


def normalize(value: Any) -> Any:
    """Turns a value into JSON that two implementations can be compared on.

    Types are named by their class name alone (`reverb.X` and `reverb_tf.X`
    compare equal); arrays and tensors keep dtype, shape and values.
    """
    if isinstance(value, BaseException):
        return _exception(value)
    if isinstance(value, MessagedError):
        observation = _exception(value.error)
        observation["__raises__"].update(auto_phrase=True, message=str(value.error))
        return observation
    if isinstance(value, PhrasedError):
        observation = _exception(value.error)
        observation["__raises__"].update(phrase=value.phrase, message=str(value.error))
        return observation
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return {"__float__": repr(value)} if not math.isfinite(value) else value
    if isinstance(value, bytes):
        return {"__bytes__": value.decode("latin-1")}
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            values = [normalize(v) for v in value.ravel().tolist()]
        else:
            values = normalize(value.ravel().tolist())
        return {"__ndarray__": str(value.dtype), "shape": list(value.shape), "values": values}
    if isinstance(value, np.generic):
        return {"__npscalar__": str(value.dtype), "value": normalize(value.item())}
    if isinstance(value, type):
        return {"__class__": _class_name(value)}
    module = type(value).__module__ or ""
    if module.startswith("tensorflow"):
        tf = _tf()
        if isinstance(value, tf.TensorSpec):
            return {
                "__spec__": value.dtype.name,
                "shape": value.shape.as_list() if value.shape.rank is not None else None,
                "name": value.name,
            }
        if isinstance(value, tf.TensorShape):
            return {"__shape__": value.as_list() if value.rank is not None else None}
        if isinstance(value, tf.DType):
            return {"__dtype__": value.name}
        if isinstance(value, (tf.Tensor, tf.Variable)) and hasattr(value, "numpy"):
            array = value.numpy()
            return {"__tensor__": value.dtype.name, "value": normalize(np.asarray(array))}
    if hasattr(value, "DESCRIPTOR") and hasattr(value, "ListFields"):
        from google.protobuf import json_format  # pylint: disable=g-import-not-at-top

        return {
            "__proto__": value.DESCRIPTOR.name,
            "fields": json_format.MessageToDict(value, preserving_proto_field_name=True),
        }
    if dataclasses.is_dataclass(value):
        return {
            "__dataclass__": _class_name(type(value)),
            "fields": {
                f.name: normalize(getattr(value, f.name)) for f in dataclasses.fields(value)
            },
        }
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return {
            "__namedtuple__": _class_name(type(value)),
            "fields": {f: normalize(getattr(value, f)) for f in value._fields},
        }
    if isinstance(value, dict):
        return {
            "__dict__": _class_name(type(value)),
            "items": [[normalize(k), normalize(v)] for k, v in value.items()],
        }
    if isinstance(value, (list, tuple)):
        return {"__" + type(value).__name__ + "__": [normalize(v) for v in value]}
    return {"__object__": _class_name(type(value))}


class Context:
    """What a scenario gets: the module under test and servers it cleans up."""

    def __init__(self, reverb: Any) -> None:
        self.reverb = reverb
        self._servers: List[Any] = []

    def server(self, tables: List[Any], **kwargs: Any) -> Tuple[Any, Any]:
        """Starts a server on a free port; returns (server, client)."""
        server = self.reverb.Server(tables=tables, **kwargs)
        self._servers.append(server)
        return server, self.reverb.Client(f"localhost:{server.port}")

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Calls `fn`; returns its result or the exception it raised."""
        try:
            return fn(*args, **kwargs)
        except Exception as e:  # pylint: disable=broad-except
            return e

    def call_expecting(self, phrase: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Calls `fn`; returns its result or, if it raised, the exception
        with `phrase`, which both implementations' messages must contain.

        Args:
          phrase: dm-reverb's key phrase of the expected error message, as
            the oracle gives it.
          fn: The call.
          *args: Its positional arguments.
          **kwargs: Its keyword arguments.

        Returns:
          What `fn` returned, or a `PhrasedError`.
        """
        try:
            return fn(*args, **kwargs)
        except Exception as e:  # pylint: disable=broad-except
            return PhrasedError(e, phrase)

    def close(self) -> None:
        for server in self._servers:
            try:
                server.stop()
            except Exception:  # pylint: disable=broad-except
                pass
        self._servers.clear()


# A call the API walk does not make under dm-reverb, because it aborts
# dm-reverb's process (walk.ABORTING_DM_REVERB); reverb_tf must raise there.
ABORTS_DM_REVERB = "<aborts dm-reverb's process>"

# Observations whose float values differ by rounding only are equal.
_REL_TOL = 1e-6

# Builtin bases reverb_tf adds on purpose, per reverb error class: a rate
# limiter timeout is also a TimeoutError (README, "Errors"). Code written for
# dm-reverb never catches these by the extra base by mistake: dm-reverb's
# DeadlineExceededError derives from Exception only.
_EXTRA_BASES = {"DeadlineExceededError": {"TimeoutError", "OSError"}}


def _phrase_differences(want: Dict[str, Any], got: Dict[str, Any], path: str) -> List[str]:
    """Where two recorded exceptions' messages lack the scenario's phrase."""
    if want.get("auto_phrase"):
        if messages_agree(want["message"], got.get("message", "")):
            return []
        return [
            f"{path}: message {got.get('message')!r:.300} does not say dm-reverb's "
            f"{want['message']!r:.300}"
        ]
    phrase = want.get("phrase")
    if phrase is None:
        return []
    out = []
    if phrase not in want["message"]:
        out.append(
            f"{path}: the scenario's phrase {phrase!r} is not in dm-reverb's own "
            f"message {want['message']!r:.300}"
        )
    if phrase not in got.get("message", ""):
        out.append(
            f"{path}: message {got.get('message')!r:.300} lacks dm-reverb's phrase {phrase!r}"
        )
    return out


def differences(want: Any, got: Any, path: str = "") -> List[str]:
    """Lists where `got` (reverb_tf) differs from `want` (dm-reverb).

    Exceptions compare by the classes a program can catch: the same builtin
    and tf.errors bases, and at least dm-reverb's reverb.errors classes; an
    exception recorded with a phrase (`Context.call_expecting`) also by its
    message, which must contain the phrase under both.
    """
    if want == ABORTS_DM_REVERB:
        if isinstance(got, dict) and "__raises__" in got:
            return []
        return [
            f"{path}: dm-reverb aborts its process here; reverb_tf must raise, "
            f"not give {got!r:.300}"
        ]
    if isinstance(want, dict) and "__raises__" in want:
        if not (isinstance(got, dict) and "__raises__" in got):
            return [f"{path}: dm-reverb raises {want['__raises__']}, reverb_tf gives {got!r:.300}"]
        w, g = want["__raises__"], got["__raises__"]
        if (
            w.get("auto_phrase")
            and w["builtin_bases"] == ["AttributeError"]
            and incidental(w.get("message", ""))
            and g["builtin_bases"] == ["TypeError"]
        ):
            # dm-reverb looked up an attribute on an argument of the wrong
            # type; reverb_tf checks the argument and raises TypeError.
            w = dict(w, builtin_bases=["TypeError"])
        allowed = set().union(*[_EXTRA_BASES.get(c, set()) for c in w["reverb_errors"]])
        g = dict(
            g, builtin_bases=sorted(set(g["builtin_bases"]) - (allowed - set(w["builtin_bases"])))
        )
        out = []
        for field in ("builtin_bases", "tf_errors"):
            if w[field] != g[field]:
                out.append(f"{path}: exception {field} {g[field]} != dm-reverb's {w[field]}")
        if not set(w["reverb_errors"]) <= set(g["reverb_errors"]):
            out.append(f"{path}: exception not a {w['reverb_errors']} (is {g['reverb_errors']})")
        out.extend(_phrase_differences(w, g, path))
        return out
    if isinstance(want, float) or isinstance(got, float):
        if (
            isinstance(want, (int, float))
            and isinstance(got, (int, float))
            and not isinstance(want, bool)
            and not isinstance(got, bool)
            and math.isclose(want, got, rel_tol=_REL_TOL, abs_tol=1e-12)
        ):
            return []
        return [f"{path}: {got!r} != dm-reverb's {want!r}"]
    if isinstance(want, dict) and isinstance(got, dict):
        out = []
        for key in sorted(set(want) | set(got), key=str):
            if key not in got:
                out.append(f"{path}.{key}: missing (dm-reverb has {want[key]!r:.200})")
            elif key not in want:
                out.append(f"{path}.{key}: extra {got[key]!r:.200}")
            else:
                out.extend(differences(want[key], got[key], f"{path}.{key}"))
        return out
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return [
                f"{path}: {len(got)} elements != dm-reverb's {len(want)}: "
                f"{got!r:.300} vs {want!r:.300}"
            ]
        out = []
        for i, (w, g) in enumerate(zip(want, got)):
            out.extend(differences(w, g, f"{path}[{i}]"))
        return out
    if want != got:
        return [f"{path}: {got!r:.300} != dm-reverb's {want!r:.300}"]
    return []
