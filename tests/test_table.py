# SPDX-License-Identifier: Apache-2.0
"""Table descriptions (validation, queue/stack presets); no server needed."""

import numpy as np
import pytest
import tensorflow as tf

import reverb_tf
from reverb_tf import rate_limiters
from reverb_tf import selectors
from reverb_tf import errors


def table(**overrides):
    args = dict(
        name="t",
        sampler=selectors.Uniform(),
        remover=selectors.Fifo(),
        max_size=10,
        rate_limiter=rate_limiters.MinSize(1),
    )
    args.update(overrides)
    return reverb_tf.Table(**args)


def test_defaults():
    t = table()
    assert (t.name, t.max_size, t.max_times_sampled, t.signature) == ("t", 10, 0, None)
    assert t._columns is None and t._nested_structure == b""


@pytest.mark.parametrize(
    "overrides,error",
    [
        (dict(name=""), ValueError),
        (dict(max_size=0), ValueError),
        (dict(max_size=-3), ValueError),
        (dict(max_size=2.5), TypeError),
        (dict(sampler="uniform"), TypeError),
        (dict(remover=None), TypeError),
        (dict(rate_limiter=3), TypeError),
        (dict(extensions=[object()]), NotImplementedError),
        (dict(signature={"a": np.zeros(3)}), ValueError),
    ],
)
def test_invalid_tables(overrides, error):
    with pytest.raises(error):
        table(**overrides)


def test_max_times_sampled_below_one_means_unlimited():
    # Kept as given, as dm-reverb reports it; any value < 1 is no limit.
    unlimited = table(max_times_sampled=-5)
    assert unlimited.max_times_sampled == -5
    assert unlimited.info.max_times_sampled == -5
    assert table(max_times_sampled=3).max_times_sampled == 3
    with reverb_tf.Server([unlimited]) as server:
        client = reverb_tf.Client(f"localhost:{server.port}")
        client.insert(np.int32(1), {"t": 1.0})
        for _ in range(3):
            next(client.sample("t"))
        assert client.server_info()["t"].current_size == 1


def test_signature_is_flattened():
    t = table(
        signature={"obs": tf.TensorSpec([None, 4], tf.float32), "a": tf.TensorSpec([], tf.int32)}
    )
    assert t._columns == [("a", np.dtype(np.int32), ()), ("obs", np.dtype(np.float32), (-1, 4))]
    assert t._nested_structure


@pytest.mark.parametrize(
    "factory,selector",
    [(reverb_tf.Table.queue, selectors.Fifo()), (reverb_tf.Table.stack, selectors.Lifo())],
)
def test_queue_and_stack_presets(factory, selector):
    t = factory("q", 5)
    assert t.sampler == selector and t.remover == selector
    assert t.max_times_sampled == 1 and t.max_size == 5
    assert t.rate_limiter._key() == (1.0, 1, 0.0, 5.0)


def test_a_table_is_live_before_during_and_after_its_server():
    t = reverb_tf.Table(
        "live", selectors.Uniform(), selectors.Fifo(), 10, reverb_tf.rate_limiters.MinSize(2)
    )
    info = t.info
    assert (info.current_size, info.max_size, info.num_episodes) == (0, 10, 0)
    assert info.rate_limiter_info.min_size_to_sample == 2
    assert not t.can_sample(1) and t.can_insert(1)
    with reverb_tf.Server([t]) as server:
        client = reverb_tf.Client(f"localhost:{server.port}")
        client.insert(np.zeros(2), {"live": 1.0})
        client.insert(np.zeros(2), {"live": 1.0})
        # The very object the server hosts: no RPC, the same counts.
        assert t.info.current_size == 2 and t.can_sample(1)
        assert t.info.rate_limiter_info.insert_stats.completed == 2
        with pytest.raises(ValueError, match="hosted by a running server"):
            reverb_tf.Server([t])
    assert t.info.current_size == 2  # the items outlive the server
    # Hosted again, it serves again (dm-reverb's table refuses inserts then).
    with reverb_tf.Server([t]) as server:
        client = reverb_tf.Client(f"localhost:{server.port}")
        assert client.server_info()["live"].current_size == 2
        client.insert(np.zeros(2), {"live": 1.0})
        assert t.info.current_size == 3
    assert t.replace(max_size=5).info.current_size == 0
    with pytest.raises(errors.InvalidArgumentError, match="num_samples must be >= 1"):
        t.can_sample(0)


def test_server_validates_tables_before_starting():
    with pytest.raises(ValueError, match="at least one"):
        reverb_tf.Server([])
    with pytest.raises(ValueError, match="unique"):
        reverb_tf.Server([table(), table()])
    with pytest.raises(TypeError):
        reverb_tf.Server(["t"])
