# SPDX-License-Identifier: Apache-2.0
"""The Python API end to end: servers, clients, sampling and errors, against
real servers on free loopback ports."""

import collections
import itertools
import pickle
import time

import numpy as np
import pytest
import tensorflow as tf

import reverb_tf as reverb
from reverb_tf import errors
from integration import (
    listening_addresses,
    insert_values,
    Background,
    make_server,  # noqa: F401 (a fixture)
    sample_one,
    table,
    wait_until,
)  # noqa: F401  (fixtures)

# Every test twice: over gRPC and in-process (conftest.py).
BOTH_TRANSPORTS = True


def test_quick_start(make_server):
    server = make_server(
        reverb.Table(
            name="my_table",
            sampler=reverb.selectors.Prioritized(0.8),
            remover=reverb.selectors.Fifo(),
            max_size=1000,
            rate_limiter=reverb.rate_limiters.MinSize(1),
        ),
        reverb.Table(
            name="trajectories",
            sampler=reverb.selectors.Uniform(),
            remover=reverb.selectors.Fifo(),
            max_size=1000,
            rate_limiter=reverb.rate_limiters.MinSize(1),
            signature={
                "actions": tf.TensorSpec([3, 2], tf.float32),
                "observations": tf.TensorSpec([3, 10, 10], tf.uint8),
            },
        ),
    )
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
            writer.append(
                {
                    "action": np.full(2, step, np.float32),
                    "observation": np.full((10, 10), step, np.uint8),
                }
            )
            if writer.episode_steps >= 3:
                writer.create_item(
                    table="trajectories",
                    priority=1.5,
                    trajectory={
                        "actions": writer.history["action"][-3:],
                        "observations": writer.history["observation"][-3:],
                    },
                )
        writer.end_episode()
    assert client.server_info()["trajectories"].current_size == 3

    for sample in client.sample(
        "trajectories", 10, emit_timesteps=False, unpack_as_table_signature=True
    ):
        actions, observations = sample.data["actions"], sample.data["observations"]
        assert actions.shape == (3, 2) and actions.dtype == np.float32
        assert observations.shape == (3, 10, 10) and observations.dtype == np.uint8
        first = int(actions[0, 0])
        assert first in (0, 1, 2)
        np.testing.assert_array_equal(actions[:, 0], [first, first + 1, first + 2])
        np.testing.assert_array_equal(observations[:, 0, 0], actions[:, 0])
        assert sample.info.priority == 1.5 and sample.info.table_size == 3


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
    # A stopped server has released its port: a new one can take it.
    with reverb.Server([table()], port=server.port) as other:
        assert other.port == server.port
        assert set(reverb.Client(f"localhost:{other.port}").server_info(timeout=10)) == {"t"}


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


Obs = collections.namedtuple("Obs", ["pixels", "reward"])


def test_server_info_fields(make_server):
    signature = {
        "obs": Obs(tf.TensorSpec([None, 4], tf.float32), tf.TensorSpec([], tf.float64)),
        "action": tf.TensorSpec([], tf.int32),
    }
    server = make_server(
        table(
            "rich",
            sampler=reverb.selectors.Prioritized(0.7),
            remover=reverb.selectors.MinHeap(),
            max_size=50,
            max_times_sampled=4,
            limiter=reverb.rate_limiters.SampleToInsertRatio(2.0, 3, 10.0),
            signature=signature,
        ),
        table("plain"),
    )
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
            writer.append(
                {"obs": Obs(np.zeros(4, np.float32), np.float64(i)), "action": np.int32(i)}
            )
            h = writer.history
            writer.create_item(
                "rich",
                1.0 + i,
                {"obs": Obs(h["obs"].pixels[-1:], h["obs"].reward[-1]), "action": h["action"][-1]},
            )
    sample = next(client.sample("rich", 1, emit_timesteps=False, unpack_as_table_signature=True))
    assert sample.data["obs"].pixels.shape == (1, 4)
    info = client.server_info()["rich"]
    assert info.current_size == 3 and info.num_unique_samples == 1
    assert info.rate_limiter_info.insert_stats.completed == 3
    assert info.rate_limiter_info.sample_stats.completed == 1


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
                    writer.create_item(
                        "t", 1.0, {"v": writer.history["v"][-2:], "w": writer.history["w"][-1]}
                    )
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
    wait_until(
        lambda: client.server_info()["t"].rate_limiter_info.sample_stats.pending == 1,
        "the sample is blocked",
    )
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


_ANY_V4, _ANY_V6 = "00000000", "0" * 32
_LOOPBACK_V4, _LOOPBACK_V4_IN_V6 = "0100007F", "0000000000000000FFFF00000100007F"
_LOOPBACK_V6 = "00000000000000000000000001000000"  # ::1 as /proc/net/tcp6 writes it


@pytest.mark.parametrize(
    "host,expected",
    [
        (None, {_LOOPBACK_V4, _LOOPBACK_V4_IN_V6, _LOOPBACK_V6}),  # the default
        ("127.0.0.1", {_LOOPBACK_V4, _LOOPBACK_V4_IN_V6}),
        ("0.0.0.0", {_ANY_V4, _ANY_V6}),
    ],
)
def test_listens_on_loopback_unless_told_otherwise(host, expected):
    kwargs = {} if host is None else {"host": host}
    with reverb.Server([table()], **kwargs) as server:
        addresses = listening_addresses(server.port)
        assert addresses and addresses <= expected, addresses
        assert set(reverb.Client(f"localhost:{server.port}").server_info(timeout=10)) == {"t"}
        if host is None:  # "localhost" is both loopbacks: clients try ::1 first
            assert _LOOPBACK_V6 in addresses and addresses - {_LOOPBACK_V6}, addresses


def test_localhost_is_served_on_both_loopbacks_or_not_at_all(over_grpc):
    # Another process holding [::1]:P (Bazel's server listens there) while a
    # server took 127.0.0.1:P alone: clients of localhost:P, which try ::1
    # first, met that process ("Method not found").
    import socket  # pylint: disable=g-import-not-at-top

    stranger = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    stranger.bind(("::1", 0))
    stranger.listen()
    try:
        port = stranger.getsockname()[1]
        with pytest.raises(
            errors.UnavailableError,
            match=rf"127.0.0.1 and \[::1\]:{port} \(the port must be free on each\)",
        ):
            reverb.Server([table()], port=port)
        # Port 0 never picks a port half taken: many starts, each on both.
        for _ in range(20):
            with reverb.Server([table()]) as server:
                assert _LOOPBACK_V6 in listening_addresses(server.port)
                assert set(reverb.Client(f"localhost:{server.port}").server_info(timeout=10)) == {
                    "t"
                }
    finally:
        stranger.close()


def test_a_host_that_cannot_be_bound_is_a_clear_error():
    with pytest.raises(errors.UnavailableError, match="could not start a gRPC server on 192.0.2.1"):
        reverb.Server([table()], host="192.0.2.1")  # TEST-NET-1: never local
    with pytest.raises(errors.InvalidArgumentError, match="host must be"):
        reverb.Server([table()], host="bad host")


def test_no_other_socket_can_share_a_served_port():
    # gRPC servers set SO_REUSEPORT by default; then another server of the
    # same user could bind the same port (or be handed it for port 0) and the
    # kernel would split connections between them ("Method not found" from a
    # stranger). A served port is the server's alone.
    import socket  # pylint: disable=g-import-not-at-top

    with reverb.Server([table()]) as server:
        with pytest.raises(errors.UnavailableError, match="could not start a gRPC server"):
            reverb.Server([table()], port=server.port)
        for family, address in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::")):
            other = socket.socket(family, socket.SOCK_STREAM)
            other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            try:
                with pytest.raises(OSError) as refused:
                    other.bind((address, server.port))
                assert refused.value.errno == 98  # EADDRINUSE
            finally:
                other.close()


def test_mutate_priorities_of_a_plain_dict_matches_the_general_path(make_server):
    # A dict of int keys is read by the native call itself; the same updates
    # with numpy keys (or a bad key) go through the lists: same outcome.
    server = make_server(table("prio", sampler=reverb.selectors.Prioritized(1.0), max_size=100))
    client = server.localhost_client()
    with client.trajectory_writer(1) as writer:
        for i in range(4):
            writer.append({"x": np.int32(i)})
            writer.create_item("prio", 1.0, writer.history["x"][-1])
    keys = sorted(int(s.info.key) for s in client.sample("prio", 200, emit_timesteps=False))
    keys = sorted(set(keys))
    assert len(keys) == 4
    native = client._client  # pylint: disable=protected-access
    assert native.mutate_priorities_dict("prio", {keys[0]: 2.0, keys[1]: 3}, [], None) is not None
    client.mutate_priorities("prio", {np.uint64(keys[2]): 4.0}, deletes=[keys[3]])

    def priorities():
        return {
            int(s.info.key): s.info.priority
            for s in client.sample("prio", 400, emit_timesteps=False)
        }

    assert priorities() == {keys[0]: 2.0, keys[1]: 3.0, keys[2]: 4.0}
    # What the general path rejects, the plain-dict path leaves to it.
    assert native.mutate_priorities_dict("prio", {-1: 1.0}, [], None) is None
    assert native.mutate_priorities_dict("prio", {keys[0]: "high"}, [], None) is None
    with pytest.raises(TypeError):
        client.mutate_priorities("prio", {-1: 1.0})
    with pytest.raises(TypeError):
        client.mutate_priorities("prio", {keys[0]: "high"})
    with pytest.raises(errors.InvalidArgumentError):
        client.mutate_priorities("prio", {keys[0]: float("nan")})
    assert priorities() == {keys[0]: 2.0, keys[1]: 3.0, keys[2]: 4.0}
