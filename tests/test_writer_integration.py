# SPDX-License-Identifier: Apache-2.0
"""TrajectoryWriter and the legacy Writer end to end, against real servers."""

import collections
import time

import numpy as np
import pytest

import reverb_tf as reverb
from reverb_tf import errors
from integration import CoreWriterProxy, GeneralPathOnly, make_server, sample_one, table  # noqa: F401  (fixtures)

# Every test twice: over gRPC and in-process (conftest.py).
BOTH_TRANSPORTS = True


def test_history_slicing_shapes(make_server):
    server = make_server(table())
    client = server.localhost_client()
    with client.trajectory_writer(num_keep_alive_refs=4) as writer:
        for i in range(4):
            writer.append({"x": np.float32(i), "v": np.full(2, i, np.int32)})
        h = writer.history
        writer.create_item("t", 1.0, [h["x"][-1], h["x"][-3:], h["v"][[0, 2]], h["v"][1]])
    data = sample_one(client).data
    assert [d.shape for d in data] == [(), (3,), (2, 2), (2,)]
    assert data[0] == 3.0
    np.testing.assert_array_equal(data[1], [1, 2, 3])
    np.testing.assert_array_equal(data[2], [[0, 0], [2, 2]])
    np.testing.assert_array_equal(data[3], [1, 1])


def test_keep_alive_refs(make_server):
    server = make_server(table())
    writer = server.localhost_client().trajectory_writer(num_keep_alive_refs=2)
    for i in range(5):
        writer.append({"x": i})
    writer.create_item("t", 1.0, writer.history["x"][-2:])
    with pytest.raises(ValueError):
        writer.history["x"][-3]
    with pytest.raises(ValueError):
        writer.history["x"][0:3]
    writer.flush()
    np.testing.assert_array_equal(sample_one(server.localhost_client()).data[0], [3, 4])
    writer.close()


def test_end_episode(make_server):
    server = make_server(table())
    client = server.localhost_client()
    writer = client.trajectory_writer(num_keep_alive_refs=3)
    for episode in range(2):
        for step in range(3):
            writer.append({"e": episode, "s": step})
        assert writer.episode_steps == 3
        writer.create_item("t", 1.0, {"e": writer.history["e"][-1], "s": writer.history["s"][:]})
        writer.end_episode()
        assert writer.episode_steps == 0
        with pytest.raises(IndexError):
            writer.history["e"][-1]
    seen = set()
    for sample in client.sample("t", 20, emit_timesteps=False):
        e, s = sample.data
        np.testing.assert_array_equal(s, [0, 1, 2])
        seen.add(int(e))
    assert seen == {0, 1}
    writer.close()


def test_partial_steps(make_server):
    server = make_server(table())
    client = server.localhost_client()
    writer = client.trajectory_writer(num_keep_alive_refs=2)
    for step in range(3):
        writer.append({"obs": np.float32(step)}, partial_step=True)
        # Items may reference the open step before it is complete.
        writer.create_item("t", 1.0, writer.history["obs"][-1])
        writer.append({"action": np.int32(10 * step)})
    assert writer.episode_steps == 3
    writer.create_item("t", 1.0, [writer.history["obs"][-1], writer.history["action"][-1]])
    writer.end_episode()
    sizes = collections.Counter(len(s.data) for s in client.sample("t", 40, emit_timesteps=False))
    assert set(sizes) == {1, 2}
    for sample in client.sample("t", 40, emit_timesteps=False):
        if len(sample.data) == 2:
            assert (float(sample.data[0]), int(sample.data[1])) == (2.0, 20)
    writer.close()


def test_flush_timeout_and_block_until_num_items(make_server):
    server = make_server(reverb.Table.queue("q", 1))
    client = server.localhost_client()
    writer = client.trajectory_writer(num_keep_alive_refs=1)
    for i in range(2):
        writer.append({"x": i})
        writer.create_item("q", 1.0, writer.history["x"][-1])
    # The queue holds one item; the second insert waits for a sample.
    with pytest.raises(errors.DeadlineExceededError):
        writer.flush(timeout_ms=200)
    writer.flush(block_until_num_items=1, timeout_ms=10_000)
    assert int(sample_one(client, "q").data[0]) == 0
    writer.flush(timeout_ms=10_000)
    assert int(sample_one(client, "q").data[0]) == 1
    writer.close()


def test_end_episode_timeout(make_server):
    server = make_server(reverb.Table.queue("q", 1))
    writer = server.localhost_client().trajectory_writer(num_keep_alive_refs=1)
    for i in range(2):
        writer.append({"x": i})
        writer.create_item("q", 1.0, writer.history["x"][-1])
    with pytest.raises(errors.DeadlineExceededError):
        writer.end_episode(timeout_ms=200)
    # The new episode began all the same.
    assert writer.episode_steps == 0
    client = server.localhost_client()
    assert [int(sample_one(client, "q").data[0]) for _ in range(2)] == [0, 1]
    writer.flush(timeout_ms=10_000)
    writer.close()


def test_close_does_not_wait_for_rate_limited_items(make_server):
    # As in dm-reverb, close() drops what is still pending instead of waiting
    # for the rate limiter (flush/end_episode are the calls that wait).
    server = make_server(reverb.Table.queue("q", 1))
    writer = server.localhost_client().trajectory_writer(num_keep_alive_refs=1)
    for i in range(2):
        writer.append({"x": i})
        writer.create_item("q", 1.0, writer.history["x"][-1])
    start = time.monotonic()
    writer.close()
    assert time.monotonic() - start < 5.0


def test_strings_and_many_dtypes(make_server):
    server = make_server(table())
    client = server.localhost_client()
    step = {
        "s": "hello",
        "b": b"\x00bytes",
        "f16": np.float16(1.5),
        "u64": np.uint64(2**63),
        "bool": np.array([True, False]),
        "c": np.complex64(1 + 2j),
        "i8": np.int8(-3),
    }
    with client.trajectory_writer(num_keep_alive_refs=1) as writer:
        writer.append(step)
        writer.create_item("t", 1.0, {k: writer.history[k][-1] for k in step})
    data = dict(zip(sorted(step), sample_one(client).data))
    assert data["s"] in (b"hello", "hello") and data["b"] == b"\x00bytes"
    for key in ["f16", "u64", "bool", "c", "i8"]:
        np.testing.assert_array_equal(data[key], step[key])
        assert data[key].dtype == np.asarray(step[key]).dtype


def test_legacy_writer(make_server):
    server = make_server(table())
    client = server.localhost_client()
    with client.writer(max_sequence_length=3) as writer:
        for i in range(4):
            writer.append({"x": np.int32(i)})
        writer.create_item("t", num_timesteps=2, priority=1.0)
        with pytest.raises(errors.InvalidArgumentError):
            writer.create_item("t", num_timesteps=4, priority=1.0)
        writer.append_sequence({"x": np.arange(10, 13, dtype=np.int32)})
        writer.create_item("t", num_timesteps=3, priority=1.0)
    lengths = set()
    for timesteps in client.sample("t", 20):
        values = [int(ts.data[0]) for ts in timesteps]
        assert values in ([2, 3], [10, 11, 12])
        lengths.add(len(values))
    assert lengths == {2, 3}


def test_a_value_of_the_wrong_type_is_a_type_error_before_structure_or_closed(make_server):
    """As dm-reverb: an argument's type is checked before the writer's state
    (closed) and before the step's structure is compared with earlier
    steps'."""
    server = make_server(table())
    client = server.localhost_client()
    not_array = "must be array-like .* got an element of type object"
    writer = client.trajectory_writer(num_keep_alive_refs=2)
    writer.append({"x": np.int32(1)})
    with pytest.raises(TypeError, match=not_array):
        writer.append(object())  # a leaf where the steps were dicts
    with pytest.raises(errors.InvalidArgumentError, match="changed between a single value"):
        writer.append(np.int32(1))  # an array: the structure is what is wrong
    writer.close()
    with pytest.raises(TypeError, match=not_array):
        writer.append([object()])
    with pytest.raises(errors.FailedPreconditionError, match="Close has been called"):
        writer.append({"x": np.int32(2)})
    legacy = client.writer(max_sequence_length=2)
    legacy.append(np.int32(1))
    legacy.close()
    with pytest.raises(TypeError, match=not_array):
        legacy.append(object())
    with pytest.raises(errors.FailedPreconditionError, match="after Close has been called"):
        legacy.append(np.int32(2))


class _CountingCommonPaths(CoreWriterProxy):
    """A native writer that counts the common-case calls it took."""

    def __init__(self, core):
        super().__init__(core)
        self.taken = collections.Counter()

    def try_append(self, *args):
        taken = self._core.try_append(*args)
        self.taken["append"] += taken
        return taken

    def try_create_item(self, *args):
        taken = self._core.try_create_item(*args)
        self.taken["create_item"] += taken
        return taken


def _write_mixed_program(writer, table_name):
    """Steps and items of every shape the common paths take or decline."""
    outcomes = []
    for i in range(6):
        step = {"obs": np.full(3, i, np.float32), "act": np.int32(i), "r": float(i)}
        if i == 2:
            step["r"] = None  # a column missing in one step
        if i == 3:
            writer.append({"obs": step["obs"]}, partial_step=True)
            writer.append({"act": step["act"], "r": step["r"]})
        else:
            writer.append(step)
        h = writer.history
        if i >= 1:
            trajectory = {"obs": h["obs"][-2:], "act": h["act"][[-1]]}
            if i != 2:
                trajectory["r"] = h["r"][-1]
            writer.create_item(table_name, i, trajectory)
        writer.create_item(table_name, 0.5 * i, h["obs"][-1])
        # The last three break the native writer's rules (validate_item),
        # which both paths leave to it.
        for priority, bad in (
            (1.0, {"obs": h["obs"][-1], "x": 1}),
            (1.0, {"obs": h["act"][-1]}),
            (1.0, {}),
            (1.0, {"obs": h["obs"][-1:-1]}),
            (float("nan"), h["obs"][-1]),
        ):
            try:
                writer.create_item(table_name, priority, bad)
                outcomes.append("stored")
            except Exception as e:  # noqa: BLE001  (compared below)
                outcomes.append((type(e).__name__, str(e)))
    for bad_step in ({"obs": np.zeros(4, np.float32)}, {"act": [1, 2]}, {"new": 1.0, "act": "x"}):
        try:
            writer.append(bad_step)
            outcomes.append("appended")
        except Exception as e:  # noqa: BLE001
            outcomes.append((type(e).__name__, str(e)))
    writer.flush()
    return outcomes


def test_the_common_paths_store_what_the_general_path_stores(make_server):
    # The native common-case calls (try_append, try_create_item) against the
    # adapter's general path: same items, same priorities, same errors.
    server = make_server(reverb.Table.queue("common", 1000), reverb.Table.queue("general", 1000))
    client = server.localhost_client()
    common = client.trajectory_writer(num_keep_alive_refs=3)
    general = client.trajectory_writer(num_keep_alive_refs=3)
    general._writer = GeneralPathOnly(general._writer)  # pylint: disable=protected-access
    counting = common._writer = _CountingCommonPaths(common._writer)  # pylint: disable=protected-access
    assert _write_mixed_program(common, "common") == _write_mixed_program(general, "general")
    # Every call but these took the common paths: the first step (new
    # columns), the first item (its table not yet signed) and the malformed
    # calls (errors raised by the native writer do not count).
    assert counting.taken == {"append": 6, "create_item": 16}

    def items(name):
        size = client.server_info()[name].current_size
        # A queue: each item once, in the order written.
        samples = list(client.sample(name, size, emit_timesteps=False))
        return [
            (s.info.priority, [(np.asarray(d).tolist(), np.asarray(d).dtype.str) for d in s.data])
            for s in samples
        ]

    ours = items("common")
    assert len(ours) == 17  # 5 of three columns, 6 squeezed, 6 renamed
    assert ours == items("general")
    common.close()
    general.close()


def test_the_native_writer_checks_item_and_flush_arguments_first(make_server):
    # Its rules, whichever way the call comes: the common path, the general
    # path, a closed writer (the argument is named first, as dm-reverb's
    # Python did), and a batched writer's items. Nothing is stored.
    server = make_server(table())
    client = server.localhost_client()
    writer = client.trajectory_writer(num_keep_alive_refs=2)
    writer.append({"x": np.float32(1)})
    writer.create_item("t", 1.0, writer.history["x"][-1])  # signs the table
    general = client.trajectory_writer(num_keep_alive_refs=2)
    general._writer = GeneralPathOnly(general._writer)  # pylint: disable=protected-access
    general.append({"x": np.float32(1)})
    for w in (writer, general):
        for priority, trajectory, phrase in (
            (float("nan"), w.history["x"][-1], "`priority` must not be nan."),
            (1.0, {}, "trajectory must not be empty."),
            (1.0, {"x": w.history["x"][-1:-1]}, "(A column references no steps.)"),
        ):
            with pytest.raises(errors.InvalidArgumentError) as raised:
                w.create_item("t", priority, trajectory)
            assert phrase in str(raised.value)
        with pytest.raises(errors.InvalidArgumentError, match="must be >= 0, got -1"):
            w.flush(block_until_num_items=-1)
    writer.flush()
    assert client.server_info()["t"].current_size == 1
    writer.close()
    with pytest.raises(errors.InvalidArgumentError, match="trajectory must not be empty"):
        writer.create_item("t", 1.0, {})
    with pytest.raises(errors.InvalidArgumentError, match="block_until_num_items"):
        writer.flush(block_until_num_items=-1)
    with pytest.raises(errors.FailedPreconditionError, match="Close has been called"):
        writer.flush()
    batched = client.batched_trajectory_writer(2, num_keep_alive_refs=2)
    batched.append({"x": np.zeros(2, np.float32)})
    with pytest.raises(errors.InvalidArgumentError, match="must not be nan"):
        batched.create_items("t", [1.0, float("nan")], batched.history["x"][-1])
    with pytest.raises(errors.InvalidArgumentError, match="trajectory must not be empty"):
        batched.create_items("t", 1.0, {})
    batched.close()
    general.close()
