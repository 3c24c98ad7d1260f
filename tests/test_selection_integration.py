# SPDX-License-Identifier: Apache-2.0
"""Selectors, removers, rate limiters and priority mutation end to end."""

import collections

import pytest

import reverb_tf as reverb
from reverb_tf import errors
from integration import (
    insert_values,
    value_of,
    Background,
    make_server,  # noqa: F401 (a fixture)
    sample_one,
    table,
    wait_until,
)  # noqa: F401  (fixtures)

# Every test twice: over gRPC and in-process (conftest.py).
BOTH_TRANSPORTS = True


@pytest.mark.parametrize(
    "selector,priorities,expected_value",
    [
        (reverb.selectors.Fifo(), [1, 1, 1], 0),
        (reverb.selectors.Lifo(), [1, 1, 1], 2),
        (reverb.selectors.MinHeap(), [3, 1, 2], 1),
        (reverb.selectors.MaxHeap(), [3, 1, 2], 0),
        (reverb.selectors.Prioritized(1.0), [0, 5, 0], 1),
    ],
)
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


@pytest.mark.parametrize(
    "remover,survivors",
    [
        (reverb.selectors.Fifo(), {1, 2, 3}),
        (reverb.selectors.Lifo(), {0, 1, 2}),
        (reverb.selectors.MinHeap(), {0, 2, 3}),
        (reverb.selectors.MaxHeap(), {1, 2, 3}),
    ],
)
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


def test_min_size_blocks_sampling_until_filled(make_server):
    server = make_server(table(limiter=reverb.rate_limiters.MinSize(2)))
    client = server.localhost_client()
    insert_values(client, "t", [1])
    sampler = Background(lambda: sample_one(client))
    wait_until(
        lambda: client.server_info()["t"].rate_limiter_info.sample_stats.pending == 1,
        "the sample is blocked",
    )
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
    wait_until(
        lambda: client.server_info()["t"].rate_limiter_info.insert_stats.pending == 1,
        "the third insert is blocked",
    )
    assert client.server_info()["t"].current_size == 2
    sample_one(client)
    writer.flush(timeout_ms=10_000)
    assert client.server_info()["t"].current_size == 3
    sample_one(client)
    sample_one(client)
    blocked = Background(lambda: sample_one(client))
    wait_until(
        lambda: client.server_info()["t"].rate_limiter_info.sample_stats.pending == 1,
        "the fourth sample is blocked",
    )
    writer.append({"x": 3})
    writer.create_item("t", 1.0, writer.history["x"][-1])
    writer.flush(timeout_ms=10_000)
    blocked.join()
    stats = client.server_info()["t"].rate_limiter_info
    assert (stats.insert_stats.completed, stats.sample_stats.completed) == (4, 4)
    writer.close()


@pytest.mark.parametrize(
    "factory,order", [(reverb.Table.queue, [0, 1, 2]), (reverb.Table.stack, [2, 1, 0])]
)
def test_queue_and_stack(make_server, factory, order):
    server = make_server(factory("q", 3))
    client = server.localhost_client()
    insert_values(client, "q", [1, 1, 1])
    assert [value_of(s) for s in client.sample("q", 3, emit_timesteps=False)] == order
    assert client.server_info()["q"].current_size == 0
    blocked = Background(lambda: sample_one(client, "q"))
    wait_until(
        lambda: client.server_info()["q"].rate_limiter_info.sample_stats.pending == 1,
        "sampling an empty queue blocks",
    )
    insert_values(client, "q", [1])
    assert value_of(blocked.join()) == 0


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


def test_a_window_above_the_start_delays_sampling_until_diff_reaches_it(make_server):
    # spi 1, min size 10, window (20, 40): samples need diff - 1 >= 20, so
    # the 21st insert is the first to let one through.
    limited = table(limiter=reverb.rate_limiters.SampleToInsertRatio(1.0, 10, (20.0, 40.0)))
    client = make_server(limited).localhost_client()
    insert_values(client, "t", [1.0] * 20)
    assert client.server_info()["t"].current_size == 20
    assert not limited.can_sample(1)
    insert_values(client, "t", [1.0])
    assert limited.can_sample(1)
    assert not limited.can_sample(2)
    sample_one(client)
    assert not limited.can_sample(1)
