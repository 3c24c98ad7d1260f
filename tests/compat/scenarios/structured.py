# SPDX-License-Identifier: Apache-2.0
"""StructuredWriter and PatternDataset: what a program sees.

Items are read from queue tables (oldest first, each once) without table
signatures, so every observation is the items' flat columns in order, with
dtypes and shapes, per append/end_episode call.
"""

import importlib.util
import os

import numpy as np

_STEP = {"a": None, "f": None}


def _queue(reverb, name="t", size=1000):
    return reverb.Table.queue(name, size)


def _drain(client, table):
    size = client.server_info()[table].current_size
    if not size:
        return []
    return [
        (s.info.priority, s.data)
        for s in client.sample(table, num_samples=size, emit_timesteps=False)
    ]


def _step(a, f=0):
    return {"a": None if a is None else np.int32(a), "f": None if f is None else np.int32(f)}


def _play(ctx, client, configs, calls, tables=("t",)):
    """Runs `calls` on a new writer; after each, the items it inserted."""
    writer = ctx.call(client.structured_writer, configs)
    if isinstance(writer, Exception):
        return writer
    seen = []
    for call in calls:
        if call == "end":
            result = ctx.call(writer.end_episode)
        elif call == "end_keep":
            result = ctx.call(writer.end_episode, clear_buffers=False)
        elif isinstance(call, tuple):  # ("partial", step)
            result = ctx.call(writer.append, call[1], partial_step=True)
        else:
            result = ctx.call(writer.append, call)
        ctx.call(writer.flush)
        seen.append(
            {
                "result": result,
                "step_is_open": writer.step_is_open,
                "items": [(t, _drain(client, t)) for t in tables],
            }
        )
    return seen


def _episodes(lengths=(7, 4), values=None):
    calls = []
    for e, length in enumerate(lengths):
        calls += [_step(10 * e + i, 0 if values is None else values[i]) for i in range(length)]
        calls.append("end")
    return calls


def scenario_conditions_every_kind(ctx):
    reverb = ctx.reverb
    sw = reverb.structured_writer
    C = sw.Condition
    ref = sw.create_reference_step(_STEP)
    data = C.data(_STEP)
    conditions = {
        "step_index_eq": C.step_index() == 2,
        "step_index_ge": C.step_index() >= 5,
        "step_index_gt": C.step_index() > 5,
        "step_index_lt": C.step_index() < 2,
        "step_index_le": C.step_index() <= 1,
        "step_index_ne": C.step_index() != 1,
        "step_index_mod": C.step_index() % 3 == 1,
        "step_index_mod_ne": C.step_index() % 3 != 1,
        "ssa_ge": C.steps_since_applied() >= 3,
        "ssa_eq": C.steps_since_applied() == 2,
        "ssa_mod": C.steps_since_applied() % 2 == 0,
        "ssa_lt": C.steps_since_applied() < 2,
        "ssa_eq0": C.steps_since_applied() == 0,
        "data_eq": data["f"] == 1,
        "data_ge": data["f"] >= 2,
        "data_mod": data["f"] % 2 == 0,
        "data_ne": data["f"] != 1,
        "data_negative_mod": data["f"] % 3 == 2,
        "buffer_length_ge": reverb.structured_writer.ConditionProto(buffer_length=True, ge=1),
    }
    _, client = ctx.server([_queue(reverb)])
    values = [0, 3, 2, 1, -1, -4, 2]
    out = {}
    for name, condition in conditions.items():
        config = sw.create_config(ref["a"][-1], "t", conditions=[condition])
        out[name] = {
            "condition": condition,
            "items": _play(ctx, client, [config], _episodes(values=values)),
        }
    return out


def scenario_patterns_and_missing_columns(ctx):
    reverb = ctx.reverb
    sw = reverb.structured_writer
    ref = sw.create_reference_step(_STEP)
    _, client = ctx.server([_queue(reverb)])
    steps = [
        _step(0, 0),
        _step(1, None),
        _step(2, 2),
        _step(3, None),
        _step(4, 4),
        _step(None, 5),
        _step(6, 6),
        _step(7, 7),
    ]
    out = {}
    for name, pattern in {
        "slice_and_last": [ref["a"][-2:], ref["f"][-1]],
        "slice_stop": ref["a"][-3:-1],
        "strided": ref["a"][-5::2],
        "strided_stop": ref["a"][-4:-1:2],
        "second_last": ref["a"][-2],
        "missing_column_only": ref["f"][-2:],
        "unknown_column": reverb.structured_writer.patterns_pb2.PatternNode(
            flat_source_index=5, stop=-1
        ),
    }.items():
        out[name] = _play(ctx, client, [sw.create_config(pattern, "t")], steps)
    return out


def scenario_partial_steps(ctx):
    reverb = ctx.reverb
    sw = reverb.structured_writer
    ref = sw.create_reference_step(_STEP)
    _, client = ctx.server([_queue(reverb)])
    configs = [
        sw.create_config([ref["a"][-1], ref["f"][-1]], "t"),
        sw.create_config(ref["a"][-2:], "t"),
        sw.create_config(ref["a"][-1], "t", conditions=[sw.Condition.data(_STEP)["f"] == 1]),
    ]
    calls = [
        ("partial", _step(0, None)),
        ("partial", _step(None, 1)),
        _step(None, None),
        ("partial", _step(1, None)),
        _step(1, None),
        _step(None, 0),
        ("partial", _step(2, None)),
        "end",
        _step(3, 1),
    ]
    return _play(ctx, client, configs, calls)


def scenario_end_of_episode(ctx):
    reverb = ctx.reverb
    sw = reverb.structured_writer
    C = sw.Condition
    ref = sw.create_reference_step(_STEP)
    _, client = ctx.server([_queue(reverb, "t"), _queue(reverb, "u")])
    configs = [
        sw.create_config(ref["a"][-2:], "t", conditions=[C.is_end_episode()]),
        sw.create_config(ref["a"][-1], "u"),
        sw.create_config(ref["a"][-1], "t", conditions=[C.is_end_episode(), C.step_index() == 2]),
        sw.create_config(
            ref["a"][-1], "u", conditions=[C.is_end_episode(), C.steps_since_applied() >= 2]
        ),
    ]
    calls = [_step(i) for i in range(3)] + [
        "end",
        _step(10),
        "end",
        "end",
        _step(20),
        _step(21),
        "end_keep",
        "end_keep",
        _step(30),
        "end",
        _step(40),
        ("partial", _step(41, None)),
        "end",
        _step(50),
        ("partial", _step(None, 1)),
        "end",
    ]
    return _play(ctx, client, configs, calls, tables=("t", "u"))


def scenario_n_step_and_sequences(ctx):
    reverb = ctx.reverb
    sw = reverb.structured_writer
    C = sw.Condition
    step = {"obs": None, "action": None, "reward": None}
    ref = sw.create_reference_step(step)
    _, client = ctx.server([_queue(reverb, "nstep"), _queue(reverb, "seq")])
    configs = [
        sw.create_config(
            {
                "o": ref["obs"][-3],
                "a": ref["action"][-3],
                "r": ref["reward"][-3:-1],
                "next": ref["obs"][-1],
            },
            "nstep",
            conditions=[C.step_index() >= 2],
        ),
        sw.create_config(
            {"o": ref["obs"][-4:], "r": ref["reward"][-4:]},
            "seq",
            conditions=[C.step_index() >= 3, C.steps_since_applied() >= 2],
        ),
    ]
    calls = []
    for e, length in enumerate((6, 3, 5)):
        calls += [
            {
                "obs": np.full(2, 10 * e + t, np.float32),
                "action": np.int64(t),
                "reward": np.float32(t * 0.5),
            }
            for t in range(length)
        ]
        calls.append("end")
    return _play(ctx, client, configs, calls, tables=("nstep", "seq"))


def scenario_priorities(ctx):
    reverb = ctx.reverb
    sw = reverb.structured_writer
    step = {"a": None, "td": None}
    ref = sw.create_reference_step(step)
    _, client = ctx.server([_queue(reverb)])
    td = sw.td_error(0.9, step, lambda s: s["td"])
    configs = {
        "constant": [sw.create_config(ref["a"][-1], "t", priority=sw.constant_priority_fn(2.5))],
        "td_slice": [sw.create_config(ref["td"][-3:], "t", priority=td)],
        "td_last_node_wins": [sw.create_config([ref["td"][-3:], ref["td"][-1]], "t", priority=td)],
        "td_first_node": [sw.create_config([ref["td"][-1], ref["td"][-3:]], "t", priority=td)],
        "td_unused": [sw.create_config(ref["a"][-1], "t", priority=td)],
        "td_int": [
            sw.create_config(ref["a"][-2:], "t", priority=sw.td_error(0.25, step, lambda s: s["a"]))
        ],
    }
    calls = [{"a": np.int32(i), "td": np.float32(v)} for i, v in enumerate([-1, 2, -3, 0.5])]
    out = {name: _play(ctx, client, c, calls) for name, c in configs.items()}
    out["td_vector"] = _play(
        ctx, client, configs["td_slice"], [{"a": np.int32(0), "td": np.zeros(2, np.float32)}]
    )
    no_priority = reverb.structured_writer.Config(table="t")
    no_priority.flat.add(stop=-1)
    out["no_priority"] = _play(ctx, client, [no_priority], [_step(0)])
    out["protos"] = [td, sw.constant_priority_fn(2.5)]
    return out


def scenario_invalid_configs(ctx):
    reverb = ctx.reverb
    sw = reverb.structured_writer
    pb = sw.patterns_pb2
    ref = sw.create_reference_step(_STEP)
    _, client = ctx.server([_queue(reverb)])

    def with_node(**node):
        return sw.create_config([ref["a"][-1], pb.PatternNode(**node)], "t")

    def with_condition(condition):
        return sw.create_config(ref["a"][-1], "t", conditions=[condition])

    cases = {
        "empty": [],
        "no_flat": [pb.StructuredWriterConfig(table="t")],
        "stop_0": [with_node(stop=0)],
        "stop_1": [with_node(stop=1)],
        "nothing": [with_node()],
        "start_0": [with_node(start=0)],
        "stop_eq_start": [with_node(start=-2, stop=-2)],
        "step_0": [with_node(start=-2, step=0)],
        "step_no_start": [with_node(stop=-1, step=2)],
        "negative_column": [with_node(flat_source_index=-1, stop=-1)],
        "no_left": [with_condition(pb.Condition(eq=1))],
        "no_cmp": [with_condition(pb.Condition(step_index=True))],
        "mod_0": [with_condition(pb.Condition(step_index=True, mod_eq=dict(mod=0)))],
        "mod_eq_negative": [
            with_condition(pb.Condition(step_index=True, mod_eq=dict(mod=2, eq=-1)))
        ],
        "end_ge": [with_condition(pb.Condition(is_end_episode=True, ge=1))],
        "end_inverse": [with_condition(pb.Condition(is_end_episode=True, eq=1, inverse=True))],
        "data_negative": [with_condition(pb.Condition(flat_source_index=-1, eq=1))],
        "second_of_two": [sw.create_config(ref["a"][-1], "t"), with_node(start=1)],
        "accepted_stop_0": [sw.create_config(ref["a"][-2:0], "t")],
    }
    out = {name: ctx.call(client.structured_writer, configs) for name, configs in cases.items()}
    no_table = sw.create_config(ref["a"][-1], "t")
    no_table.table = ""
    out["no_table"] = ctx.call(client.structured_writer, [no_table])
    return {
        name: type(value).__name__ if not isinstance(value, Exception) else value
        for name, value in out.items()
    }


def scenario_append_errors_and_flush(ctx):
    reverb = ctx.reverb
    sw = reverb.structured_writer
    ref = sw.create_reference_step(_STEP)
    _, client = ctx.server([_queue(reverb, "t"), _queue(reverb, "blocked", 1)])
    writer = client.structured_writer([sw.create_config(ref["a"][-1], "t")])
    out = {
        "flush_fresh": ctx.call(writer.flush, timeout_ms=0),
        # flush(timeout_ms=0) after an item is not compared: dm-reverb sends
        # items only when flushed, so it always times out; reverb_tf sends
        # them within about 1 ms, so it succeeds if the acknowledgement came
        # first (docs/structured_writer.md).
        "first": ctx.call(writer.append, _step(0, 0)),
        "longer": ctx.call(writer.append, {"a": 1, "f": 2, "g": 3}),
        "list_same_length": ctx.call(writer.append, [np.int32(1), np.int32(2)]),
        "dtype_changed": ctx.call(writer.append, {"a": np.float32(1), "f": np.int32(1)}),
        "shape_changed": ctx.call(writer.append, {"a": np.zeros(2, np.int32), "f": np.int32(1)}),
        "partial": ctx.call(writer.append, _step(5, None), partial_step=True),
        "open": writer.step_is_open,
        "twice_in_step": ctx.call(writer.append, _step(6, None)),
        "still_open": writer.step_is_open,
        "close": ctx.call(writer.append, _step(None, 1)),
        "closed": writer.step_is_open,
        "flush_negative": ctx.call(writer.flush, -1),
    }
    writer.flush()
    out["items"] = _drain(client, "t")
    blocked = client.structured_writer([sw.create_config(ref["a"][-1], "blocked")])
    blocked.append(_step(0))
    blocked.append(_step(1))
    out["flush_timeout"] = ctx.call(blocked.flush, timeout_ms=300)
    out["end_episode_timeout"] = ctx.call(blocked.end_episode, timeout_ms=300)
    out["flush_allowing_one"] = ctx.call(blocked.flush, block_until_num_items=1, timeout_ms=5000)
    out["blocked_items"] = _drain(client, "blocked")
    return out


def scenario_api_helpers(ctx):
    reverb = ctx.reverb
    sw = reverb.structured
    tf = __import__("tensorflow")
    ref = sw.create_reference_step({"x": None, "y": [None, None]})
    pattern = sw.pattern_from_transform(
        {"x": None, "y": [None, None]},
        lambda s: {"last_x": s["x"][-1], "ys": [s["y"][0][-3:], s["y"][1][-4::2]]},
    )
    config = sw.create_config(pattern, "t", conditions=[sw.Condition.step_index() >= 1])
    spec = {
        "x": tf.TensorSpec([2], tf.float32),
        "y": [tf.TensorSpec([], tf.int64), tf.TensorSpec([3], tf.int32)],
    }
    other = sw.create_config(
        {"last_x": ref["x"][-1], "ys": [ref["y"][0][-2:], ref["y"][1][-2:]]}, "t"
    )
    return {
        "nodes": [ref["x"][-1], ref["y"][0][-3:], ref["y"][1][-4:-1:2], ref["x"][-2]],
        "bad_key": ctx.call(lambda: ref["x"]["k"]),
        "flat": list(config.flat),
        "table": config.table,
        "priority": config.priority,
        "conditions": list(config.conditions),
        "unpacked_flat": __import__("tree").flatten(sw.unpack_pattern(config)),
        "unpacked_bare": list(sw.unpack_pattern(sw.Config(flat=list(config.flat), table="t"))),
        "signature_flat": __import__("tree").flatten(sw.infer_signature([config], spec)),
        "signature_merged_flat": __import__("tree").flatten(
            sw.infer_signature([config, other], spec)
        ),
        "signature_errors": [
            ctx.call(sw.infer_signature, [], spec),
            ctx.call(sw.infer_signature, [config, sw.create_config([ref["x"][-1]], "t")], spec),
            ctx.call(sw.infer_signature, [config, sw.create_config(pattern, "u")], spec),
        ],
        "builders": [
            sw.Condition.step_index() > 2,
            sw.Condition.step_index() <= 2,
            sw.Condition.steps_since_applied() % 4 != 1,
            sw.Condition.is_end_episode(),
            sw.Condition.data({"x": None, "y": [None, None]})["y"][1] == 7,
        ],
        "td_error": sw.td_error(0.3, {"x": None, "y": [None, None]}, lambda s: s["y"][1]),
        "serialized_roundtrip": sw.Config.FromString(config.SerializeToString()) == config,
        # The same bytes: configs are interchangeable between the two.
        "serialized": config.SerializeToString(deterministic=True),
    }


def scenario_signature_and_trajectory_dataset(ctx):
    reverb = ctx.reverb
    sw = reverb.structured_writer
    tf = __import__("tensorflow")
    step_spec = {"obs": tf.TensorSpec([2], tf.float32), "action": tf.TensorSpec([], tf.int64)}
    ref = sw.create_reference_step(step_spec)
    config = sw.create_config({"obs": ref["obs"][-3:], "action": ref["action"][-2]}, "sig")
    signature = sw.infer_signature([config], step_spec)
    table = reverb.Table(
        "sig",
        reverb.selectors.Fifo(),
        reverb.selectors.Fifo(),
        100,
        reverb.rate_limiters.MinSize(1),
        max_times_sampled=1,
        signature=signature,
    )
    server, client = ctx.server([table])
    writer = client.structured_writer([config])
    for i in range(6):
        writer.append({"obs": np.full(2, i, np.float32), "action": np.int64(i)})
    writer.flush()
    dataset = reverb.TrajectoryDataset.from_table_signature(
        f"localhost:{server.port}", "sig", max_in_flight_samples_per_worker=4
    )
    samples = [(s.info.priority, s.data) for s in dataset.take(4)]
    return {"signature": sorted(signature.items()), "samples": samples}


def _steps_dataset(tf):
    return tf.data.Dataset.from_tensor_slices(
        {"a": np.arange(9, dtype=np.int32), "f": np.array([0, 0, 0, 1, 0, 0, 1, 0, 0], np.int32)}
    )


def _elements(dataset):
    # Through take(): iterating dm-reverb's PatternDataset itself sometimes
    # hangs in its iterator's creation (most runs with TF 2.14 here); behind
    # take() it never did.
    return [e for e in dataset.take(100)]


def scenario_pattern_dataset(ctx):
    reverb = ctx.reverb
    sw = reverb.structured_writer
    C = sw.Condition
    tf = __import__("tensorflow")
    ref = sw.create_reference_step(_STEP)

    def eoe(step):
        return tf.equal(step["f"], 1)

    cases = {
        "transition": [sw.create_config([ref["a"][-2:], ref["a"][-1]], "t")],
        "end_episode": [sw.create_config(ref["a"][-2:], "t", conditions=[C.is_end_episode()])],
        "step_index": [sw.create_config(ref["a"][-1], "t", conditions=[C.step_index() == 1])],
        "ssa": [sw.create_config(ref["a"][-1], "t", conditions=[C.steps_since_applied() >= 3])],
        "data": [sw.create_config(ref["a"][-1], "t", conditions=[C.data(_STEP)["f"] == 1])],
        "two_histories": [
            sw.create_config(ref["a"][-3:], "t"),
            sw.create_config(ref["a"][-1:], "t"),
        ],
        "interleaved": [
            sw.create_config(ref["a"][-1], "t", conditions=[C.step_index() % 2 == 0]),
            sw.create_config(ref["a"][-1], "t", conditions=[C.step_index() % 2 == 1]),
        ],
        "strided": [sw.create_config(ref["a"][-5:-1:2], "t")],
    }
    out = {}
    for name, configs in cases.items():
        for respect in (True, False):
            dataset = reverb.PatternDataset(_steps_dataset(tf), configs, respect, eoe)
            out[f"{name}_{respect}"] = {
                "spec": dataset.element_spec,
                "elements": ctx.call(_elements, dataset),
                "conditions_after": [list(c.conditions) for c in configs],
            }
    vectors = tf.data.Dataset.from_tensor_slices(
        {"a": np.arange(12, dtype=np.float32).reshape(6, 2), "f": np.zeros(6, np.int32)}
    )
    bad_length = reverb.PatternDataset(vectors, [sw.create_config(ref["a"][-3::2], "t")], True, eoe)
    out["declared_length_mismatch"] = {
        "spec": bad_length.element_spec,
        "elements": ctx.call(_elements, bad_length),
    }
    out["bad_is_end_of_episode"] = ctx.call(
        reverb.PatternDataset, _steps_dataset(tf), cases["transition"], True, lambda s: s["f"]
    )
    with_info = reverb.pattern_dataset.pattern_dataset_with_info(
        _steps_dataset(tf), [sw.create_config(ref["a"][-2:], "t")], True, eoe
    )
    out["with_info"] = [e for e in with_info.take(2)]
    return out


def scenario_pattern_dataset_dict_specs(ctx):
    reverb = ctx.reverb
    sw = reverb.structured_writer
    tf = __import__("tensorflow")
    ref = sw.create_reference_step(_STEP)
    config = sw.create_config({"x": ref["a"][-2:], "y": ref["a"][-1]}, "t")
    dataset = reverb.PatternDataset(
        _steps_dataset(tf), [config], True, lambda s: tf.equal(s["f"], 1)
    )
    return {
        "spec": dataset.element_spec,
        "elements": [e for e in dataset.take(3)],
        "unpacked": sw.unpack_pattern(config),
    }


def scenario_acme_style_adders_example(ctx):
    path = os.path.join(
        os.path.dirname(os.path.abspath(__file__)),
        "..",
        "..",
        "..",
        "examples",
        "structured_adders.py",
    )
    spec = importlib.util.spec_from_file_location("structured_adders_example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.run(ctx.reverb)


def scenario_infer_signature_from_numpy_values(ctx):
    """A step of numpy values stands for its specs, as tf.TensorSpecs do."""
    sw = ctx.reverb.structured_writer
    step = {"obs": np.zeros([3], np.float32), "act": np.int64(1), "done": np.array(True)}
    ref = sw.create_reference_step(step)
    config = sw.create_config(
        pattern={"obs": ref["obs"][-2:], "act": ref["act"][-1], "done": ref["done"][-1]}, table="t"
    )
    signature = ctx.call(sw.infer_signature, [config], step)
    return {
        # Key by key: the two order the answer's dict differently.
        "numpy_scalars": {key: repr(signature[key]) for key in sorted(signature)},
        "python_numbers": ctx.call(
            sw.infer_signature, [config], {"obs": [0.0], "act": 1, "done": True}
        ),
    }


def scenario_conditions_compared_with_booleans(ctx):
    """`data` conditions on a bool column compare with True and False."""
    reverb = ctx.reverb
    sw = reverb.structured_writer
    ref = sw.create_reference_step({"x": np.int32(0), "done": np.bool_(False)})
    done = sw.Condition.data(ref["done"])
    conditions = {
        "eq_true": lambda: done == True,  # noqa: E712
        "eq_false": lambda: done == False,  # noqa: E712
        "ne_true": lambda: done != True,  # noqa: E712
        "eq_numpy_true": lambda: done == np.bool_(True),
        "ge_true": lambda: done >= True,
    }
    result = {}
    for name, make in conditions.items():
        condition = make()
        _, client = ctx.server([_queue(reverb)])
        config = sw.create_config(pattern={"x": ref["x"][-1]}, table="t", conditions=[condition])
        writer = client.structured_writer([config])
        for i in range(4):
            writer.append({"x": np.int32(i), "done": np.bool_(i % 2 == 1)})
        writer.flush()
        result[name] = [items for _, items in _drain(client, "t")]
    return result
