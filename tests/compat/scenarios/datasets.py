# SPDX-License-Identifier: Apache-2.0
"""TrajectoryDataset and TimestepDataset: specs, values, errors.

TF1 graph mode (Session.run of an initializable iterator) is not compared
here: dm-reverb 0.14 hangs in it intermittently, which cost the suite 60 to
120 s a run; tests/test_tf1_graphs.py covers it for reverb_tf.
"""

import numpy as np


def _table(reverb, name="t", signature=None, size=100):
    return reverb.Table.queue(name, size, signature=signature)


def _fill_trajectories(client, n=3, steps=3):
    with client.trajectory_writer(num_keep_alive_refs=steps) as writer:
        for i in range(n * steps):
            writer.append({"obs": np.full([2], i, np.float32), "act": np.int32(i)})
            if (i + 1) % steps == 0:
                writer.create_item(
                    "t",
                    1.0,
                    {"obs": writer.history["obs"][-steps:], "act": writer.history["act"][-1]},
                )
        writer.flush()


def _signature(tf, steps=3):
    return {"obs": tf.TensorSpec([steps, 2], tf.float32), "act": tf.TensorSpec([], tf.int32)}


def _element(sample):
    return {
        "info": {f: getattr(sample.info, f) for f in sample.info._fields if f != "key"},
        "key_dtype": sample.info.key.dtype.name,
        "data": sample.data,
    }


def scenario_trajectory_dataset_from_signature(ctx):
    import tensorflow as tf

    reverb = ctx.reverb
    server, client = ctx.server([_table(reverb, signature=_signature(tf))])
    _fill_trajectories(client)
    ds = reverb.TrajectoryDataset.from_table_signature(
        f"localhost:{server.port}", "t", max_in_flight_samples_per_worker=2
    )
    return {"spec": ds.element_spec, "elements": [_element(s) for s in ds.take(3)]}


def scenario_trajectory_dataset_explicit_positional(ctx):
    """dtypes come before shapes, positionally."""
    import tensorflow as tf

    reverb = ctx.reverb
    server, client = ctx.server([_table(reverb)])
    _fill_trajectories(client, n=2)
    ds = reverb.TrajectoryDataset(
        f"localhost:{server.port}",
        "t",
        {"act": tf.int32, "obs": tf.float32},
        {"act": tf.TensorShape([]), "obs": tf.TensorShape([3, 2])},
        4,
    )
    return {"spec": ds.element_spec, "elements": [_element(s) for s in ds.take(2)]}


def scenario_trajectory_dataset_batched(ctx):
    import tensorflow as tf

    reverb = ctx.reverb
    server, client = ctx.server([_table(reverb, signature=_signature(tf))])
    _fill_trajectories(client, n=4)
    ds = reverb.TrajectoryDataset.from_table_signature(
        f"localhost:{server.port}", "t", max_in_flight_samples_per_worker=4
    ).batch(2)
    return {"spec": ds.element_spec, "first": _element(next(iter(ds)))}


def scenario_trajectory_dataset_errors(ctx):
    import tensorflow as tf

    reverb = ctx.reverb
    server, _ = ctx.server([_table(reverb), _table(reverb, "s", signature=_signature(tf))])
    address = f"localhost:{server.port}"
    return {
        "no_signature": ctx.call(reverb.TrajectoryDataset.from_table_signature, address, "t", 2),
        "unknown_table": ctx.call(
            reverb.TrajectoryDataset.from_table_signature, address, "nope", 2
        ),
        "bad_in_flight": ctx.call(reverb.TrajectoryDataset.from_table_signature, address, "s", 0),
        "bad_workers": ctx.call(
            reverb.TrajectoryDataset.from_table_signature,
            address,
            "s",
            2,
            num_workers_per_iterator=0,
        ),
        "bad_max_samples": ctx.call(
            reverb.TrajectoryDataset.from_table_signature, address, "s", 2, max_samples_per_stream=0
        ),
    }


def scenario_trajectory_dataset_wrong_dtype_at_runtime(ctx):
    import tensorflow as tf

    reverb = ctx.reverb
    server, client = ctx.server([_table(reverb)])
    _fill_trajectories(client, n=1)
    ds = reverb.TrajectoryDataset(
        f"localhost:{server.port}",
        "t",
        {"act": tf.int64, "obs": tf.float32},
        {"act": tf.TensorShape([]), "obs": tf.TensorShape([3, 2])},
        4,
    )
    return ctx.call(lambda: next(iter(ds)))


def scenario_trajectory_dataset_rate_limiter_timeout(ctx):
    import tensorflow as tf

    reverb = ctx.reverb
    server, client = ctx.server([_table(reverb, signature=_signature(tf))])
    _fill_trajectories(client, n=2)
    ds = reverb.TrajectoryDataset.from_table_signature(
        f"localhost:{server.port}",
        "t",
        max_in_flight_samples_per_worker=2,
        rate_limiter_timeout_ms=200,
    )
    return [_element(s) for s in ds]


def scenario_trajectory_dataset_max_samples(ctx):
    import tensorflow as tf

    reverb = ctx.reverb
    table = reverb.Table(
        "t",
        sampler=reverb.selectors.Fifo(),
        remover=reverb.selectors.Fifo(),
        max_size=10,
        rate_limiter=reverb.rate_limiters.MinSize(1),
        signature=_signature(tf),
    )
    server, client = ctx.server([table])
    _fill_trajectories(client, n=1)
    ds = reverb.TrajectoryDataset.from_table_signature(
        f"localhost:{server.port}", "t", max_in_flight_samples_per_worker=1, max_samples=3
    )
    return len(list(ds))


def scenario_trajectory_dataset_max_samples_per_stream_goes_on(ctx):
    """max_samples_per_stream starts a new stream; only max_samples ends the iterator."""
    import tensorflow as tf

    reverb = ctx.reverb
    table = reverb.Table(
        "t",
        sampler=reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(),
        max_size=10,
        rate_limiter=reverb.rate_limiters.MinSize(1),
        signature=_signature(tf),
    )
    server, client = ctx.server([table])
    _fill_trajectories(client, n=2)
    address = f"localhost:{server.port}"
    per_stream = reverb.TrajectoryDataset.from_table_signature(
        address,
        "t",
        max_in_flight_samples_per_worker=2,
        max_samples_per_stream=3,
        rate_limiter_timeout_ms=2000,
    )
    both = reverb.TrajectoryDataset.from_table_signature(
        address, "t", max_in_flight_samples_per_worker=2, max_samples_per_stream=3, max_samples=7
    )
    return {"per_stream_take_20": len(list(per_stream.take(20))), "both": len(list(both))}


def scenario_legacy_insert_step_signature_dataset(ctx):
    """A legacy item in a table whose signature is one step: the dataset fails."""
    import tensorflow as tf

    reverb = ctx.reverb
    server, client = ctx.server([_table(reverb, signature=tf.TensorSpec([2], tf.float32))])
    client.insert(np.ones(2, np.float32), {"t": 1.0})
    ds = reverb.TrajectoryDataset.from_table_signature(f"localhost:{server.port}", "t", 2)
    return {"spec": ds.element_spec, "next": ctx.call(lambda: next(iter(ds)))}


def scenario_legacy_insert_time_signature_dataset(ctx):
    import tensorflow as tf

    reverb = ctx.reverb
    server, client = ctx.server([_table(reverb, signature=tf.TensorSpec([1, 2], tf.float32))])
    client.insert(np.ones(2, np.float32), {"t": 1.0})
    ds = reverb.TrajectoryDataset.from_table_signature(f"localhost:{server.port}", "t", 2)
    return {"spec": ds.element_spec, "next": _element(next(iter(ds)))}


def scenario_timestep_dataset_from_signature_legacy(ctx):
    import tensorflow as tf

    reverb = ctx.reverb
    server, client = ctx.server(
        [
            _table(
                reverb,
                signature={"a": tf.TensorSpec([2], tf.float32), "b": tf.TensorSpec([], tf.int64)},
            )
        ]
    )
    with client.writer(3) as writer:
        for i in range(3):
            writer.append({"a": np.full(2, i, np.float32), "b": np.int64(i)})
        writer.create_item("t", 3, 1.0)
    ds = reverb.TimestepDataset.from_table_signature(f"localhost:{server.port}", "t", 2)
    return {"spec": ds.element_spec, "elements": [_element(s) for s in ds.take(3)]}


def scenario_timestep_dataset_explicit(ctx):
    import tensorflow as tf

    reverb = ctx.reverb
    server, client = ctx.server([_table(reverb)])
    with client.writer(3) as writer:
        for i in range(3):
            writer.append([np.full(2, i, np.float32), np.int64(i)])
        writer.create_item("t", 3, 1.0)
        writer.create_item("t", 2, 2.0)
    ds = reverb.TimestepDataset(
        f"localhost:{server.port}",
        "t",
        dtypes=[tf.float32, tf.int64],
        shapes=[tf.TensorShape([2]), tf.TensorShape([])],
        max_in_flight_samples_per_worker=2,
    )
    return {"spec": ds.element_spec, "elements": [_element(s) for s in ds.take(5)]}


def scenario_dataset_in_tf_function(ctx):
    import tensorflow as tf

    reverb = ctx.reverb
    server, client = ctx.server([_table(reverb, signature=_signature(tf))])
    _fill_trajectories(client, n=2)
    ds = reverb.TrajectoryDataset.from_table_signature(
        f"localhost:{server.port}", "t", max_in_flight_samples_per_worker=2
    )

    @tf.function
    def total(dataset):
        result = tf.constant(0.0)
        for sample in dataset.take(2):
            result += tf.reduce_sum(sample.data["obs"])
        return result

    return total(ds)


def scenario_trajectory_dataset_holds_elements_to_the_table_signature(ctx):
    """An item written unchecked meets the table's signature, not only the request.

    dm-reverb checks each element against the table's signature when the
    table has one (its message prints the signature's shape), and leaves a
    shape the signature allows but the request does not to TensorFlow's
    output check.
    """
    import tensorflow as tf

    reverb = ctx.reverb
    cases = {
        "unknown_request_narrow_signature": (tf.TensorSpec([None, 3], tf.int32), [1, 2], None),
        "open_request_narrow_signature": (
            tf.TensorSpec([None, 3], tf.int32),
            [1, 2],
            tf.TensorShape([None, None]),
        ),
        "partly_known_request": (
            tf.TensorSpec([None, 3], tf.int32),
            [1, 2],
            tf.TensorShape([1, None]),
        ),
        "signature_allows_request_does_not": (
            tf.TensorSpec([None], tf.int32),
            [2],
            tf.TensorShape([3]),
        ),
        "both_allow": (tf.TensorSpec([None], tf.int32), [2], None),
    }
    out = {}
    for name, (signature, shape, shapes) in cases.items():
        server, client = ctx.server([reverb.Table.queue("q", 10, signature=signature)])
        with client.trajectory_writer(1, validate_items=False) as writer:
            writer.append(np.zeros(shape, np.int32))
            writer.create_item("q", 1.0, writer.history[-1])
        dataset = reverb.TrajectoryDataset(
            f"localhost:{server.port}",
            "q",
            tf.int32,
            shapes,
            max_in_flight_samples_per_worker=1,
            rate_limiter_timeout_ms=300,
        )
        phrase = (
            "Incompatible shapes at component 5: expected [3] but got [2]"
            if name == "signature_allows_request_does_not"
            else "Received incompatible tensor at flattened index 0 from table 'q'.  "
            "Specification has (dtype, shape): (int32, [?,3]).  "
            "Tensor has (dtype, shape): (int32, [1,2])"
        )
        out[name] = ctx.call_expecting(
            phrase, lambda ds=dataset: [e.data.numpy() for e in ds.take(1)]
        )
    # A legacy insert (a one-step item) into a table whose signature is a
    # step, read with an unknown shape.
    server, client = ctx.server(
        [reverb.Table.queue("s", 10, signature=tf.TensorSpec([], tf.int32))]
    )
    client.insert(np.int32(5), {"s": 1.0})
    dataset = reverb.TrajectoryDataset(
        f"localhost:{server.port}", "s", tf.int32, None, 1, rate_limiter_timeout_ms=300
    )
    out["legacy_step_unknown_shape"] = ctx.call_expecting(
        "Specification has (dtype, shape): (int32, []).  Tensor has (dtype, shape): (int32, [1])",
        lambda: [e.data.numpy() for e in dataset.take(1)],
    )
    return out
