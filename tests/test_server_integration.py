"""The Python API end to end, against real servers on free loopback ports.

Every test here starts `reverb_tf.Server` and therefore needs the native
module `reverb_tf._core`: without it they fail (ImportError), they are never
skipped.
"""
import collections
import faulthandler
import itertools
import pickle
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

import reverb_tf as reverb
from reverb_tf import errors

DEADLINE_S = 20.0


@pytest.fixture(autouse=True)
def watchdog():
    # A hung native call must not hang the suite (and CI) forever.
    faulthandler.dump_traceback_later(180, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def make_server():
    servers = []

    def make(*tables, **kwargs):
        server = reverb.Server(list(tables), **kwargs)
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


def table(name="t", sampler=None, remover=None, max_size=100, limiter=None, **kwargs):
    return reverb.Table(name=name,
                        sampler=sampler or reverb.selectors.Uniform(),
                        remover=remover or reverb.selectors.Fifo(),
                        max_size=max_size,
                        rate_limiter=limiter or reverb.rate_limiters.MinSize(1),
                        **kwargs)


def wait_until(condition, what):
    """Waits for `condition()` with a deadline (the server offers no event)."""
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.01)


def sample_one(client, name="t"):
    return next(client.sample(name, 1, emit_timesteps=False))


class Background:
    """Runs `fn` in a thread and keeps its result or exception."""

    def __init__(self, fn):
        self.result = self.error = None
        self.thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self.thread.start()

    def _run(self, fn):
        try:
            self.result = fn()
        except BaseException as e:  # pylint: disable=broad-except
            self.error = e

    def join(self):
        self.thread.join(DEADLINE_S)
        assert not self.thread.is_alive(), "background call did not finish"
        if self.error is not None:
            raise self.error
        return self.result


# -- quick start -------------------------------------------------------------


def test_quick_start(make_server):
    server = make_server(
        reverb.Table(name="my_table", sampler=reverb.selectors.Prioritized(0.8),
                     remover=reverb.selectors.Fifo(), max_size=1000,
                     rate_limiter=reverb.rate_limiters.MinSize(1)),
        reverb.Table(name="trajectories", sampler=reverb.selectors.Uniform(),
                     remover=reverb.selectors.Fifo(), max_size=1000,
                     rate_limiter=reverb.rate_limiters.MinSize(1),
                     signature={
                         "actions": tf.TensorSpec([3, 2], tf.float32),
                         "observations": tf.TensorSpec([3, 10, 10], tf.uint8),
                     }))
    assert server.port > 0
    client = reverb.Client(f"localhost:{server.port}")

    # Legacy single-step insert: sampled as a list of one timestep.
    client.insert([0, 1], priorities={"my_table": 1.0})
    samples = list(client.sample("my_table", num_samples=2))
    assert len(samples) == 2
    for timesteps in samples:
        assert len(timesteps) == 1
        assert isinstance(timesteps[0], reverb.ReplaySample)
        assert [int(x) for x in timesteps[0].data] == [0, 1]
        assert timesteps[0].info.probability == pytest.approx(1.0)

    # Trajectories of 3 steps, one item per step once 3 steps exist.
    with client.trajectory_writer(num_keep_alive_refs=3) as writer:
        for step in range(5):
            writer.append({"action": np.full(2, step, np.float32),
                           "observation": np.full((10, 10), step, np.uint8)})
            if writer.episode_steps >= 3:
                writer.create_item(
                    table="trajectories", priority=1.5,
                    trajectory={"actions": writer.history["action"][-3:],
                                "observations": writer.history["observation"][-3:]})
        writer.end_episode()
    assert client.server_info()["trajectories"].current_size == 3

    for sample in client.sample("trajectories", 10, emit_timesteps=False,
                                unpack_as_table_signature=True):
        actions, observations = sample.data["actions"], sample.data["observations"]
        assert actions.shape == (3, 2) and actions.dtype == np.float32
        assert observations.shape == (3, 10, 10) and observations.dtype == np.uint8
        first = int(actions[0, 0])
        assert first in (0, 1, 2)
        np.testing.assert_array_equal(actions[:, 0], [first, first + 1, first + 2])
        np.testing.assert_array_equal(observations[:, 0, 0], actions[:, 0])
        assert sample.info.priority == 1.5 and sample.info.table_size == 3


# -- server lifecycle ----------------------------------------------------------


def test_server_lifecycle(make_server):
    server = make_server(table())
    assert "Server(" in repr(server)
    client = server.localhost_client()
    assert client.server_address == f"localhost:{server.port}"
    assert set(client.server_info()) == {"t"}
    waiter = Background(server.wait)
    server.stop()
    waiter.join()
    server.stop()  # idempotent
    with reverb.Server([table()]) as other:
        assert other.port != server.port or other.port > 0


def test_explicit_port_and_pickled_client(make_server):
    import portpicker
    port = portpicker.pick_unused_port()
    server = make_server(table(), port=port)
    assert server.port == port
    client = pickle.loads(pickle.dumps(reverb.Client(f"localhost:{port}")))
    assert client.server_address == f"localhost:{port}"
    assert client.server_info()["t"].max_size == 100


def test_table_info_through_its_server(make_server):
    t = table(max_size=7)
    make_server(t)
    assert t.info.max_size == 7 and t.info.current_size == 0


# -- writer semantics ----------------------------------------------------------


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
        writer.create_item("t", 1.0, {"e": writer.history["e"][-1],
                                      "s": writer.history["s"][:]})
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
    step = {"s": "hello", "b": b"\x00bytes", "f16": np.float16(1.5), "u64": np.uint64(2**63),
            "bool": np.array([True, False]), "c": np.complex64(1 + 2j), "i8": np.int8(-3)}
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


# -- selectors ---------------------------------------------------------------


def insert_values(client, name, priorities):
    """Inserts items 0, 1, ... (one step each) with the given priorities."""
    for value, priority in enumerate(priorities):
        client.insert(np.int64(value), priorities={name: priority})


def value_of(sample):
    """The value an `insert_values` item holds (inserts have a time dim of 1)."""
    data = sample.data[0]
    assert data.shape == (1,)
    return int(data[0])


@pytest.mark.parametrize("selector,priorities,expected_value", [
    (reverb.selectors.Fifo(), [1, 1, 1], 0),
    (reverb.selectors.Lifo(), [1, 1, 1], 2),
    (reverb.selectors.MinHeap(), [3, 1, 2], 1),
    (reverb.selectors.MaxHeap(), [3, 1, 2], 0),
    (reverb.selectors.Prioritized(1.0), [0, 5, 0], 1),
])
def test_deterministic_choice(make_server, selector, priorities, expected_value):
    server = make_server(table(sampler=selector))
    client = server.localhost_client()
    insert_values(client, "t", priorities)
    for sample in client.sample("t", 5, emit_timesteps=False):
        assert value_of(sample) == expected_value
        assert sample.info.probability == pytest.approx(1.0)
        assert sample.info.table_size == 3


def test_prioritized_probabilities(make_server):
    server = make_server(table(sampler=reverb.selectors.Prioritized(0.5)))
    client = server.localhost_client()
    insert_values(client, "t", [1.0, 9.0])
    counts = collections.Counter()
    for sample in client.sample("t", 400, emit_timesteps=False):
        value = value_of(sample)
        counts[value] += 1
        # p^0.5: 1 and 3, so 1/4 and 3/4.
        assert sample.info.probability == pytest.approx([0.25, 0.75][value])
        assert sample.info.priority == [1.0, 9.0][value]
    assert 40 < counts[0] < 160


def test_uniform_probability_and_times_sampled(make_server):
    server = make_server(table())
    client = server.localhost_client()
    insert_values(client, "t", [1, 2, 3, 4])
    counts = collections.Counter()
    for sample in client.sample("t", 200, emit_timesteps=False):
        assert sample.info.probability == pytest.approx(0.25)
        counts[sample.info.key] += 1
        assert sample.info.times_sampled == counts[sample.info.key]
    assert len(counts) == 4


@pytest.mark.parametrize("remover,survivors", [
    (reverb.selectors.Fifo(), {1, 2, 3}), (reverb.selectors.Lifo(), {0, 1, 2}),
    (reverb.selectors.MinHeap(), {0, 2, 3}), (reverb.selectors.MaxHeap(), {1, 2, 3})])
def test_removers_evict_when_full(make_server, remover, survivors):
    server = make_server(table(remover=remover, max_size=3))
    client = server.localhost_client()
    # Inserting item 3 (priority 1) evicts one of items 0 (priority 3), 1 (1),
    # 2 (2) and 3 itself, as dm-reverb's remover does.
    insert_values(client, "t", [3.0, 1.0, 2.0, 1.0])
    assert client.server_info()["t"].current_size == 3
    seen = {value_of(s) for s in client.sample("t", 100, emit_timesteps=False)}
    assert seen == survivors


def test_max_times_sampled(make_server):
    server = make_server(table(max_times_sampled=2, sampler=reverb.selectors.Fifo()))
    client = server.localhost_client()
    insert_values(client, "t", [1, 1])
    values = [value_of(s) for s in client.sample("t", 4, emit_timesteps=False)]
    assert values == [0, 0, 1, 1]
    assert client.server_info()["t"].current_size == 0


# -- rate limiters -------------------------------------------------------------


def test_min_size_blocks_sampling_until_filled(make_server):
    server = make_server(table(limiter=reverb.rate_limiters.MinSize(2)))
    client = server.localhost_client()
    insert_values(client, "t", [1])
    sampler = Background(lambda: sample_one(client))
    wait_until(lambda: client.server_info()["t"].rate_limiter_info.sample_stats.pending == 1,
               "the sample is blocked")
    insert_values(client, "t", [1])
    assert isinstance(sampler.join(), reverb.ReplaySample)


def test_sample_to_insert_ratio(make_server):
    # spi 1, min size 1, buffer 1: offset 1, diffs in [0, 2].
    limiter = reverb.rate_limiters.SampleToInsertRatio(1.0, 1, 1.0)
    server = make_server(table(limiter=limiter))
    client = server.localhost_client()
    writer = client.trajectory_writer(num_keep_alive_refs=1)
    for i in range(3):
        writer.append({"x": i})
        writer.create_item("t", 1.0, writer.history["x"][-1])
    with pytest.raises(errors.DeadlineExceededError):
        writer.flush(timeout_ms=300)
    wait_until(lambda: client.server_info()["t"].rate_limiter_info.insert_stats.pending == 1,
               "the third insert is blocked")
    assert client.server_info()["t"].current_size == 2
    sample_one(client)
    writer.flush(timeout_ms=10_000)
    assert client.server_info()["t"].current_size == 3
    sample_one(client)
    sample_one(client)
    blocked = Background(lambda: sample_one(client))
    wait_until(lambda: client.server_info()["t"].rate_limiter_info.sample_stats.pending == 1,
               "the fourth sample is blocked")
    writer.append({"x": 3})
    writer.create_item("t", 1.0, writer.history["x"][-1])
    writer.flush(timeout_ms=10_000)
    blocked.join()
    stats = client.server_info()["t"].rate_limiter_info
    assert (stats.insert_stats.completed, stats.sample_stats.completed) == (4, 4)
    writer.close()


@pytest.mark.parametrize("factory,order", [
    (reverb.Table.queue, [0, 1, 2]), (reverb.Table.stack, [2, 1, 0])])
def test_queue_and_stack(make_server, factory, order):
    server = make_server(factory("q", 3))
    client = server.localhost_client()
    insert_values(client, "q", [1, 1, 1])
    assert [value_of(s) for s in client.sample("q", 3, emit_timesteps=False)] == order
    assert client.server_info()["q"].current_size == 0
    blocked = Background(lambda: sample_one(client, "q"))
    wait_until(lambda: client.server_info()["q"].rate_limiter_info.sample_stats.pending == 1,
               "sampling an empty queue blocks")
    insert_values(client, "q", [1])
    assert value_of(blocked.join()) == 0


# -- mutation ----------------------------------------------------------------


def test_mutate_delete_reset(make_server):
    server = make_server(table(sampler=reverb.selectors.MaxHeap()))
    client = server.localhost_client()
    insert_values(client, "t", [1.0, 2.0, 3.0])
    top = sample_one(client)
    assert value_of(top) == 2 and top.info.priority == 3.0
    client.mutate_priorities("t", updates={top.info.key: 0.5})
    assert value_of(sample_one(client)) == 1
    client.mutate_priorities("t", updates={top.info.key: 10.0})
    again = sample_one(client)
    assert again.info.key == top.info.key and again.info.priority == 10.0
    client.mutate_priorities("t", deletes=[top.info.key])
    assert client.server_info()["t"].current_size == 2
    assert value_of(sample_one(client)) == 1
    # Unknown keys are skipped, not errors.
    client.mutate_priorities("t", updates={123456789: 1.0}, deletes=[987654321])
    with pytest.raises(errors.InvalidArgumentError):
        client.mutate_priorities("t", updates={again.info.key + 1: float("nan")})
    # Negative priorities are fine where no selector is prioritized.
    client.mutate_priorities("t", updates={again.info.key + 1: -1.0})
    assert client.server_info()["t"].current_size == 2
    client.reset("t")
    info = client.server_info()["t"]
    assert info.current_size == 0
    assert info.rate_limiter_info.inserts == 0 and info.rate_limiter_info.samples == 0


# -- server_info ---------------------------------------------------------------


Obs = collections.namedtuple("Obs", ["pixels", "reward"])


def test_server_info_fields(make_server):
    signature = {"obs": Obs(tf.TensorSpec([None, 4], tf.float32), tf.TensorSpec([], tf.float64)),
                 "action": tf.TensorSpec([], tf.int32)}
    server = make_server(
        table("rich", sampler=reverb.selectors.Prioritized(0.7),
              remover=reverb.selectors.MinHeap(), max_size=50, max_times_sampled=4,
              limiter=reverb.rate_limiters.SampleToInsertRatio(2.0, 3, 10.0),
              signature=signature),
        table("plain"))
    client = server.localhost_client()
    infos = client.server_info(timeout=10)
    assert set(infos) == {"rich", "plain"}
    rich = infos["rich"]
    assert isinstance(rich, reverb.reverb_types.TableInfo)
    assert rich.name == "rich" and rich.max_size == 50 and rich.max_times_sampled == 4
    assert rich.sampler_options.prioritized.priority_exponent == pytest.approx(0.7)
    assert rich.sampler_options.WhichOneof("distribution") == "prioritized"
    assert rich.remover_options.heap.min_heap and rich.remover_options.is_deterministic
    limiter = rich.rate_limiter_info
    assert limiter.samples_per_insert == 2.0 and limiter.min_size_to_sample == 3
    assert (limiter.min_diff, limiter.max_diff) == (6.0 - 10.0, 6.0 + 10.0)
    assert rich.current_size == 0 and rich.num_unique_samples == 0
    assert tf.nest.flatten(rich.signature) == tf.nest.flatten(signature)
    assert type(rich.signature["obs"]).__name__ == "Obs"
    assert infos["plain"].signature is None

    with client.trajectory_writer(num_keep_alive_refs=1) as writer:
        for i in range(3):
            writer.append({"obs": Obs(np.zeros(4, np.float32), np.float64(i)),
                           "action": np.int32(i)})
            h = writer.history
            writer.create_item("rich", 1.0 + i, {"obs": Obs(h["obs"].pixels[-1:],
                                                            h["obs"].reward[-1]),
                                                 "action": h["action"][-1]})
    sample = next(client.sample("rich", 1, emit_timesteps=False, unpack_as_table_signature=True))
    assert sample.data["obs"].pixels.shape == (1, 4)
    info = client.server_info()["rich"]
    assert info.current_size == 3 and info.num_unique_samples == 1
    assert info.rate_limiter_info.insert_stats.completed == 3
    assert info.rate_limiter_info.sample_stats.completed == 1


# -- signatures ----------------------------------------------------------------


def signed_table():
    return table(signature={"obs": tf.TensorSpec([4], tf.float32),
                            "r": tf.TensorSpec([], tf.float32)})


def test_signature_mismatch_at_create_item(make_server):
    server = make_server(signed_table())
    writer = server.localhost_client().trajectory_writer(num_keep_alive_refs=1)
    writer.append({"obs": np.zeros(5, np.float32), "r": np.float32(0)})
    with pytest.raises(errors.InvalidArgumentError, match=r"'obs'.*float32\[4\].*float32\[5\]"):
        writer.create_item("t", 1.0, {"obs": writer.history["obs"][-1],
                                      "r": writer.history["r"][-1]})
    writer.close()


def test_signature_mismatch_rejected_by_the_server(make_server):
    server = make_server(signed_table())
    client = server.localhost_client()
    writer = client.trajectory_writer(num_keep_alive_refs=1, get_signature_timeout_ms=None)
    writer.append({"obs": np.zeros(4, np.float64), "r": np.float32(0)})
    with pytest.raises(errors.InvalidArgumentError, match="obs"):
        writer.create_item("t", 1.0, {"obs": writer.history["obs"][-1],
                                      "r": writer.history["r"][-1]})
        writer.flush(timeout_ms=10_000)
    assert client.server_info()["t"].current_size == 0


def test_unknown_table_in_create_item(make_server):
    server = make_server(table())
    writer = server.localhost_client().trajectory_writer(num_keep_alive_refs=1)
    writer.append({"x": 1})
    with pytest.raises(errors.InvalidArgumentError, match="nope"):
        writer.create_item("nope", 1.0, writer.history["x"][-1])
    writer.close()


def test_insert_checked_by_signature(make_server):
    server = make_server(table(signature={"a": tf.TensorSpec([1, 2], tf.int64)}))
    client = server.localhost_client()
    client.insert({"a": np.zeros(2, np.int64)}, priorities={"t": 1.0})
    with pytest.raises(errors.InvalidArgumentError, match="'a'"):
        client.insert({"a": np.zeros(3, np.int64)}, priorities={"t": 1.0})
    assert client.server_info()["t"].current_size == 1


# -- concurrency ---------------------------------------------------------------


def test_concurrent_writers_and_samplers(make_server):
    server = make_server(table(max_size=10_000))
    address = f"localhost:{server.port}"
    num_writers, items_per_writer, samples_per_sampler = 4, 250, 300

    def write(writer_id):
        client = reverb.Client(address)
        with client.trajectory_writer(num_keep_alive_refs=2) as writer:
            for i in range(items_per_writer):
                value = writer_id * 100_000 + i
                writer.append({"v": np.int64(value), "w": np.full(3, value, np.int64)})
                if i >= 1:
                    writer.create_item("t", 1.0, {"v": writer.history["v"][-2:],
                                                  "w": writer.history["w"][-1]})
                if i % 25 == 0:
                    writer.flush(block_until_num_items=10)
        return items_per_writer - 1

    def sample():
        client = reverb.Client(address)
        n = 0
        for s in client.sample("t", samples_per_sampler, emit_timesteps=False):
            v, w = s.data
            assert v[1] == v[0] + 1 and (w == v[1]).all()
            n += 1
        return n

    writers = [Background(lambda i=i: write(i)) for i in range(num_writers)]
    samplers = [Background(sample) for _ in range(2)]
    assert sum(w.join() for w in writers) == num_writers * (items_per_writer - 1)
    assert [s.join() for s in samplers] == [samples_per_sampler] * 2
    info = reverb.Client(address).server_info()["t"]
    assert info.current_size == num_writers * (items_per_writer - 1)


# -- errors by status code -----------------------------------------------------


def test_not_found(make_server):
    server = make_server(table())
    client = server.localhost_client()
    with pytest.raises(errors.NotFoundError):
        sample_one(client, "missing")
    with pytest.raises(errors.NotFoundError):
        client.reset("missing")
    with pytest.raises(errors.NotFoundError):
        client.mutate_priorities("missing", updates={1: 1.0})
    # An item for a missing table is a bad item, as in dm-reverb.
    with pytest.raises(errors.InvalidArgumentError):
        client.insert(1, priorities={"missing": 1.0})


def test_blocked_sample_cancelled_by_stop(make_server):
    server = make_server(table())
    client = server.localhost_client()
    blocked = Background(lambda: sample_one(client))
    wait_until(lambda: client.server_info()["t"].rate_limiter_info.sample_stats.pending == 1,
               "the sample is blocked")
    server.stop()
    with pytest.raises(errors.ReverbError) as info:
        blocked.join()
    # The table was closed under the call (CANCELLED); a client may also see
    # the connection go (UNAVAILABLE) first.
    assert isinstance(info.value, (errors.CancelledError, errors.UnavailableError))


def test_unreachable_server():
    import portpicker
    client = reverb.Client(f"localhost:{portpicker.pick_unused_port()}")
    with pytest.raises((errors.UnavailableError, errors.DeadlineExceededError)):
        client.server_info(timeout=2)


# -- issue 14, defect 2: Client.sample is lazy, with bounded memory ------------


def test_sample_of_a_huge_count_yields_lazily(make_server):
    server = make_server(table())
    client = server.localhost_client()
    insert_values(client, "t", [1.0, 1.0, 1.0])
    started = time.monotonic()
    # Used to allocate the whole result first and abort the process.
    samples = list(itertools.islice(client.sample("t", 10**15, emit_timesteps=False), 5))
    assert len(samples) == 5
    assert time.monotonic() - started < 10


def test_sample_keeps_a_bounded_number_of_samples_in_flight(make_server):
    # Counted on the server (deterministic, unlike RSS): before the fix the
    # first yielded sample came after all 5000 had been taken and held.
    server = make_server(table())
    client = server.localhost_client()
    client.insert(np.zeros(1 << 14, np.float32), priorities={"t": 1.0})  # 64 KiB

    def samples_taken():
        return client.server_info()["t"].rate_limiter_info.samples

    generator = client.sample("t", 5000, emit_timesteps=False)
    next(generator)
    time.sleep(0.5)  # let the stream run as far ahead as it may
    assert samples_taken() <= 2 * 256
    for _ in range(1000):
        next(generator)
    time.sleep(0.5)
    assert samples_taken() <= 1001 + 2 * 256
    assert sum(1 for _ in generator) == 5000 - 1001
    assert samples_taken() == 5000


def test_a_huge_unknown_table_name_is_not_found_with_a_bounded_message(make_server):
    # Issue 14, defect 7: a 100 KB name echoed whole exceeded gRPC's error size
    # limit, and the client saw RESOURCE_EXHAUSTED instead of NOT_FOUND.
    server = make_server(table())
    client = server.localhost_client()
    with pytest.raises(errors.NotFoundError) as raised:
        client.mutate_priorities("x" * 100_000, updates={1: 1.0})
    assert "100000 bytes" in str(raised.value) and len(str(raised.value)) < 1000
