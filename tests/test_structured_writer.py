# SPDX-License-Identifier: Apache-2.0
"""StructuredWriter: configs applied to appended steps, items sampled back.

Every test starts a real server. The expected items are those dm-reverb
0.14 inserts for the same calls (observed with it; the differential
scenarios in tests/compat/ compare the two directly).
"""

import threading

import numpy as np
import pytest
import tensorflow as tf
import tree

import reverb_tf as reverb
from reverb_tf import structured_writer as sw
from reverb_tf.cc import patterns_pb2

STEP = {"a": None, "f": None}
REF = sw.create_reference_step(STEP)
C = sw.Condition


def _queue(name="t"):
    return reverb.Table.queue(name, 1000)


@pytest.fixture
def server():
    with reverb.Server([_queue("t"), _queue("u")]) as srv:
        yield srv


@pytest.fixture
def client(server):
    return reverb.Client(f"localhost:{server.port}")


def _drain(client, table="t"):
    """Every item in the queue `table`, oldest first: (priority, data).

    The tables have no signature, so data is the item's flat columns as
    lists; an item with one column is that column alone.
    """
    size = client.server_info()[table].current_size
    if not size:
        return []
    out = []
    for sample in client.sample(table, num_samples=size, emit_timesteps=False):
        data = [np.asarray(x).tolist() for x in tree.flatten(sample.data)]
        out.append((sample.info.priority, data[0] if len(data) == 1 else data))
    return out


def _step(a, f=0):
    return {"a": None if a is None else np.int32(a), "f": None if f is None else np.int32(f)}


def _run(client, configs, steps, tables=("t",)):
    """Appends `steps` (dicts, or "end"/"end_keep"), flushing after each.

    Returns, per call, the items that call inserted: [(table, data)].
    """
    writer = client.structured_writer(configs)
    seen = []
    for step in steps:
        if step == "end":
            writer.end_episode()
        elif step == "end_keep":
            writer.end_episode(clear_buffers=False)
        else:
            writer.append(step)
        writer.flush()
        seen.append([(t, data) for t in tables for _, data in _drain(client, t)])
    return seen


def _data_only(seen):
    return [[data for _, data in items] for items in seen]


# --------------------------------------------------------------- patterns


def test_transition_pattern_with_squeezed_and_sliced_nodes(client):
    config = sw.create_config({"x": REF["a"][-3:], "y": REF["f"][-1]}, "t")
    steps = [_step(i, 10 * i) for i in range(5)] + ["end"] + [_step(i) for i in range(20, 24)]
    assert _data_only(_run(client, [config], steps)) == [
        [],
        [],
        [[[0, 1, 2], 20]],
        [[[1, 2, 3], 30]],
        [[[2, 3, 4], 40]],
        [],
        [],
        [],
        [[[20, 21, 22], 0]],
        [[[21, 22, 23], 0]],
    ]


@pytest.mark.parametrize(
    "node,expected",
    [
        (REF["a"][-3:-1], [[], [], [[0, 1]], [[1, 2]], [[2, 3]], [[3, 4]]]),
        (REF["a"][-5::2], [[], [], [], [], [[0, 2, 4]], [[1, 3, 5]]]),
        (REF["a"][-4:-1:2], [[], [], [], [[0, 2]], [[1, 3]], [[2, 4]]]),
        (REF["a"][-2], [[], [0], [1], [2], [3], [4]]),
    ],
)
def test_slices_follow_python_semantics_and_need_full_history(client, node, expected):
    config = sw.create_config(node, "t")
    assert _data_only(_run(client, [config], [_step(i) for i in range(6)])) == expected


def test_missing_columns_prevent_items_that_reference_them(client):
    config = sw.create_config({"x": REF["a"][-2:], "y": REF["f"][-1]}, "t")
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
    assert _data_only(_run(client, [config], steps)) == [
        [],
        [],
        [[[1, 2], 2]],
        [],
        [[[3, 4], 4]],
        [],
        [],
        [[[6, 7], 7]],
    ]


def test_partial_steps_insert_as_soon_as_columns_arrive(client):
    config = sw.create_config({"x": REF["a"][-1], "y": REF["f"][-1]}, "t")
    writer = client.structured_writer([config])
    writer.append(_step(0, None), partial_step=True)
    assert writer.step_is_open
    writer.flush()
    assert _drain(client) == []
    writer.append(_step(None, 5), partial_step=True)
    writer.flush()
    assert _drain(client) == [(1.0, [0, 5])]
    writer.append(_step(None, None))  # closes the step; applied once only
    assert not writer.step_is_open
    writer.append(_step(1, 6))
    writer.flush()
    assert _drain(client) == [(1.0, [1, 6])]


def test_column_given_twice_in_one_step_is_a_runtime_error(client):
    writer = client.structured_writer([sw.create_config(REF["a"][-1], "t")])
    writer.append(_step(0, None), partial_step=True)
    with pytest.raises(RuntimeError, match="column 0"):
        writer.append(_step(1, None))
    assert writer.step_is_open
    writer.append(_step(None, 1))
    writer.flush()
    assert _drain(client) == [(1.0, 0)]


def test_structure_length_dtype_and_shape_are_checked(client):
    writer = client.structured_writer([sw.create_config(REF["a"][-1], "t")])
    writer.append(_step(0, 0))
    with pytest.raises(ValueError, match="unexpected length, got 3 but wanted 2"):
        writer.append({"a": 1, "f": 2, "g": 3})
    writer.append([np.int32(1), np.int32(2)])  # only the flat length matters
    # dm-reverb's wording: the column, its path and TensorFlow's dtype names.
    with pytest.raises(
        ValueError,
        match=r"^Tensor of wrong dtype provided for column 0 \(path=\('a',\)\)\. Got double "
        r"but expected int32\.",
    ):
        writer.append({"a": np.float64(1), "f": np.int32(1)})
    with pytest.raises(ValueError, match=r"column 1 \(path=\('f',\)\)\. Got float but expected"):
        writer.append({"a": np.int32(1), "f": np.float32(1)})
    with pytest.raises(
        ValueError,
        match=r"^Tensor of incompatible shape provided for column 0 \(path=\('a',\)\)\. Got "
        r"\[2\] which is incompatible with \[\]\.",
    ):
        writer.append({"a": np.zeros(2, np.int32), "f": np.int32(1)})
    writer.flush()
    assert [data for _, data in _drain(client)] == [0, 1]


def test_a_wrong_value_in_an_open_step_is_reported_before_the_repeated_column(client):
    """dm-reverb checks a value's dtype and shape before whether its column
    was given already in the open step."""
    writer = client.structured_writer([sw.create_config(REF["a"][-1], "t")])
    writer.append(_step(0, 0))
    writer.append(_step(1, None), partial_step=True)
    with pytest.raises(ValueError, match=r"wrong dtype provided for column 0 .*Got string but"):
        writer.append({"a": "text", "f": None})
    with pytest.raises(ValueError, match=r"incompatible shape provided for column 0 .*Got \[3\]"):
        writer.append({"a": np.zeros(3, np.int32), "f": None})
    with pytest.raises(ValueError, match=r"column 1 \(path=\('f',\)\)\. Got half"):
        writer.append({"a": None, "f": np.float16(1)})
    with pytest.raises(RuntimeError, match="column 0"):
        writer.append(_step(2, None))  # right dtype and shape: given twice
    writer.append(_step(None, 1))
    writer.flush()
    assert _drain(client) == [(1.0, 0), (1.0, 1)]


# ------------------------------------------------------------- conditions


def _applied_steps(client, condition, values=None, episodes=(7, 4)):
    """The `a` of each item inserted by a[-1] under `condition`.

    Steps have a = 10 * episode + index and f = values[index].
    """
    config = sw.create_config(REF["a"][-1], "t", conditions=[condition])
    steps = []
    for e, length in enumerate(episodes):
        steps += [_step(10 * e + i, None if values is None else values[i]) for i in range(length)]
        steps.append("end")
    return [data for items in _run(client, [config], steps) for data in (d for _, d in items)]


@pytest.mark.parametrize(
    "condition,expected",
    [
        (C.step_index() == 2, [2, 12]),
        (C.step_index() >= 5, [5, 6]),
        (C.step_index() > 5, [6]),
        (C.step_index() < 2, [0, 1, 10, 11]),
        (C.step_index() <= 1, [0, 1, 10, 11]),
        (C.step_index() != 1, [0, 2, 3, 4, 5, 6, 10, 12, 13]),
        (C.step_index() % 3 == 1, [1, 4, 11]),
        (C.step_index() % 3 != 1, [0, 2, 3, 5, 6, 10, 12, 13]),
    ],
)
def test_step_index_conditions(client, condition, expected):
    assert _applied_steps(client, condition) == expected


@pytest.mark.parametrize(
    "condition,expected",
    [
        # The count is not reset by episode ends.
        (C.steps_since_applied() >= 3, [2, 5, 11]),
        (C.steps_since_applied() == 2, [1, 3, 5, 10, 12]),
        (C.steps_since_applied() % 2 == 0, [1, 3, 5, 10, 12]),
        (C.steps_since_applied() < 2, [0, 1, 2, 3, 4, 5, 6, 10, 11, 12, 13]),
        (C.steps_since_applied() == 0, []),
    ],
)
def test_steps_since_applied_conditions(client, condition, expected):
    assert _applied_steps(client, condition) == expected


@pytest.mark.parametrize(
    "condition,expected",
    [
        (C.data(STEP)["f"] == 1, [3, 13]),
        (C.data(STEP)["f"] >= 2, [1, 2, 5, 6, 11, 12]),
        (C.data(STEP)["f"] % 2 == 0, [0, 2, 4, 6, 10, 12]),
        (C.data(STEP)["f"] != 1, [0, 1, 2, 4, 5, 6, 10, 11, 12]),
    ],
)
def test_data_conditions(client, condition, expected):
    values = [(i * 3) % 4 for i in range(7)]  # 0 3 2 1 0 3 2
    assert _applied_steps(client, condition, values) == expected


def test_data_conditions_fail_without_an_integer_value(client):
    config = sw.create_config(REF["a"][-1], "t", conditions=[C.data(STEP)["f"] != 1])
    steps = [{"a": np.int32(0), "f": np.float32(0)}, _step(1, None)]
    assert _data_only(_run(client, [config], steps)) == [[], []]
    config = sw.create_config(REF["a"][-1], "t", conditions=[C.data(STEP)["f"] == 1])
    steps = [{"a": np.int32(0), "f": np.array([1], np.int32)}]
    assert _data_only(_run(client, [config], steps)) == [[0]]
    steps = [{"a": np.int32(1), "f": True}, {"a": np.int32(2), "f": False}]
    assert _data_only(_run(client, [config], steps)) == [[1], []]


def test_data_conditions_use_cpp_remainders(client):
    config = sw.create_config(REF["a"][-1], "t", conditions=[C.data(STEP)["f"] % 3 == 2])
    steps = [_step(i, f) for i, f in enumerate([-1, -4, 2, 5, -2])]
    assert [d for items in _data_only(_run(client, [config], steps)) for d in items] == [2, 3]


def test_end_of_episode_conditions(client):
    end = sw.create_config(REF["a"][-2:], "t", conditions=[C.is_end_episode()])
    every = sw.create_config(REF["a"][-1], "u")
    steps = (
        [_step(i) for i in range(3)]
        + ["end", _step(10), "end", "end"]
        + [_step(20), _step(21), "end_keep", _step(30), "end"]
    )
    seen = _run(client, [end, every], steps, tables=("t", "u"))
    assert seen == [
        [("u", 0)],
        [("u", 1)],
        [("u", 2)],
        [("t", [1, 2])],
        [("u", 10)],
        [],
        [],
        [("u", 20)],
        [("u", 21)],
        [("t", [20, 21])],
        [("u", 30)],
        [("t", [21, 30])],
    ]


def test_end_of_episode_uses_the_open_step_and_step_conditions(client):
    config = sw.create_config(
        REF["a"][-1], "t", conditions=[C.is_end_episode(), C.step_index() == 1]
    )
    writer = client.structured_writer([config])
    writer.append(_step(0))
    writer.append(_step(1, None), partial_step=True)
    writer.end_episode()
    assert not writer.step_is_open
    assert _drain(client) == [(1.0, 1)]


def test_is_end_episode_only_with_eq_1(client):
    condition = C.is_end_episode()
    condition.inverse = True
    with pytest.raises(ValueError, match="eq=1"):
        client.structured_writer([sw.create_config(REF["a"][-1], "t", [condition])])


def test_buffer_length_is_capped_by_the_longest_history(client):
    configs = [
        sw.create_config(
            REF["a"][-1], "t", conditions=[patterns_pb2.Condition(buffer_length=True, ge=2)]
        ),
        sw.create_config(REF["a"][-3:], "u"),
        sw.create_config(
            REF["a"][-1], "t", conditions=[patterns_pb2.Condition(buffer_length=True, ge=4)]
        ),
    ]
    steps = [_step(i) for i in range(4)] + ["end", _step(10), _step(11)]
    assert _run(client, configs, steps, tables=("t", "u")) == [
        [],
        [("t", 1)],
        [("t", 2), ("u", [0, 1, 2])],
        [("t", 3), ("u", [1, 2, 3])],
        [],
        [],
        [("t", 11)],
    ]


# -------------------------------------------------------------- priorities


def test_constant_and_td_error_priorities(client):
    step = {"a": None, "td": None}
    ref = sw.create_reference_step(step)
    configs = [
        sw.create_config(ref["td"][-3:], "t", priority=sw.td_error(0.9, step, lambda s: s["td"])),
        sw.create_config(
            {"x": ref["td"][-3:], "y": ref["td"][-1]},
            "u",
            priority=sw.td_error(0.9, step, lambda s: s["td"]),
        ),
    ]
    writer = client.structured_writer(configs)
    for i, td in enumerate([-1.0, 2.0, -3.0, 0.5]):
        writer.append({"a": np.int32(i), "td": np.float32(td)})
    writer.flush()
    assert [p for p, _ in _drain(client, "t")] == [
        0.9 * 3.0 + (1 - 0.9) * 2.0,
        0.9 * 3.0 + (1 - 0.9) * (5.5 / 3),
    ]
    # The last node reading the TD column (y, squeezed) decides.
    assert [p for p, _ in _drain(client, "u")] == [3.0, 0.5]
    writer = client.structured_writer(
        [sw.create_config(ref["a"][-1], "t", priority=sw.constant_priority_fn(2.5))]
    )
    writer.append({"a": np.int32(0), "td": np.float32(0)})
    writer.flush()
    assert [p for p, _ in _drain(client, "t")] == [2.5]


def test_td_error_needs_scalars_and_is_zero_when_unused(client):
    step = {"a": None, "td": None}
    ref = sw.create_reference_step(step)
    writer = client.structured_writer(
        [sw.create_config(ref["a"][-1], "t", priority=sw.td_error(0.5, step, lambda s: s["td"]))]
    )
    writer.append({"a": np.int32(0), "td": np.float32(4)})
    writer.flush()
    assert [p for p, _ in _drain(client, "t")] == [0.0]
    writer = client.structured_writer(
        [sw.create_config(ref["td"][-1], "t", priority=sw.td_error(0.5, step, lambda s: s["td"]))]
    )
    with pytest.raises(ValueError, match="TD Error expects a scalar tensor"):
        writer.append({"a": np.int32(0), "td": np.zeros(2, np.float32)})


def test_config_without_priority_fails_when_applied(client):
    config = patterns_pb2.StructuredWriterConfig(table="t")
    config.flat.add(stop=-1)
    writer = client.structured_writer([config])  # accepted, as by dm-reverb
    with pytest.raises(ValueError, match="priority"):
        writer.append(_step(0))


# ---------------------------------------------------------- invalid configs


@pytest.mark.parametrize(
    "node,message",
    [
        (dict(stop=0), "`stop` must be < 0 when `start` isn't set"),
        (dict(stop=1), "`stop` must be <= 0 but got 1"),
        (dict(), "At least one of `start` and `stop`"),
        (dict(start=0), "`start` must be < 0 but got 0"),
        (dict(start=-2, stop=-2), r"`stop` \(-2\) must be > `start` \(-2\)"),
        (dict(start=-2, step=0), "`step` must be > 0 but got 0"),
        (dict(stop=-1, step=2), "`step` must only be set when `start` is set"),
        (dict(flat_source_index=-1, stop=-1), "`flat_source_index` must be >= 0"),
    ],
)
def test_invalid_nodes_name_the_config_and_node(client, node, message):
    config = sw.create_config([REF["a"][-1], patterns_pb2.PatternNode(**node)], "t")
    with pytest.raises(ValueError, match=message) as error:
        client.structured_writer([sw.create_config(REF["a"][-1], "t"), config])
    assert "position 1 (table 't'): flat[1]:" in str(error.value)
    assert isinstance(error.value, reverb.errors.InvalidArgumentError)


@pytest.mark.parametrize(
    "condition,message",
    [
        (patterns_pb2.Condition(eq=1), "`left`"),
        (patterns_pb2.Condition(step_index=True), "`cmp`"),
        (
            patterns_pb2.Condition(step_index=True, mod_eq=dict(mod=0, eq=0)),
            "`mod_eq.mod` must be > 0",
        ),
        (
            patterns_pb2.Condition(step_index=True, mod_eq=dict(mod=2, eq=-1)),
            "`mod_eq.eq` must be >= 0",
        ),
        (patterns_pb2.Condition(is_end_episode=True, ge=1), "eq=1"),
        (patterns_pb2.Condition(flat_source_index=-1, eq=1), "must be >= 0"),
    ],
)
def test_invalid_conditions(client, condition, message):
    with pytest.raises(ValueError, match=message):
        client.structured_writer([sw.create_config(REF["a"][-1], "t", [condition])])


def test_invalid_config_lists(client):
    with pytest.raises(ValueError, match="At least one config"):
        client.structured_writer([])
    with pytest.raises(ValueError, match="`flat` must not be empty"):
        client.structured_writer([patterns_pb2.StructuredWriterConfig(table="t")])
    empty_table = sw.create_config(REF["a"][-1], "t")
    empty_table.table = ""
    with pytest.raises(ValueError, match="`table` must not be empty"):
        client.structured_writer([empty_table])


# ------------------------------------------------------- flush and episodes


def test_flush_arguments_and_timeouts():
    with reverb.Server([reverb.Table.queue("blocked", 1)]) as srv:
        client = reverb.Client(f"localhost:{srv.port}")
        writer = client.structured_writer([sw.create_config(REF["a"][-1], "blocked")])
        with pytest.raises(ValueError, match="block_until_num_items"):
            writer.flush(-1)
        writer.flush(timeout_ms=0)  # nothing pending
        writer.append(_step(0))
        writer.append(_step(1))  # the rate limiter holds this one
        with pytest.raises(
            reverb.errors.DeadlineExceededError,
            match=r"^Flush call did not complete within provided timeout of 0:00:00\.200000",
        ):
            writer.flush(timeout_ms=200)
        # A timeout of zero or less checks once and does not wait (dm-reverb),
        # printed as Python prints the timedelta.
        for timeout_ms, printed in ((0, "0:00:00"), (-5, "-1 day, 23:59:59.995000")):
            with pytest.raises(
                reverb.errors.DeadlineExceededError,
                match=f"^Flush call did not complete within provided timeout of {printed} ",
            ):
                writer.flush(timeout_ms=timeout_ms)
        with pytest.raises(TypeError, match="timeout_ms"):
            writer.flush(timeout_ms=2.5)
        with pytest.raises(
            reverb.errors.DeadlineExceededError,
            match=r"^End episode call did not complete within provided timeout of 0:00:00\.200000",
        ):
            writer.end_episode(timeout_ms=200)
        with pytest.raises(
            reverb.errors.DeadlineExceededError,
            match="^End episode call did not complete within provided timeout of -1 day",
        ):
            writer.end_episode(timeout_ms=-5)
        with pytest.raises(TypeError, match="timeout_ms"):
            writer.end_episode(timeout_ms="x")
        writer.flush(block_until_num_items=1, timeout_ms=5000)
        writer.flush(block_until_num_items=1, timeout_ms=-1)  # met: no error
        assert not writer.step_is_open


def test_end_episode_clear_buffers(client):
    config = sw.create_config(REF["a"][-2:], "t")
    steps = [_step(0), _step(1), "end_keep", _step(2), "end", _step(3), _step(4)]
    assert _data_only(_run(client, [config], steps)) == [
        [],
        [[0, 1]],
        [],
        [[1, 2]],
        [],
        [],
        [[3, 4]],
    ]


def test_writers_in_threads(client):
    config = sw.create_config({"x": REF["a"][-2:]}, "t")

    def write(base):
        writer = client.structured_writer([config])
        for i in range(50):
            writer.append(_step(base + i))
        writer.end_episode()

    threads = [threading.Thread(target=write, args=(1000 * k,)) for k in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    items = [data for _, data in _drain(client)]
    assert len(items) == 3 * 49
    assert all(b == a + 1 for a, b in items)


# ---------------------------------------- signatures, tables and datasets


def test_infer_signature_into_a_table_sampled_by_trajectory_dataset():
    step_spec = {
        "obs": tf.TensorSpec([2], tf.float32),
        "action": tf.TensorSpec([], tf.int64),
        "reward": tf.TensorSpec([], tf.float32),
    }
    ref = sw.create_reference_step(step_spec)
    pattern = {"obs": ref["obs"][-3:], "action": ref["action"][-3], "reward": ref["reward"][-3:-1]}
    config = sw.create_config(pattern, "sig")
    signature = sw.infer_signature([config], step_spec)
    assert signature == {
        "obs": tf.TensorSpec([3, 2], tf.float32, name="obs"),
        "action": tf.TensorSpec([], tf.int64, name="action"),
        "reward": tf.TensorSpec([2], tf.float32, name="reward"),
    }
    table = reverb.Table(
        "sig",
        reverb.selectors.Fifo(),
        reverb.selectors.Fifo(),
        100,
        reverb.rate_limiters.MinSize(1),
        max_times_sampled=1,
        signature=signature,
    )
    with reverb.Server([table]) as srv:
        address = f"localhost:{srv.port}"
        writer = reverb.Client(address).structured_writer([config])
        for i in range(5):
            writer.append(
                {"obs": np.full(2, i, np.float32), "action": np.int64(i), "reward": np.float32(i)}
            )
        writer.flush()
        dataset = reverb.TrajectoryDataset.from_table_signature(
            address, "sig", max_in_flight_samples_per_worker=10
        )
        samples = list(dataset.take(3))
    assert [s.data["action"].numpy() for s in samples] == [0, 1, 2]
    assert samples[2].data["obs"].numpy().tolist() == [[2, 2], [3, 3], [4, 4]]
    assert samples[1].data["reward"].numpy().tolist() == [1.0, 2.0]


def test_infer_signature_merges_and_rejects():
    spec = {"a": tf.TensorSpec([2], tf.float32), "f": tf.TensorSpec([], tf.int64)}
    merged = sw.infer_signature(
        [sw.create_config(REF["a"][-3:], "t"), sw.create_config(REF["a"][-2:], "t")], spec
    )
    assert merged == tf.TensorSpec([None, 2], tf.float32, name="")
    # dm-reverb's length of a strided slice: (stop - start) // step.
    assert sw.infer_signature([sw.create_config(REF["a"][-5::2], "t")], spec).shape == [2, 2]
    with pytest.raises(ValueError, match="At least one config"):
        sw.infer_signature([], spec)
    with pytest.raises(ValueError, match="same pattern_structure"):
        sw.infer_signature(
            [sw.create_config([REF["a"][-1]], "t"), sw.create_config({"x": REF["a"][-1]}, "t")],
            spec,
        )
    with pytest.raises(ValueError, match="same table but provided configs included t, u"):
        sw.infer_signature(
            [sw.create_config(REF["a"][-1], "t"), sw.create_config(REF["a"][-1], "u")], spec
        )
    with pytest.raises(ValueError, match="multiple dtypes"):
        sw.infer_signature(
            [sw.create_config(REF["a"][-1], "t"), sw.create_config(REF["f"][-1], "t")], spec
        )
    with pytest.raises(ValueError, match="incompatible shapes"):
        sw.infer_signature(
            [sw.create_config(REF["a"][-1], "t"), sw.create_config(REF["a"][-2:], "t")], spec
        )


def test_pattern_helpers_and_config_protos():
    assert REF["a"][-1] == patterns_pb2.PatternNode(flat_source_index=0, stop=-1)
    assert REF["f"][-3::2] == patterns_pb2.PatternNode(flat_source_index=1, start=-3, step=2)
    with pytest.raises(ValueError, match="Key must be int or slice"):
        REF["a"]["x"]  # pylint: disable=pointless-statement
    pattern = sw.pattern_from_transform(STEP, lambda s: {"last": s["a"][-1], "two": [s["f"][-2:]]})
    config = sw.create_config(pattern, "t")
    assert config.priority == sw.constant_priority_fn(1.0)
    assert sw.unpack_pattern(config) == pattern
    assert config.HasField("pattern_structure")
    bare = patterns_pb2.StructuredWriterConfig(flat=[REF["a"][-1]], table="t")
    assert list(sw.unpack_pattern(bare)) == [REF["a"][-1]]
    assert sw.Config is patterns_pb2.StructuredWriterConfig
    assert sw.ConditionProto is patterns_pb2.Condition
    assert C.is_end_episode() == patterns_pb2.Condition(is_end_episode=True, eq=1)
    assert (C.step_index() > 2) == patterns_pb2.Condition(step_index=True, ge=3)
    assert (C.step_index() <= 2) == patterns_pb2.Condition(step_index=True, ge=3, inverse=True)
    assert (C.data({"x": [None, None]})["x"][1] == 4) == patterns_pb2.Condition(
        flat_source_index=1, eq=4
    )
    td = sw.td_error(0.25, STEP, lambda s: s["f"])
    assert td.td_error.flat_source_index == 1 and td.td_error.max_priority_weight == 0.25
    # Round trip (map fields inside pattern_structure serialize in no fixed
    # order, so compare messages, not bytes).
    assert patterns_pb2.StructuredWriterConfig.FromString(config.SerializeToString()) == config


def test_package_exposes_the_modules():
    assert reverb.structured is sw
    assert reverb.structured_writer is sw
    assert reverb.structured.StructuredWriter is sw.StructuredWriter
    from reverb_tf.cc import patterns_pb2 as again  # pylint: disable=g-import-not-at-top

    assert again.StructuredWriterConfig.DESCRIPTOR.full_name == (
        "reverb_tf.patterns.StructuredWriterConfig"
    )
