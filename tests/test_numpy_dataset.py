# SPDX-License-Identifier: Apache-2.0
"""NumpyDataset: batches stacked in C++, over gRPC and in-process."""

import threading
import time

import numpy as np
import pytest

import reverb_tf as reverb
from reverb_tf import errors

BOTH_TRANSPORTS = True


def _signature():
    return {
        "obs": reverb.ArraySpec((3, 2), np.float32),
        "action": reverb.ArraySpec((), np.int32),
        "text": reverb.ArraySpec((), object),
    }


def _fill(client, table="t", steps=40):
    """Items t = 2.. steps-1: obs rows t-2..t (value = step), action t, text b"s<t>"."""
    with client.trajectory_writer(num_keep_alive_refs=3) as writer:
        for t in range(steps):
            writer.append(
                {"obs": np.full(2, t, np.float32), "action": np.int32(t), "text": f"s{t}".encode()}
            )
            if t >= 2:
                writer.create_item(
                    table,
                    1.0,
                    {
                        "obs": writer.history["obs"][-3:],
                        "action": writer.history["action"][-1],
                        "text": writer.history["text"][-1],
                    },
                )


@pytest.fixture
def server():
    table = reverb.Table.queue("t", 1000, signature=_signature())
    uniform = reverb.Table(
        "u",
        reverb.selectors.Uniform(),
        reverb.selectors.Fifo(),
        1000,
        reverb.rate_limiters.MinSize(1),
    )
    with reverb.Server([table, uniform]) as server:
        yield server


def test_batches_hold_exactly_the_written_items_in_the_signature_structure(server):
    address = f"localhost:{server.port}"
    _fill(reverb.Client(address))
    dataset = reverb.NumpyDataset(address, "t", 16, max_samples=38)
    batches = list(dataset)
    assert [len(b.info.key) for b in batches] == [16, 16, 6]
    batch = batches[0]
    assert set(batch.data) == {"obs", "action", "text"}
    assert batch.data["obs"].shape == (16, 3, 2) and batch.data["obs"].dtype == np.float32
    assert batch.data["action"].shape == (16,) and batch.data["action"].dtype == np.int32
    assert batch.data["text"].dtype == object
    assert batch.info.key.dtype == np.uint64 and batch.info.probability.dtype == np.float64
    assert isinstance(batch.info, reverb.SampleInfo)
    # A queue hands the items out in insertion order, each exactly once.
    actions = np.concatenate([b.data["action"] for b in batches])
    np.testing.assert_array_equal(actions, np.arange(2, 40))
    obs = np.concatenate([b.data["obs"] for b in batches])
    expected = np.stack(
        [np.repeat(np.arange(t - 2, t + 1, dtype=np.float32)[:, None], 2, 1) for t in range(2, 40)]
    )
    np.testing.assert_array_equal(obs, expected)
    texts = np.concatenate([b.data["text"] for b in batches])
    assert list(texts) == [f"s{t}".encode() for t in range(2, 40)]
    assert len(set(np.concatenate([b.info.key for b in batches]).tolist())) == 38


@pytest.mark.parametrize("spill", [False, True])
def test_items_spanning_chunks_are_stacked_exactly_from_the_servers_chunks(tmp_path, spill):
    # No string column: every column is read in place from the chunks of the
    # server of this process, an item's obs from three chunks (one a step),
    # and with a spill directory from disk.
    signature = {
        "obs": reverb.ArraySpec((3, 600), np.float32),
        "action": reverb.ArraySpec((), np.int32),
    }
    options = {"memory_limit": 1 << 20, "spill_dir": str(tmp_path / "spill")} if spill else {}
    with reverb.Server([reverb.Table.queue("q", 1000, signature=signature)], **options) as server:
        address = f"localhost:{server.port}"
        client = reverb.Client(address)
        with client.trajectory_writer(num_keep_alive_refs=3) as writer:
            for t in range(400):  # 2.4 KB a step: 1 MB in all
                writer.append({"obs": np.full(600, t, np.float32), "action": np.int32(t)})
                if t >= 2:
                    writer.create_item(
                        "q",
                        1.0,
                        {"obs": writer.history["obs"][-3:], "action": writer.history["action"][-1]},
                    )
        if spill:
            assert server.spill_stats()["disk_bytes"] > 0
        batches = list(reverb.NumpyDataset(address, "q", 64, max_samples=398))
        actions = np.concatenate([b.data["action"] for b in batches])
        np.testing.assert_array_equal(actions, np.arange(2, 400))
        obs = np.concatenate([b.data["obs"] for b in batches])
        expected = np.repeat(
            (np.arange(2, 400)[:, None] + np.arange(-2, 1)[None, :]).astype(np.float32)[..., None],
            600,
            axis=2,
        )
        np.testing.assert_array_equal(obs, expected)


def test_drop_remainder_drops_the_short_last_batch(server):
    address = f"localhost:{server.port}"
    _fill(reverb.Client(address))
    batches = list(reverb.NumpyDataset(address, "t", 16, max_samples=38, drop_remainder=True))
    assert [len(b.info.key) for b in batches] == [16, 16]


@pytest.mark.parametrize("prefetch", [0, 3])
def test_rate_limiter_timeout_ends_the_iteration(server, prefetch):
    address = f"localhost:{server.port}"
    _fill(reverb.Client(address), steps=7)  # 5 items in a queue: then it is empty
    dataset = reverb.NumpyDataset(address, "t", 2, rate_limiter_timeout_ms=200, prefetch=prefetch)
    started = time.monotonic()
    sizes = [len(b.info.key) for b in dataset]
    assert sizes == [2, 2, 1]
    assert time.monotonic() - started < 10


def test_without_a_timeout_the_rate_limiter_error_is_not_swallowed(server):
    address = f"localhost:{server.port}"
    client = reverb.Client(address)
    # MinSize(1) on an empty table blocks; only close() ends it.
    iterator = iter(reverb.NumpyDataset(address, "u", 4, prefetch=1))
    result = {}

    def consume():
        try:
            result["value"] = next(iterator)
        except BaseException as e:  # pylint: disable=broad-except
            result["error"] = e

    thread = threading.Thread(target=consume)
    thread.start()
    time.sleep(0.3)
    assert thread.is_alive()
    with client.trajectory_writer(1) as writer:
        for i in range(4):
            writer.append({"x": np.int64(i)})
            writer.create_item("u", 1.0, {"x": writer.history["x"][-1]})
    thread.join(10)
    assert not thread.is_alive()
    assert "error" not in result, result.get("error")
    # No signature: the columns come as a flat list.
    assert isinstance(result["value"].data, list)
    assert result["value"].data[0].shape == (4,)
    assert set(result["value"].data[0].tolist()) <= {0, 1, 2, 3}
    iterator.close()


def test_close_ends_a_blocked_producer_at_once(server):
    iterator = iter(reverb.NumpyDataset(f"localhost:{server.port}", "u", 8, prefetch=2))
    time.sleep(0.2)  # the producer thread now waits in the rate limiter
    started = time.monotonic()
    iterator.close()
    assert time.monotonic() - started < 5
    with pytest.raises(StopIteration):
        next(iterator)


def test_unknown_table_is_not_found(server):
    with pytest.raises(errors.NotFoundError):
        iter(reverb.NumpyDataset(f"localhost:{server.port}", "nope", 8))


def test_items_of_different_shapes_cannot_be_batched(server):
    address = f"localhost:{server.port}"
    with reverb.Client(address).trajectory_writer(2) as writer:
        writer.append({"x": np.zeros(2, np.float32)})
        writer.create_item("u", 1.0, {"x": writer.history["x"][-1]})
        writer.append({"x": np.zeros(2, np.float32)})
        writer.create_item("u", 1.0, {"x": writer.history["x"][-2:]})
    dataset = reverb.NumpyDataset(address, "u", 64, max_samples=64, prefetch=0)
    with pytest.raises(errors.InvalidArgumentError, match="cannot batch column 0"):
        next(iter(dataset))


def test_sampling_stats_give_importance_weights(server):
    address = f"localhost:{server.port}"
    client = reverb.Client(address)
    with client.trajectory_writer(1) as writer:
        for i in range(10):
            writer.append({"x": np.int64(i)})
            writer.create_item("u", 1.0, {"x": writer.history["x"][-1]})
    batch = next(iter(reverb.NumpyDataset(address, "u", 32, sampling_stats=True, max_samples=32)))
    assert isinstance(batch.info, reverb.SampleInfoWithStats)
    np.testing.assert_allclose(batch.info.probability, 0.1)
    np.testing.assert_allclose(batch.info.min_probability, 0.1)
    np.testing.assert_allclose(batch.info.table_weight, 10)
    np.testing.assert_allclose(batch.info.importance_weight(0.4), 1.0)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"batch_size": 0}, "batch_size"),
        ({"max_in_flight_samples_per_worker": 0}, "max_in_flight_samples_per_worker"),
        ({"num_workers_per_iterator": 0}, "num_workers_per_iterator"),
        ({"max_samples_per_stream": -2}, "max_samples_per_stream"),
        ({"max_samples": 0}, "max_samples"),
        ({"rate_limiter_timeout_ms": -5}, "rate_limiter_timeout_ms"),
        ({"prefetch": -1}, "prefetch"),
    ],
)
def test_arguments_are_checked(kwargs, message):
    arguments = {"server_address": "localhost:1", "table": "t", "batch_size": 4, **kwargs}
    with pytest.raises(ValueError, match=message):
        reverb.NumpyDataset(**arguments)


def test_many_streams_and_short_streams_still_deliver_every_item_once(server):
    address = f"localhost:{server.port}"
    client = reverb.Client(address)
    with client.trajectory_writer(1) as writer:
        for i in range(300):
            writer.append({"x": np.int64(i)})
            writer.create_item("u", 1.0, {"x": writer.history["x"][-1]})
    dataset = reverb.NumpyDataset(
        address, "u", 50, num_workers_per_iterator=3, max_samples_per_stream=7, max_samples=300
    )
    values = np.concatenate([b.data[0] for b in dataset])
    assert len(values) == 300
    assert set(values.tolist()) <= set(range(300))
