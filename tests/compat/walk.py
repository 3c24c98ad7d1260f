# SPDX-License-Identifier: Apache-2.0
"""The public API walked mechanically, for the differential tests.

A walk takes one class (or module) of the dm-reverb 0.14 API list
(`dm_reverb_0_14_api.json`), the states a program can put an instance in
(`states`: name -> a factory of a fresh receiver in that state) and, per
public member, the arguments of one valid call. From those it makes every
call: the valid one in every state, then the same call with one parameter at
a time replaced by each invalid value that the parameter's kind has
(`INVALID`, keyed by parameter name, so a parameter gets the same hostile
values wherever it appears). Each call gets a fresh receiver, runs in a
thread bounded by `BLOCK_S` (a call that blocks is recorded as blocking, in
both implementations alike) and is recorded with its result or its exception
and that exception's message, which `harness.differences` compares
mechanically (`harness.messages_agree`).

The scenarios themselves live in `scenarios/api_walk.py`; this module only
walks. It runs under both interpreters: standard library and numpy only.
"""

import dataclasses
import fnmatch
import inspect
import itertools
import json
import math
import os
import sys
import threading
import types
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

import harness

HERE = os.path.dirname(os.path.abspath(__file__))

# How long one call may run before it counts as blocking. Both
# implementations answer every non-blocking call of the walk in well under
# this on 2 busy cores (tracing a tf.function included); a call that blocks
# (sampling an empty table, waiting on a stopped server) is then recorded as
# "blocks" for both. About 25 calls block, so this costs about 50 s.
BLOCK_S = 2.0

BLOCKS = "<blocks>"
ABORTS = harness.ABORTS_DM_REVERB
NAN = float("nan")

# Calls that abort dm-reverb 0.14's whole process (a failed CHECK in its
# C++), as fnmatch patterns of "scenario:state/member/variant". They are not
# made under dm-reverb (the process would die and take the walk with it);
# its observation is ABORTS, and reverb_tf must raise an exception there
# (harness.differences).
ABORTING_DM_REVERB = [
    # rate_limiter.cc: "Check failed: num_inserts > 0".
    "table:*/can_insert/num_inserts=zero",
    "table:*/can_insert/num_inserts=negative",
    # rate_limiter.cc: "Check failed: num_samples > 0".
    "table:*/can_sample/num_samples=zero",
    "table:*/can_sample/num_samples=negative",
    # A segmentation fault: the table dereferences the missing selector.
    "table:class/__init__/sampler=none",
    "table:class/__init__/remover=none",
    # rate_limiter.cc: "Check failed: samples_per_insert > 0" (NaN fails it too).
    "rate_limiters:SampleToInsertRatio/__init__/samples_per_insert=nan",
    "rate_limiters:RateLimiter/__init__/samples_per_insert=zero",
    "rate_limiters:RateLimiter/__init__/samples_per_insert=negative",
    "rate_limiters:RateLimiter/__init__/samples_per_insert=nan",
    # rate_limiter.cc: "Check failed: min_size_to_sample > 0".
    "rate_limiters:RateLimiter/__init__/min_size_to_sample=zero",
    "rate_limiters:RateLimiter/__init__/min_size_to_sample=negative",
    # The same check, for a limiter made from an empty message.
    "from_proto:rate_limiter_from_proto/__call__/proto=empty",
]


def api_members() -> Dict[str, Dict[str, Any]]:
    """dm-reverb 0.14's public API list: module -> name -> description."""
    with open(os.path.join(HERE, "dm_reverb_0_14_api.json")) as f:
        return json.load(f)["modules"]


# Hostile values per parameter name: every parameter of that name, in every
# walked call, is also called with each of these (one parameter at a time).
# A parameter a walk names that is missing here fails the walk.
_COUNT = [("zero", 0), ("negative", -1), ("float", 1.5), ("str", "2"), ("none", None)]
_OPTIONAL_COUNT = [("zero", 0), ("negative", -1), ("float", 1.5), ("str", "2")]
_PRIORITY = [("negative", -1.0), ("nan", NAN), ("inf", math.inf), ("str", "high"), ("none", None)]
_TIMEOUT_MS = [("negative", -5), ("zero", 0), ("str", "x"), ("float", 2.5)]
_BOOL = [("str", "yes"), ("none", None), ("int", 2)]
_TABLE_NAME = [("missing", "missing"), ("int", 7), ("none", None), ("empty", "")]
_NAME = [("int", 7), ("none", None), ("empty", "")]
_ADDRESS = [
    ("none", None),
    ("int", 7),
    ("empty", ""),
    ("no_port", "localhost"),
    ("closed_port", "localhost:1"),
]
_SELECTOR = [("none", None), ("str", "uniform"), ("class", "<selector class>")]
_LIMITER = [("none", None), ("str", "min_size")]
_SIGNATURE = [("not_spec", {"a": 1}), ("str", "spec")]

INVALID: Dict[str, List[Tuple[str, Any]]] = {
    # Tables, servers, clients.
    "table": _TABLE_NAME,
    "name": _NAME,
    "server_address": _ADDRESS,
    "tables": [("none", None), ("empty", []), ("str", ["table"]), ("one", "<one table>")],
    "port": [("negative", -1), ("too_large", 70000), ("str", "port")],
    "checkpointer": [("str", "checkpointer")],
    "sampler": _SELECTOR,
    "remover": _SELECTOR,
    "max_size": [("zero", 0), ("negative", -1), ("float", 1.5), ("none", None)],
    "rate_limiter": _LIMITER,
    "max_times_sampled": [("negative", -1), ("float", 1.5), ("str", "2")],
    "extensions": [("object", [object()]), ("none", None)],
    "signature": _SIGNATURE,
    "num_inserts": _COUNT,
    "num_samples": _COUNT,
    "timeout": [("negative", -1), ("zero", 0), ("str", "x")],
    "path": [("str", "p"), ("int", 7), ("none", None)],
    # Data.
    "data": [
        ("none", None),
        ("object", "<object>"),
        ("empty_list", []),
        ("none_leaf", {"a": None}),
        ("str_leaf", {"a": "text"}),
    ],
    "sequence": [("none", None), ("scalar", np.int32(1)), ("empty", [])],
    "priorities": [
        ("missing_table", {"missing": 1.0}),
        ("empty", {}),
        ("negative", "<-1>"),
        ("nan", "<nan>"),
        ("str", "<str>"),
        ("float", 1.0),
        ("none", None),
    ],
    "priority": _PRIORITY,
    "updates": [
        ("unknown_key", {12345: 1.0}),
        ("str_key", {"k": 1.0}),
        ("nan", "<nan>"),
        ("negative", "<-1>"),
        ("str_value", "<str>"),
        ("list", [1.0]),
    ],
    "deletes": [("unknown_key", [12345]), ("str_key", ["k"]), ("int", 5), ("none_leaf", [None])],
    # Writers.
    "num_keep_alive_refs": _COUNT,
    "max_sequence_length": _COUNT,
    "chunk_length": _OPTIONAL_COUNT,
    "max_in_flight_items": _OPTIONAL_COUNT,
    "max_chunk_length": _COUNT,
    "num_timesteps": _COUNT + [("too_many", 100)],
    "delta_encoded": _BOOL,
    "validate_items": _BOOL,
    "partial_step": _BOOL,
    "clear_buffers": _BOOL,
    "retry_on_unavailable": _BOOL,
    "squeeze": _BOOL,
    "emit_timesteps": _BOOL,
    "unpack_as_table_signature": _BOOL,
    "block_until_num_items": [("negative", -1), ("str", "x"), ("float", 1.5)],
    "timeout_ms": _TIMEOUT_MS,
    "trajectory": [
        ("none", None),
        ("empty_dict", {}),
        ("empty_list", []),
        ("array", "<array>"),
        ("empty_column", "<empty column>"),
    ],
    "data_references": [
        ("empty", []),
        ("none_leaf", [None]),
        ("str", "refs"),
        ("mixed_shapes", "<mixed shapes>"),
    ],
    "configs": [("none", None), ("empty", []), ("str", ["config"])],
    # Rate limiters and selectors.
    "min_size_to_sample": [("zero", 0), ("negative", -1), ("float", 1.5), ("str", "2")],
    "samples_per_insert": [("zero", 0.0), ("negative", -1.0), ("nan", NAN), ("str", "x")],
    "error_buffer": [
        ("negative", -1.0),
        ("inverted_tuple", (5.0, 1.0)),
        ("str", "x"),
        ("triple", (1.0, 2.0, 3.0)),
    ],
    "min_diff": [("nan", NAN), ("str", "x"), ("above_max", 100.0)],
    "max_diff": [("nan", NAN), ("str", "x"), ("below_min", -100.0)],
    "size": [("zero", 0), ("negative", -1), ("float", 1.5), ("str", "2")],
    "priority_exponent": [("negative", -1.0), ("nan", NAN), ("str", "x")],
    # TensorFlow-facing.
    "dtypes": [("none", None), ("str", "float32"), ("mismatch", "<mismatch>")],
    "shapes": [("none", None), ("str", "shape"), ("mismatch", "<mismatch>")],
    "max_in_flight_samples_per_worker": [("zero", 0), ("negative", -1), ("float", 1.5)],
    "num_workers_per_iterator": [("zero", 0), ("below_minus_one", -2)],
    "max_samples_per_stream": [("zero", 0), ("below_minus_one", -2)],
    "rate_limiter_timeout_ms": [("below_minus_one", -2)],
    "max_samples": [("zero", 0), ("below_minus_one", -2)],
    # Not a negative timeout: whether dm-reverb then waits depends on timing.
    "get_signature_timeout_secs": [("str", "x")],
    "data_dtypes": [("empty", []), ("mismatch", "<mismatch>"), ("str", "float32")],
    "keys": [
        ("unknown", "<unknown keys>"),
        ("wrong_dtype", "<float keys>"),
        ("wrong_rank", "<scalar key>"),
    ],
    "shared_name": [("int", 7)],
    # Structured writer helpers and the server binary's config functions.
    "pattern": [("none", None), ("empty", []), ("array", np.zeros(2)), ("str", "pattern")],
    "conditions": [("none", None), ("str", ["condition"]), ("array", [np.zeros(2)])],
    "step_structure": [("none", None), ("str", "step"), ("empty", {})],
    "transform": [
        ("none", None),
        ("not_callable", 7),
        ("raises", "<raises>"),
        ("returns_none", "<returns none>"),
        ("out_of_range", "<out of range>"),
    ],
    "step_spec": [("none", None), ("str", "spec"), ("other_structure", "<other structure>")],
    "config": [("none", None), ("str", "config"), ("empty", "<empty config>")],
    "value": [("str", "high"), ("none", None), ("nan", NAN)],
    "max_priority_weight": [("negative", -0.5), ("above_one", 1.5), ("str", "x"), ("nan", NAN)],
    "get_field_from_step_fn": [
        ("none", None),
        ("not_callable", 7),
        ("missing_field", "<missing field>"),
    ],
    "s": [("none", None), ("empty", "<empty selector>"), ("str", "uniform")],
    "proto": [("none", None), ("empty", "<empty limiter>"), ("str", "limiter")],
}


_current = {"scenario": "", "oracle": False}
# REVERB_TF_WALK_TRACE=1 names every call on stderr before making it: what
# finds the call that crashed a process.
_TRACE = bool(os.environ.get("REVERB_TF_WALK_TRACE"))


def begin(ctx: Any, scenario: str) -> None:
    """Starts the walks of one scenario: its name (for `ABORTING_DM_REVERB`)
    and whether the module under test is dm-reverb itself."""
    _current.update(scenario=scenario, oracle=ctx.reverb.__name__ == "reverb")


@dataclasses.dataclass
class Call:
    """One public member and the arguments of one valid call.

    Attributes:
      member: The member's name in the API list ("insert", "__init__",
        "info" for a property).
      args: Parameter name -> valid value. A callable with the attribute
        `from_env` is called with the state's environment first (values that
        need a live writer or server). A `Special` value is resolved the
        same way.
      call: How to make the call: (receiver, kwargs) -> result. Defaults to
        `getattr(receiver, member)(**kwargs)`, or the attribute for a
        property.
      post: What of the result a program observes, when the result itself
        cannot be compared (a temporary path, a new object).
      invalid: Per parameter, values to try besides `INVALID`'s, or a
        parameter -> False to skip INVALID for it (with the reason in a
        comment where the walk says it).
      states: Only these states (default: every state of the walk).
      block_s: How long the call may run before it counts as blocking (more
        than BLOCK_S for a call that itself waits out a bounded read).
      invalid_states: The states in which the invalid variants run (default:
        all of `states`); elsewhere only the valid call. Where every call
        blocks (a stopped server, an empty table) the variants would each
        only wait out `BLOCK_S` again.
    """

    member: str
    args: Dict[str, Any] = dataclasses.field(default_factory=dict)
    call: Optional[Callable[[Any, Dict[str, Any]], Any]] = None
    post: Optional[Callable[[Any], Any]] = None
    invalid: Dict[str, Any] = dataclasses.field(default_factory=dict)
    states: Optional[Sequence[str]] = None
    invalid_states: Optional[Sequence[str]] = None
    block_s: float = BLOCK_S


def from_env(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Marks `fn(env)` as a value computed from the state's environment."""
    fn.from_env = True
    return fn


def _is_placeholder(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("<") and value.endswith(">")


def _resolve(name: str, value: Any, env: Any, placeholders: Dict[str, Dict[str, Any]]) -> Any:
    if callable(value) and getattr(value, "from_env", False):
        return value(env)
    if _is_placeholder(value):
        if value == "<object>":
            return object()
        return _resolve(name, placeholders[name][value], env, placeholders)
    return value


def materialize(value: Any) -> Any:
    """What of a call's result a program sees: iterators are consumed (at
    most three elements), so the lazy errors of generators show."""
    if isinstance(value, (types.GeneratorType, Iterator)) and not isinstance(
        value, (str, bytes, np.ndarray)
    ):
        return list(itertools.islice(value, 3))
    return value


def bounded(fn: Callable[[], Any], timeout_s: float = BLOCK_S) -> Any:
    """Runs `fn` in a daemon thread; its result, its exception (harness.MessagedError) or
    BLOCKS if it has not returned after `timeout_s`."""
    box: Dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = materialize(fn())
        except Exception as e:  # pylint: disable=broad-except
            box["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        return BLOCKS
    if "error" in box:
        return harness.MessagedError(box["error"])
    return box["value"]


def _parameters(api: Dict[str, Any], member: str) -> Optional[List[str]]:
    description = api.get("members", {}).get(member, api if member == "__call__" else None)
    if description is None:
        raise KeyError(f"{member} is not in dm-reverb 0.14's API list")
    if description.get("kind") in ("property", "attribute"):
        return None
    return [
        p["name"]
        for p in description.get("parameters") or []
        if p["kind"] not in ("VAR_POSITIONAL", "VAR_KEYWORD")
    ]


def walk(
    receiver_api: Dict[str, Any],
    states: Dict[str, Callable[[], Any]],
    calls: Sequence[Call],
    placeholders: Optional[Dict[str, Any]] = None,
    post_all: Optional[Callable[[Any], Any]] = None,
) -> Dict[str, Any]:
    """Makes every call of `calls` in every state; returns label -> outcome.

    Args:
      receiver_api: The class's (or function's) entry in the API list.
      states: State name -> factory of `(receiver, env)`; called once per
        call, so every call starts from the same state.
      calls: The members to call and their valid arguments.
      placeholders: Parameter -> "<...>" -> the value: the invalid values
        of `INVALID` that depend on the walk (e.g. priorities "<-1>" -> a
        dict naming the walk's table with -1.0).
      post_all: Applied to every successful result after `Call.post`.

    Returns:
      "state/member/param=label" (or ".../valid") -> the outcome.

    Raises:
      KeyError: a call names a parameter the API list does not have, or one
        `INVALID` does not know: the walk would silently skip it otherwise.
    """
    placeholders = placeholders or {}
    out: Dict[str, Any] = {}
    for call in calls:
        parameters = _parameters(receiver_api, call.member)
        if parameters is not None:
            unknown = set(call.args) - set(parameters)
            if unknown:
                raise KeyError(f"{call.member}: {sorted(unknown)} not among {parameters}")
        variants: List[Tuple[str, Dict[str, Any]]] = [("valid", {})]
        for name in parameters or []:
            extra = call.invalid.get(name, [])
            if extra is False:
                continue
            if name not in INVALID and name not in call.invalid:
                raise KeyError(f"{call.member}: parameter {name!r} has no invalid values")
            for label, value in INVALID.get(name, []) + list(extra):
                if (
                    _is_placeholder(value)
                    and value != "<object>"
                    and value not in placeholders.get(name, {})
                ):
                    raise KeyError(f"{call.member}: no value for {name}={value}")
                variants.append((f"{name}={label}", {name: value}))
        for state_name, make in states.items():
            if call.states is not None and state_name not in call.states:
                continue
            for label, override in variants:
                if (
                    label != "valid"
                    and call.invalid_states is not None
                    and state_name not in call.invalid_states
                ):
                    continue
                key = f"{state_name}/{call.member}/{label}"
                if _current["oracle"] and any(
                    fnmatch.fnmatchcase(f"{_current['scenario']}:{key}", pattern)
                    for pattern in ABORTING_DM_REVERB
                ):
                    out[key] = ABORTS
                    continue
                if _TRACE:
                    print(f"walk {_current['scenario']}:{key}", file=sys.stderr, flush=True)
                out[key] = _one(make, call, parameters, override, placeholders, post_all)
    return out


def _one(make, call: Call, parameters, override, placeholders, post_all) -> Any:
    def run() -> Any:
        receiver, env = make()
        try:
            kwargs = {
                name: _resolve(name, value, env, placeholders)
                for name, value in dict(call.args, **override).items()
            }
        except Exception as e:  # pylint: disable=broad-except
            return ("arguments", harness.MessagedError(e))
        if call.call is not None:
            result = call.call(receiver, kwargs)
        elif parameters is None:
            result = getattr(receiver, call.member)
        else:
            result = getattr(receiver, call.member)(**kwargs)
        result = materialize(result)
        if call.post is not None:
            result = call.post(result)
        if post_all is not None:
            result = post_all(result)
        return result

    return bounded(run, call.block_s)


def count(observation: Any) -> int:
    """How many calls a walk observation holds."""
    if isinstance(observation, dict) and "items" in observation:
        return len(observation["items"])
    return 0


def signature_names(fn: Callable[..., Any]) -> List[str]:
    """Parameter names of `fn`, for walks over plain functions."""
    return list(inspect.signature(fn).parameters)
