# SPDX-License-Identifier: Apache-2.0
"""The public API, walked mechanically (walk.py): every member of every
walked class in every state a program reaches, valid and hostile arguments.

One scenario per class. `WALKED` names what each covers; the API-list
members no walk covers are named, with the reason, in `NOT_WALKED`, and
`tests/compat/test_api_walk_coverage.py` checks that the two together are
the whole of dm-reverb 0.14's public classes and functions.
"""

import importlib
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import walk  # pylint: disable=g-import-not-at-top,wrong-import-position
from walk import Call, from_env  # pylint: disable=g-import-not-at-top,wrong-import-position

NAN = float("nan")

# (module in the API list, class or function) -> the scenario walking it.
WALKED = {
    ("reverb.client", "Client"): "client",
    ("reverb.trajectory_writer", "TrajectoryWriter"): "trajectory_writer",
    ("reverb.trajectory_writer", "TrajectoryColumn"): "trajectory_column",
    ("reverb.client", "Writer"): "legacy_writer",
    ("reverb.server", "Table"): "table",
    ("reverb.server", "Server"): "server",
    ("reverb.rate_limiters", "MinSize"): "rate_limiters",
    ("reverb.rate_limiters", "SampleToInsertRatio"): "rate_limiters",
    ("reverb.rate_limiters", "Queue"): "rate_limiters",
    ("reverb.rate_limiters", "Stack"): "rate_limiters",
    ("reverb.rate_limiters", "RateLimiter"): "rate_limiters",
    ("reverb.item_selectors", "Prioritized"): "selectors",
    ("reverb.item_selectors", "Uniform"): "selectors",
    ("reverb.item_selectors", "Fifo"): "selectors",
    ("reverb.item_selectors", "Lifo"): "selectors",
    ("reverb.item_selectors", "MaxHeap"): "selectors",
    ("reverb.item_selectors", "MinHeap"): "selectors",
    ("reverb.structured_writer", "StructuredWriter"): "structured_writer",
    ("reverb.tf_client", "TFClient"): "tf_client",
    ("reverb.trajectory_dataset", "TrajectoryDataset"): "trajectory_dataset",
    ("reverb.timestep_dataset", "TimestepDataset"): "timestep_dataset",
    ("reverb.replay_sample", "SampleInfo"): "sample_info",
    ("reverb.platform.checkpointers_lib", "DefaultCheckpointer"): "checkpointers",
    ("reverb.platform.checkpointers_lib", "TempDirCheckpointer"): "checkpointers",
    ("reverb.structured_writer", "create_config"): "structured_functions",
    ("reverb.structured_writer", "pattern_from_transform"): "structured_functions",
    ("reverb.structured_writer", "create_reference_step"): "structured_functions",
    ("reverb.structured_writer", "infer_signature"): "structured_functions",
    ("reverb.structured_writer", "unpack_pattern"): "structured_functions",
    ("reverb.structured_writer", "constant_priority_fn"): "structured_functions",
    ("reverb.structured_writer", "td_error"): "structured_functions",
    ("reverb.server_executable.server_from_proto", "selector_from_proto"): "from_proto",
    ("reverb.server_executable.server_from_proto", "rate_limiter_from_proto"): "from_proto",
    ("reverb.server_executable.server_from_proto", "tables_from_proto"): "from_proto",
}


def _api(module, name):
    return walk.api_members()[module][name]


def _info(info):
    """What of a TableInfo the walk compares (no call-time statistics)."""
    limiter = info.rate_limiter_info
    return {
        "name": info.name,
        "max_size": info.max_size,
        "current_size": info.current_size,
        "max_times_sampled": info.max_times_sampled,
        "num_episodes": info.num_episodes,
        "min_size_to_sample": limiter.min_size_to_sample,
        "samples_per_insert": limiter.samples_per_insert,
        "min_diff": limiter.min_diff,
        "max_diff": limiter.max_diff,
        "sampler": info.sampler_options.WhichOneof("distribution"),
        "remover": info.remover_options.WhichOneof("distribution"),
    }


def _without_keys(value):
    """Sampled items without their random keys; other values as they are."""
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        if "probability" in value._fields and "key" in value._fields:
            return {f: getattr(value, f) for f in value._fields if f != "key"}
        return type(value)(*[_without_keys(v) for v in value])
    if isinstance(value, list):
        return [_without_keys(v) for v in value]
    return value


def _type_name(value):
    return type(value).__name__


class _Env:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


def _tables(reverb):
    s, r = reverb.selectors, reverb.rate_limiters
    return [
        reverb.Table.queue("q", 10),
        # Never written: where a sample blocks, its thread waits here for
        # good instead of taking items later calls expect.
        reverb.Table.queue("e", 10),
        # Fifo sampling: the sampled item (and so its key) is known.
        reverb.Table("u", s.Fifo(), s.Fifo(), 10, r.MinSize(1)),
        reverb.Table("p", s.Prioritized(0.8), s.Fifo(), 10, r.MinSize(1)),
    ]


def _live_server(ctx):
    server, client = ctx.server(_tables(ctx.reverb))
    return server, client, f"localhost:{server.port}"


def _stopped_address(ctx):
    server, _ = ctx.server(_tables(ctx.reverb))
    address = f"localhost:{server.port}"
    server.stop()
    return address


def _fill(client, n=3):
    for i in range(n):
        client.insert(np.int32(i), {"q": 1.0, "u": 1.0, "p": 1.0 + i})


def _reset(client):
    for table in ("q", "u", "p"):
        client.reset(table)


def _priorities(table):
    return {"<-1>": {table: -1.0}, "<nan>": {table: NAN}, "<str>": {table: "x"}}


def _client_calls(reverb):
    """Client's members with valid arguments, and the walk's placeholders."""
    config = from_env(
        lambda env: [
            reverb.structured_writer.create_config(
                reverb.structured_writer.pattern_from_transform({"a": None}, lambda s: s["a"][-1]),
                "q",
            )
        ]
    )
    calls = [
        Call("server_address", post=lambda a: a.startswith("localhost:")),
        Call("insert", {"data": np.int32(7), "priorities": {"q": 1.0, "p": 2.0}}),
        Call(
            "sample",
            {
                "table": from_env(lambda e: e.sample_table),
                "num_samples": 2,
                "emit_timesteps": True,
                "unpack_as_table_signature": False,
            },
            post=_without_keys,
            invalid_states=("full",),
        ),
        Call(
            "mutate_priorities",
            {
                "table": "p",
                "updates": from_env(lambda e: {e.key: 2.0}),
                "deletes": from_env(lambda e: [e.key]),
            },
        ),
        Call("reset", {"table": "u"}),
        Call(
            "server_info",
            {"timeout": 5},
            post=lambda infos: {name: _info(info) for name, info in sorted(infos.items())},
        ),
        Call("checkpoint", post=_type_name, states=("empty", "server_stopped")),
        Call(
            "trajectory_writer", {"num_keep_alive_refs": 2, "validate_items": True}, post=_type_name
        ),
        Call(
            "writer",
            {
                "max_sequence_length": 2,
                "delta_encoded": False,
                "chunk_length": None,
                "max_in_flight_items": 25,
            },
            post=_type_name,
        ),
        Call("structured_writer", {"configs": config}, post=_type_name),
    ]
    placeholders = {
        "priorities": _priorities("q"),
        "updates": {
            "<-1>": from_env(lambda e: {e.key: -1.0}),
            "<nan>": from_env(lambda e: {e.key: NAN}),
            "<str>": from_env(lambda e: {e.key: "x"}),
        },
    }
    return calls, placeholders


def scenario_client(ctx):
    walk.begin(ctx, "client")
    reverb = ctx.reverb
    _, client, address = _live_server(ctx)

    def empty():
        _reset(client)
        return reverb.Client(address), _Env(key=12345, address=address, sample_table="e")

    def full():
        _reset(client)
        _fill(client)
        key = next(client.sample("u", emit_timesteps=False)).info.key
        return reverb.Client(address), _Env(key=int(key), address=address, sample_table="q")

    calls, placeholders = _client_calls(reverb)
    out = walk.walk(
        _api("reverb.client", "Client"), {"empty": empty, "full": full}, calls, placeholders
    )
    constructor = [
        Call(
            "__init__",
            {"server_address": address},
            call=lambda cls, kwargs: _type_name(cls(**kwargs)),
        )
    ]
    out.update(
        walk.walk(
            _api("reverb.client", "Client"), {"class": lambda: (reverb.Client, None)}, constructor
        )
    )
    return out


def _trajectory_writer_states(ctx):
    reverb = ctx.reverb
    _, client, address = _live_server(ctx)

    def fresh():
        _reset(client)
        return reverb.Client(address).trajectory_writer(3), None

    def stepped():
        writer, _ = fresh()
        for i in range(2):
            writer.append({"a": np.int32(i), "b": np.full([2], i, np.float32)})
        return writer, None

    def episode_ended():
        writer, _ = stepped()
        writer.create_item("q", 1.0, {"a": writer.history["a"][-1]})
        writer.end_episode()
        return writer, None

    def closed():
        writer, _ = stepped()
        writer.close()
        return writer, None

    def partial():
        # A step is open and column "a" already has its value in it.
        writer, _ = stepped()
        writer.append({"a": np.int32(9)}, partial_step=True)
        return writer, None

    def past_window():
        # More steps than the keep-alive window (3): the oldest left it.
        writer, _ = fresh()
        for i in range(5):
            writer.append({"a": np.int32(i), "b": np.full([2], i, np.float32)})
        return writer, None

    return client, {
        "fresh": fresh,
        "stepped": stepped,
        "episode_ended": episode_ended,
        "closed": closed,
        "partial": partial,
        "past_window": past_window,
    }


def scenario_trajectory_writer(ctx):
    walk.begin(ctx, "trajectory_writer")
    client, states = _trajectory_writer_states(ctx)

    last_a = from_env(lambda env: {"a": env.history["a"][-1]})
    calls = [
        Call(
            "append",
            {"data": {"a": np.int32(5), "b": np.zeros([2], np.float32)}, "partial_step": False},
            invalid={
                "data": [
                    ("new_column", {"c": np.int32(1)}),
                    ("other_shape", {"a": np.int32(1), "b": np.zeros([3], np.float32)}),
                    ("other_dtype", {"a": np.float64(1), "b": np.zeros([2], np.float32)}),
                ]
            },
        ),
        # Only where the history has a step: elsewhere the trajectory itself
        # cannot be made.
        Call(
            "create_item",
            {"table": "q", "priority": 1.0, "trajectory": last_a},
            states=("stepped", "closed", "partial", "past_window"),
        ),
        Call("flush", {"block_until_num_items": 0, "timeout_ms": 1000}),
        Call("end_episode", {"clear_buffers": True, "timeout_ms": 1000}),
        Call(
            "configure",
            {"path": ("a",), "num_keep_alive_refs": 2, "max_chunk_length": 1},
            invalid={"path": [("missing", ("missing",))]},
        ),
        Call("close"),
        Call("episode_steps"),
        Call(
            "history",
            post=lambda h: (
                {k: len(v) for k, v in sorted(h.items())} if isinstance(h, dict) else len(h)
            ),
        ),
        Call("__enter__", post=_type_name),
        Call(
            "__exit__",
            {"exc_type": None, "exc_value": None, "exc_traceback": None},
            invalid={"exc_type": False, "exc_value": False, "exc_traceback": False},
        ),
    ]
    # The writer is the environment: trajectories are made of its history.
    wrapped = {
        name: (lambda make=make: (lambda w: (w, w))(make()[0])) for name, make in states.items()
    }
    placeholders = {
        "trajectory": {
            "<array>": np.zeros([2], np.int32),
            "<empty column>": from_env(lambda w: {"a": w.history["a"][-1:0]}),
        }
    }
    out = walk.walk(
        _api("reverb.trajectory_writer", "TrajectoryWriter"), wrapped, calls, placeholders
    )
    out["table_size_after"] = client.server_info()["q"].current_size
    return out


def scenario_trajectory_column(ctx):
    walk.begin(ctx, "trajectory_column")
    reverb = ctx.reverb
    _, states = _trajectory_writer_states(ctx)
    make_stepped = states["stepped"]

    def with_refs():
        writer, _ = make_stepped()
        return reverb.TrajectoryColumn, writer

    calls = [
        Call(
            "__init__",
            {
                "data_references": from_env(lambda w: list(w.history["a"][-2:])),
                "squeeze": False,
                "path": None,
            },
            call=lambda cls, kwargs: _column_view(cls(**kwargs)),
        )
    ]
    placeholders = {
        "data_references": {
            "<mixed shapes>": from_env(
                lambda w: list(w.history["a"][-1:]) + list(w.history["b"][-1:])
            )
        }
    }
    out = walk.walk(
        _api("reverb.trajectory_writer", "TrajectoryColumn"),
        {"refs": with_refs},
        calls,
        placeholders,
    )

    def column():
        writer, _ = make_stepped()
        return writer.history["b"][-2:], None

    def squeezed():
        writer, _ = make_stepped()
        return reverb.TrajectoryColumn(list(writer.history["a"][-1:]), squeeze=True), None

    def empty():
        return reverb.TrajectoryColumn([]), None

    members = [
        Call("dtype", post=str),
        Call("shape", post=lambda s: str(s)),
        Call("numpy"),
        Call("__iter__", post=lambda refs: len(list(refs))),
    ]
    out.update(
        walk.walk(
            _api("reverb.trajectory_writer", "TrajectoryColumn"),
            {"column": column, "squeezed": squeezed, "empty": empty},
            members,
        )
    )
    out.update(_history_index_walk(states))
    return out


# `writer.history[column][index]`: the history object is private in both
# libraries, so it has no entry in the API list; this one stands in.
_HISTORY_API = {
    "members": {
        "__getitem__": {
            "kind": "method",
            "parameters": [{"kind": "POSITIONAL_ONLY", "name": "index"}],
        }
    }
}


def _history_index_walk(writer_states):
    """Indexes column "a"'s history with every kind of index in every writer state."""

    def history_of(state):
        def make():
            writer, _ = writer_states[state]()
            # The writer is the environment: dm-reverb's references expire
            # once their writer is gone.
            return writer.history["a"], writer

        return make

    states = {
        name: history_of(name) for name in ("stepped", "episode_ended", "partial", "past_window")
    }
    calls = [
        Call(
            "__getitem__",
            {"index": -1},
            call=lambda history, kwargs: _column_view(history[kwargs["index"]]),
            invalid={
                "index": [
                    ("first", 0),
                    ("second", 1),
                    ("past_the_newest", 2),
                    ("beyond_the_window", 5),
                    ("before_the_first", -3),
                    ("far_negative", -10),
                    ("all", slice(None)),
                    ("every_second", slice(None, None, 2)),
                    ("reversed", slice(None, None, -1)),
                    ("slice_past_the_end", slice(1, 9)),
                    ("empty_slice", slice(1, 1)),
                    ("list", [0, 1]),
                    ("numpy_integer", np.int64(0)),
                    ("tuple", (0, 1)),
                    ("string", "a"),
                    ("float", 1.0),
                ]
            },
        )
    ]
    return walk.walk(_HISTORY_API, states, calls)


def _column_view(column):
    return {
        "len": len(column),
        "dtype": str(column.dtype),
        "shape": str(column.shape),
        "numpy": column.numpy(),
    }


def scenario_legacy_writer(ctx):
    walk.begin(ctx, "legacy_writer")
    reverb = ctx.reverb
    _, client, address = _live_server(ctx)

    def fresh():
        _reset(client)
        return reverb.Client(address).writer(3), None

    def stepped():
        writer, _ = fresh()
        writer.append(np.int32(1))
        writer.append(np.int32(2))
        return writer, None

    def closed():
        writer, _ = stepped()
        writer.close()
        return writer, None

    calls = [
        Call(
            "append",
            {"data": np.int32(3)},
            invalid={
                "data": [
                    ("other_structure", [np.int32(1), np.int32(2)]),
                    ("other_dtype", np.float64(1.0)),
                ]
            },
        ),
        Call("append_sequence", {"sequence": np.arange(2, dtype=np.int32)}),
        Call("create_item", {"table": "q", "num_timesteps": 1, "priority": 1.0}),
        Call("flush"),
        Call("close", {"retry_on_unavailable": True}),
        Call("__enter__", post=_type_name),
        Call("__exit__", call=lambda w, kwargs: w.__exit__(None, None, None)),
    ]
    out = walk.walk(
        _api("reverb.client", "Writer"),
        {"fresh": fresh, "stepped": stepped, "closed": closed},
        calls,
    )
    out["table_size_after"] = client.server_info()["q"].current_size
    return out


def _table_args(reverb):
    # Fresh selectors and limiter for every call: dm-reverb aborts when one
    # limiter object configures two tables.
    s, r = reverb.selectors, reverb.rate_limiters
    return {
        "name": "t",
        "sampler": from_env(lambda _: s.Uniform()),
        "remover": from_env(lambda _: s.Fifo()),
        "max_size": 10,
        "rate_limiter": from_env(lambda _: r.MinSize(1)),
        "max_times_sampled": 0,
        "extensions": (),
        "signature": None,
    }


def _table_placeholders(reverb):
    return {name: {"<selector class>": reverb.selectors.Uniform} for name in ("sampler", "remover")}


def scenario_table(ctx):
    walk.begin(ctx, "table")
    reverb = ctx.reverb
    api = _api("reverb.server", "Table")

    def unhosted():
        s, r = reverb.selectors, reverb.rate_limiters
        return reverb.Table("t", s.Uniform(), s.Fifo(), 10, r.MinSize(1)), None

    def hosted_empty():
        table, _ = unhosted()
        ctx.server([table])
        return table, None

    def hosted_full():
        table, _ = unhosted()
        _, client = ctx.server([table])
        for i in range(3):
            client.insert(np.int32(i), {"t": 1.0})
        return table, None

    def server_stopped():
        table, _ = hosted_full()
        ctx._servers[-1].stop()  # pylint: disable=protected-access
        return table, None

    states = {
        "unhosted": unhosted,
        "hosted_empty": hosted_empty,
        "hosted_full": hosted_full,
        "server_stopped": server_stopped,
    }
    calls = [
        Call("can_insert", {"num_inserts": 1}),
        Call("can_sample", {"num_samples": 1}),
        Call("info", post=_info),
        Call("name"),
        Call("replace", dict(_table_args(reverb), name="t2"), post=lambda t: _info(t.info)),
    ]
    out = walk.walk(api, states, calls, _table_placeholders(reverb))
    constructors = [
        Call("__init__", _table_args(reverb), call=lambda cls, kwargs: _info(cls(**kwargs).info)),
        Call(
            "queue",
            {"name": "t", "max_size": 10, "extensions": (), "signature": None},
            post=lambda t: _info(t.info),
        ),
        Call(
            "stack",
            {"name": "t", "max_size": 10, "extensions": (), "signature": None},
            post=lambda t: _info(t.info),
        ),
    ]
    out.update(
        walk.walk(
            api, {"class": lambda: (reverb.Table, None)}, constructors, _table_placeholders(reverb)
        )
    )
    return out


def scenario_server(ctx):
    walk.begin(ctx, "server")
    reverb = ctx.reverb
    api = _api("reverb.server", "Server")

    def make(**kwargs):
        server = reverb.Server(**kwargs)
        ctx._servers.append(server)  # pylint: disable=protected-access
        return server

    def running():
        return make(tables=[reverb.Table.queue("q", 3)]), None

    def stopped():
        server, _ = running()
        server.stop()
        return server, None

    calls = [
        Call("localhost_client", post=_type_name),
        Call("port", post=_type_name),
        Call("stop"),
        Call("wait"),
    ]
    out = walk.walk(api, {"running": running, "stopped": stopped}, calls)
    constructor = [
        Call(
            "__init__",
            {
                "tables": from_env(lambda _: [reverb.Table.queue("q", 3)]),
                "port": None,
                "checkpointer": None,
            },
            call=lambda _, kwargs: _type_name(make(**kwargs)),
            invalid={
                "tables": [
                    (
                        "duplicate_names",
                        from_env(
                            lambda _: [reverb.Table.queue("a", 1), reverb.Table.queue("a", 1)]
                        ),
                    )
                ]
            },
        )
    ]
    out.update(
        walk.walk(
            api,
            {"class": lambda: (reverb.Server, None)},
            constructor,
            {"tables": {"<one table>": from_env(lambda _: reverb.Table.queue("q", 3))}},
        )
    )
    return out


def _limiter_view(limiter, reverb):
    """A limiter as the table it configures reports it."""
    table = reverb.Table("t", reverb.selectors.Uniform(), reverb.selectors.Fifo(), 100, limiter)
    info = table.info.rate_limiter_info
    return [info.samples_per_insert, info.min_size_to_sample, info.min_diff, info.max_diff]


def scenario_rate_limiters(ctx):
    walk.begin(ctx, "rate_limiters")
    reverb = ctx.reverb
    r = reverb.rate_limiters
    view = lambda limiter: _limiter_view(limiter, reverb)
    out = {}
    for name, args in [
        ("MinSize", {"min_size_to_sample": 2}),
        (
            "SampleToInsertRatio",
            {"samples_per_insert": 2.0, "min_size_to_sample": 3, "error_buffer": 6.0},
        ),
        ("Queue", {"size": 4}),
        ("Stack", {"size": 4}),
        (
            "RateLimiter",
            {"samples_per_insert": 1.0, "min_size_to_sample": 1, "min_diff": -5.0, "max_diff": 5.0},
        ),
    ]:
        cls = getattr(r, name)
        calls = [Call("__init__", args, call=lambda c, kwargs: view(c(**kwargs)))]
        for key, value in walk.walk(
            _api("reverb.rate_limiters", name), {name: lambda cls=cls: (cls, None)}, calls
        ).items():
            out[key] = value
    return out


def scenario_selectors(ctx):
    walk.begin(ctx, "selectors")
    reverb = ctx.reverb
    s = reverb.selectors

    def view(selector):
        table = reverb.Table("t", selector, s.Fifo(), 10, reverb.rate_limiters.MinSize(1))
        return table.info.sampler_options.WhichOneof("distribution")

    out = {}
    prioritized = _api("reverb.item_selectors", "Prioritized")
    # Prioritized's constructor is listed without parameters (a pybind
    # class); priority_exponent is its one argument under both.
    prioritized = dict(
        prioritized,
        members=dict(
            prioritized["members"],
            __init__={
                "kind": "method",
                "parameters": [{"name": "priority_exponent", "kind": "POSITIONAL_OR_KEYWORD"}],
            },
        ),
    )
    out.update(
        walk.walk(
            prioritized,
            {"Prioritized": lambda: (s.Prioritized, None)},
            [
                Call(
                    "__init__", {"priority_exponent": 0.8}, call=lambda c, kwargs: view(c(**kwargs))
                )
            ],
        )
    )
    for name in ("Uniform", "Fifo", "Lifo"):
        out[f"{name}/__init__/valid"] = walk.bounded(lambda n=name: view(getattr(s, n)()))
        out[f"{name}/__init__/positional_argument"] = walk.bounded(
            lambda n=name: view(getattr(s, n)(1))
        )
    for name in ("MaxHeap", "MinHeap"):
        out[f"{name}/__call__/valid"] = walk.bounded(lambda n=name: view(getattr(s, n)()))
    return out


# Writers whose items stay pending for good (scenario_structured_writer).
_NEVER_DELETED = []


def scenario_structured_writer(ctx):
    walk.begin(ctx, "structured_writer")
    reverb = ctx.reverb
    sw = reverb.structured_writer
    _, client, address = _live_server(ctx)
    pattern = sw.pattern_from_transform({"a": None, "b": None}, lambda s: {"a": s["a"][-2:]})
    config = sw.create_config(pattern, "q")
    # "e" (never reset) filled to its Queue's size: the items of a writer
    # into it stay pending for good, so a flush with a timeout times out.
    for i in range(10):
        client.insert(np.int32(i), {"e": 1.0})
    blocked_config = sw.create_config(pattern, "e")

    def fresh():
        _reset(client)
        return reverb.Client(address).structured_writer([config]), None

    def append_steps(writer):
        for i in range(3):
            writer.append({"a": np.int32(i), "b": np.float32(i)})
        return writer, None

    def stepped():
        writer, _ = append_steps(fresh()[0])
        # Nothing left pending: whether a flush that may not wait (timeout
        # <= 0) finds the items confirmed would otherwise depend on timing.
        writer.flush()
        return writer, None

    def blocked():
        writer, env = append_steps(reverb.Client(address).structured_writer([blocked_config]))
        # dm-reverb's writer waits for its pending items when it is deleted,
        # forever here: these are never deleted (run_scenarios ends with
        # os._exit), and stopping the server with them alive does not wait.
        _NEVER_DELETED.append(writer)
        return writer, env

    def partial():
        writer, _ = fresh()
        writer.append({"a": np.int32(1)}, partial_step=True)
        return writer, None

    writer_states = ("fresh", "stepped", "partial")
    calls = [
        Call(
            "append",
            {"data": {"a": np.int32(5), "b": np.float32(1)}, "partial_step": False},
            invalid={
                "data": [
                    ("other_dtype", {"a": np.float64(1), "b": np.float32(1)}),
                    ("missing_column", {"b": np.float32(1)}),
                ]
            },
            states=writer_states,
        ),
        Call("flush", {"block_until_num_items": 0, "timeout_ms": 1000}, states=writer_states),
        Call("end_episode", {"clear_buffers": True, "timeout_ms": 1000}, states=writer_states),
        # Items pending for good: every timeout runs out, at once for <= 0.
        Call("flush", {"block_until_num_items": 0, "timeout_ms": 100}, states=("blocked",)),
        Call("end_episode", {"clear_buffers": True, "timeout_ms": 100}, states=("blocked",)),
        Call("step_is_open", states=writer_states),
    ]
    out = walk.walk(
        _api("reverb.structured_writer", "StructuredWriter"),
        {"fresh": fresh, "stepped": stepped, "partial": partial, "blocked": blocked},
        calls,
    )
    out["table_size_after"] = client.server_info()["q"].current_size
    return out


def scenario_tf_client(ctx):
    walk.begin(ctx, "tf_client")
    import tensorflow as tf

    reverb = ctx.reverb
    _, client, address = _live_server(ctx)

    class InFunction:
        """A TFClient whose methods run inside a tf.function."""

        def __init__(self, tf_client):
            self.server_address = tf_client.server_address
            self._client = tf_client

        def __getattr__(self, method):
            def call(**kwargs):
                @tf.function
                def run():
                    result = getattr(self._client, method)(**kwargs)
                    # insert and update_priorities give an Operation in a graph.
                    return None if isinstance(result, tf.Operation) else result

                return run()

            return call

    def state(fill, mode):
        def make():
            _reset(client)
            if fill:
                _fill(client)
            tf_client = reverb.TFClient(address)
            return (tf_client if mode == "eager" else InFunction(tf_client)), None

        return make

    states = {
        f"{fill}_{mode}": state(fill == "full", mode)
        for fill in ("empty", "full")
        for mode in ("eager", "tf_function")
    }
    calls = [
        Call("server_address", post=lambda a: a.startswith("localhost:")),
        Call(
            "insert",
            {
                "data": from_env(lambda _: [tf.constant([1, 2], tf.int32)]),
                "tables": from_env(lambda _: tf.constant(["q"])),
                "priorities": from_env(lambda _: tf.constant([1.0], tf.float64)),
                "name": None,
            },
            invalid={
                "data": False,
                "tables": [("missing", from_env(lambda _: tf.constant(["missing"])))],
                "priorities": [
                    ("float32", from_env(lambda _: tf.constant([1.0], tf.float32))),
                    ("two", from_env(lambda _: tf.constant([1.0, 2.0], tf.float64))),
                ],
            },
        ),
        Call(
            "sample",
            {"table": "u", "data_dtypes": [tf.int32], "name": None},
            post=_without_keys,
            states=("full_eager", "full_tf_function"),
            invalid={"table": [("missing", "missing")]},
        ),
        Call(
            "update_priorities",
            {
                "table": "p",
                "keys": from_env(lambda _: tf.constant([12345], tf.uint64)),
                "priorities": from_env(lambda _: tf.constant([1.0], tf.float64)),
                "name": None,
            },
            invalid={
                "table": [("missing", "missing")],
                "priorities": [
                    ("float32", from_env(lambda _: tf.constant([1.0], tf.float32))),
                    ("two", from_env(lambda _: tf.constant([1.0, 2.0], tf.float64))),
                ],
            },
        ),
    ]
    placeholders = {
        "data_dtypes": {"<mismatch>": [tf.float32]},
        "keys": {
            "<unknown keys>": from_env(lambda _: tf.constant([1, 2], tf.uint64)),
            "<float keys>": from_env(lambda _: tf.constant([1.0], tf.float64)),
            "<scalar key>": from_env(lambda _: tf.constant(1, tf.uint64)),
        },
        "priorities": {
            k: from_env(lambda _, v=v: tf.constant([v], tf.float64))
            for k, v in [("<-1>", -1.0), ("<nan>", NAN)]
        },
    }
    placeholders["priorities"]["<str>"] = from_env(lambda _: tf.constant(["x"]))
    placeholders["tables"] = {"<one table>": from_env(lambda _: tf.constant("q"))}
    out = walk.walk(_api("reverb.tf_client", "TFClient"), states, calls, placeholders)
    constructor = [
        Call(
            "__init__",
            {"server_address": address, "shared_name": None, "name": "reverb"},
            call=lambda cls, kwargs: _type_name(cls(**kwargs)),
        )
    ]
    out.update(
        walk.walk(
            _api("reverb.tf_client", "TFClient"),
            {"class": lambda: (reverb.TFClient, None)},
            constructor,
        )
    )
    return out


def _dataset_walk(ctx, class_name, module):
    import tensorflow as tf

    reverb = ctx.reverb
    signature = tf.TensorSpec([], tf.int32)
    tables = [reverb.Table.queue("q", 10, signature=signature), reverb.Table.queue("n", 10)]
    _, client = ctx.server(tables)
    address = client.server_address
    for i in range(3):
        client.insert(np.int32(i), {"q": 1.0})
    cls = getattr(reverb, class_name)

    # Three times the usual bound: dm-reverb's first read of a dataset that
    # fails (a missing or empty-named table) took over BLOCK_S, and once on a
    # cold CI machine over 2 * BLOCK_S, and was recorded as blocking. A read
    # of the live server never blocks in this walk (its tables have items or
    # fail at once), so one that does was slowed by load and is read once
    # more with a fresh iterator; an implementation that really blocks there
    # blocks again and is recorded so. Reads of an unreachable address block
    # legitimately and are not retried. The calls that read get both reads'
    # bounds and BLOCK_S more, for their own work.
    read_s = 3 * walk.BLOCK_S
    call_s = 2 * read_s + walk.BLOCK_S

    def view(dataset, live=True):
        elements = walk.bounded(lambda: [e.data for e in dataset.take(1)], read_s)
        if live and isinstance(elements, str) and elements == walk.BLOCKS:
            elements = walk.bounded(lambda: [e.data for e in dataset.take(1)], read_s)
        return {"spec": dataset.element_spec.data, "first": elements}

    calls = [
        Call(
            "__init__",
            {
                "server_address": address,
                "table": "q",
                "dtypes": tf.int32,
                "shapes": tf.TensorShape([]),
                "max_in_flight_samples_per_worker": 2,
                "num_workers_per_iterator": -1,
                "max_samples_per_stream": -1,
                "rate_limiter_timeout_ms": 500,
                "max_samples": -1,
            },
            call=lambda c, kwargs: view(c(**kwargs), kwargs["server_address"] == address),
            block_s=call_s,
            invalid={"table": [("missing", "missing")]},
        ),
        Call(
            "from_table_signature",
            {
                "server_address": address,
                "table": "q",
                "max_in_flight_samples_per_worker": 2,
                "num_workers_per_iterator": -1,
                "max_samples_per_stream": -1,
                # A timeout well inside the walk's bound: an unreachable server
                # then fails the same way under both, within it.
                "rate_limiter_timeout_ms": 500,
                "get_signature_timeout_secs": 1,
                "max_samples": -1,
            },
            post=view,
            block_s=call_s,
            invalid={"table": [("no_signature", "n")]},
        ),
    ]
    placeholders = {
        "dtypes": {"<mismatch>": tf.float32},
        "shapes": {"<mismatch>": tf.TensorShape([3])},
    }
    return walk.walk(_api(module, class_name), {"class": lambda: (cls, None)}, calls, placeholders)


def scenario_trajectory_dataset(ctx):
    walk.begin(ctx, "trajectory_dataset")
    return _dataset_walk(ctx, "TrajectoryDataset", "reverb.trajectory_dataset")


def scenario_timestep_dataset(ctx):
    walk.begin(ctx, "timestep_dataset")
    return _dataset_walk(ctx, "TimestepDataset", "reverb.timestep_dataset")


def scenario_sample_info(ctx):
    walk.begin(ctx, "sample_info")
    reverb = ctx.reverb
    calls = [Call("tf_dtypes"), Call("tf_shapes"), Call("zeros")]
    api = _api("reverb.replay_sample", "SampleInfo")
    return walk.walk(
        api,
        {"class": lambda: (reverb.replay_sample.SampleInfo, None)},
        [Call(c.member, call=lambda cls, _, m=c.member: getattr(cls, m)()) for c in calls],
    )


def scenario_checkpointers(ctx):
    walk.begin(ctx, "checkpointers")
    reverb = ctx.reverb
    root = tempfile.mkdtemp()
    lib = reverb.checkpointers
    calls = [
        Call(
            "__init__",
            {"path": os.path.join(root, "ckpt"), "group": "", "fallback_checkpoint_path": None},
            call=lambda cls, kwargs: _type_name(cls(**kwargs)),
            invalid={"group": [("int", 7)], "fallback_checkpoint_path": [("int", 7)]},
        )
    ]
    out = walk.walk(
        _api("reverb.platform.checkpointers_lib", "DefaultCheckpointer"),
        {"class": lambda: (lib.DefaultCheckpointer, None)},
        calls,
    )
    internal = [Call("internal_checkpointer", post=lambda c: c is not None)]
    out.update(
        walk.walk(
            _api("reverb.platform.checkpointers_lib", "DefaultCheckpointer"),
            {"default": lambda: (lib.DefaultCheckpointer(os.path.join(root, "c2")), None)},
            internal,
        )
    )
    out.update(
        walk.walk(
            _api("reverb.platform.checkpointers_lib", "TempDirCheckpointer"),
            {"temp_dir": lambda: (lib.TempDirCheckpointer(), None)},
            [Call("__init__", call=lambda c, _: _type_name(c))] + internal,
        )
    )
    return out


# Classes and functions of the API list no walk covers, by name, and why.
# (test_differential.test_api_walk_covers_the_api_list checks that WALKED
# and this are the whole list.)
NOT_WALKED = {
    "ReplaySample": "a namedtuple with no behaviour of its own",
    "ReverbError": "no members; its hierarchy is compared in module_surface.errors_module",
    "DeadlineExceededError": "as ReverbError",
    "PatternDataset": "compared in structured.pattern_dataset* with datasets of steps",
    "pattern_dataset_with_info": "as PatternDataset",
    "CheckpointerBase": "abstract; its subclasses are walked",
    "TableExtensionBase": "reverb_tf has no table extensions (docs/compatibility.md)",
    "Condition": "compared in structured.conditions_every_kind",
    "ConditionProto": "a protobuf message class: the same descriptor (module_surface)",
    "Config": "a protobuf message class: the same descriptor (module_surface)",
    "ReferenceStep": "the type create_reference_step returns, walked there",
    "get_server_config_proto": "reads the server binary's flags; tested with the binary",
    "main": "the server binary's entry point, tested as a process",
    "app_run_main": "as main",
    "FLAGS": "absl flags of the server binary",
    "default_checkpointer": "as DefaultCheckpointer, without arguments",
    "create_default_checkpointer": "as DefaultCheckpointer, without arguments",
    "ensure_tf_version": "an import-time guard of dm-reverb's own packaging",
    "reraise_wrapped_error": "an import-time helper of dm-reverb's own packaging",
    # reverb.pybind: the native classes under the Python API, reached by
    # programs only through the walked classes above.
    "AutoTunedChunkerOptions": "pybind; reached through TrajectoryWriter",
    "ConstantChunkerOptions": "pybind; reached through TrajectoryWriter",
    "ChunkerOptions": "pybind; reached through TrajectoryWriter",
    "Checkpointer": "pybind; reached through the checkpointers",
    "ItemSelector": "pybind; reached through the selectors",
    "FifoSelector": "pybind; reached through the selectors",
    "LifoSelector": "pybind; reached through the selectors",
    "HeapSelector": "pybind; reached through the selectors",
    "PrioritizedSelector": "pybind; reached through the selectors",
    "UniformSelector": "pybind; reached through the selectors",
    "Heap": "a type alias of reverb_types",
    "Sampler": "pybind; reached through Client.sample",
    "TableExtension": "pybind; reverb_tf has no table extensions",
    "TableInfo": "pybind; reached through Table.info and Client.server_info",
    "WeakCellRef": "pybind; reached through TrajectoryWriter.history and TrajectoryColumn",
}


def _functions(ctx, scenario, module, functions):
    """Walks module-level functions: `functions` is name -> (function,
    valid arguments, extra Call options)."""
    out = {}
    for name, (fn, args, options) in functions.items():
        calls = [
            Call(
                "__call__",
                args,
                call=lambda f, kwargs: f(**kwargs),
                invalid=options.get("invalid", {}),
                post=options.get("post"),
            )
        ]
        for key, value in walk.walk(
            _api(module, name), {name: lambda fn=fn: (fn, None)}, calls, options.get("placeholders")
        ).items():
            out[key] = value
    return out


def scenario_structured_functions(ctx):
    walk.begin(ctx, "structured_functions")
    import tensorflow as tf

    reverb = ctx.reverb
    sw = reverb.structured_writer
    step = {"a": None, "b": None}
    spec = {"a": tf.TensorSpec([], tf.int32), "b": tf.TensorSpec([2], tf.float32)}
    transform = lambda s: {"a": s["a"][-2:], "b": s["b"][-1]}
    ref = sw.create_reference_step(step)
    pattern = transform(ref)
    config = sw.create_config(pattern, "q")

    def raising(_):
        raise KeyError("no such column")

    transforms = {
        "<raises>": raising,
        "<returns none>": lambda s: None,
        "<out of range>": lambda s: s["a"][5],
    }
    functions = {
        "create_reference_step": (sw.create_reference_step, {"step_structure": step}, {}),
        "pattern_from_transform": (
            sw.pattern_from_transform,
            {"step_structure": step, "transform": transform},
            {"placeholders": {"transform": transforms}},
        ),
        "create_config": (
            sw.create_config,
            {
                "pattern": pattern,
                "table": "q",
                "conditions": [sw.Condition.step_index() >= 1],
                "priority": None,
            },
            {"invalid": {"priority": [("str", "high"), ("float", 1.0)]}},
        ),
        "infer_signature": (
            sw.infer_signature,
            {"configs": [config], "step_spec": spec},
            {
                "placeholders": {
                    "step_spec": {"<other structure>": {"x": tf.TensorSpec([], tf.int32)}}
                }
            },
        ),
        "unpack_pattern": (
            sw.unpack_pattern,
            {"config": config},
            {"placeholders": {"config": {"<empty config>": sw.Config()}}},
        ),
        "constant_priority_fn": (sw.constant_priority_fn, {"value": 2.5}, {}),
        "td_error": (
            sw.td_error,
            {
                "max_priority_weight": 0.9,
                "step_structure": step,
                "get_field_from_step_fn": lambda s: s["b"],
            },
            {
                "placeholders": {
                    "get_field_from_step_fn": {"<missing field>": lambda s: s["missing"]}
                }
            },
        ),
    }
    return _functions(ctx, "structured_functions", "reverb.structured_writer", functions)


def scenario_from_proto(ctx):
    walk.begin(ctx, "from_proto")
    reverb = ctx.reverb
    table = reverb.Table(
        "t",
        reverb.selectors.Prioritized(0.8),
        reverb.selectors.Fifo(),
        10,
        reverb.rate_limiters.SampleToInsertRatio(2.0, 3, 6.0),
    )
    info = table.info
    lib = importlib.import_module(reverb.__name__ + ".server_executable.server_from_proto")
    schema = type(info.sampler_options)
    # The binary's config messages are the checkpoint's.
    checkpoint_pb2 = importlib.import_module(reverb.__name__ + ".cc.checkpointing.checkpoint_pb2")
    table_proto = checkpoint_pb2.PriorityTableCheckpoint()
    table_proto.table_name = "t"
    table_proto.max_size = 10
    table_proto.sampler.uniform = True
    table_proto.remover.fifo = True
    table_proto.rate_limiter.samples_per_insert = 1.0
    table_proto.rate_limiter.min_size_to_sample = 1
    table_proto.rate_limiter.min_diff = -1e9
    table_proto.rate_limiter.max_diff = 1e9
    limiter_proto = table_proto.rate_limiter

    def view(value):
        if isinstance(value, list):
            return [_info(t.info) for t in value]
        if hasattr(value, "info"):
            return _info(value.info)
        return type(value).__name__

    functions = {
        "selector_from_proto": (
            lib.selector_from_proto,
            {"s": info.sampler_options},
            {"placeholders": {"s": {"<empty selector>": schema()}}, "post": view},
        ),
        "rate_limiter_from_proto": (
            lib.rate_limiter_from_proto,
            {"proto": limiter_proto},
            {
                "placeholders": {"proto": {"<empty limiter>": type(limiter_proto)()}},
                "post": lambda limiter: _limiter_view(limiter, reverb),
            },
        ),
        "tables_from_proto": (lib.tables_from_proto, {"configs": [table_proto]}, {"post": view}),
    }
    return _functions(ctx, "from_proto", "reverb.server_executable.server_from_proto", functions)


def scenario_client_of_a_stopped_server(ctx):
    """Client's members against a server that has stopped: valid calls only
    (dm-reverb waits for the server to come back, so each call blocks).

    The file's last scenario on purpose: under dm-reverb the blocked calls
    stay in their threads, and gRPC may abort the process later, which then
    costs the next scenarios a fresh process.
    """
    walk.begin(ctx, "client_of_a_stopped_server")
    reverb = ctx.reverb
    stopped = _stopped_address(ctx)

    def server_stopped():
        return reverb.Client(stopped), _Env(key=12345, address=stopped, sample_table="q")

    calls, placeholders = _client_calls(reverb)
    for call in calls:
        call.invalid_states = ()
    return walk.walk(
        _api("reverb.client", "Client"), {"server_stopped": server_stopped}, calls, placeholders
    )
