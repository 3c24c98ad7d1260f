# SPDX-License-Identifier: Apache-2.0
"""Client: insert, sample, mutate_priorities, reset, server_info, errors."""

import numpy as np


def _queue(reverb, name="q", size=10, signature=None):
    return reverb.Table.queue(name, size, signature=signature)


def _sample_view(sample):
    """A sample without its random key."""
    if isinstance(sample, list):
        return [_sample_view(s) for s in sample]
    info = sample.info
    return {
        "type": type(sample).__name__,
        "info_type": type(info).__name__,
        "info_fields": list(info._fields),
        "probability": info.probability,
        "table_size": info.table_size,
        "priority": info.priority,
        "times_sampled": getattr(info, "times_sampled", None),
        "key_type": type(info.key).__name__,
        "data": sample.data,
    }


def scenario_insert_then_sample_timesteps(ctx):
    reverb = ctx.reverb
    _, client = ctx.server([_queue(reverb)])
    client.insert([np.int64(3), np.ones([4], np.float32)], {"q": 1.0})
    return _sample_view(list(client.sample("q", num_samples=1))[0])


def scenario_insert_then_sample_no_timesteps(ctx):
    reverb = ctx.reverb
    _, client = ctx.server([_queue(reverb)])
    client.insert([np.int64(3), np.ones([4], np.float32)], {"q": 1.0})
    return _sample_view(next(client.sample("q", emit_timesteps=False)))


def scenario_unpacked_signature_key_order(ctx):
    """Signatures given in non-alphabetical order come back sorted."""
    import tensorflow as tf

    reverb = ctx.reverb
    signature = {
        "z": tf.TensorSpec([], tf.int64),
        "a": {"y": tf.TensorSpec([], tf.int32), "b": tf.TensorSpec([], tf.int32)},
    }
    _, client = ctx.server([_queue(reverb, signature=signature)])
    client.insert({"z": np.int64(1), "a": {"y": np.int32(2), "b": np.int32(3)}}, {"q": 1.0})
    sample = next(client.sample("q", emit_timesteps=False, unpack_as_table_signature=True))
    return {"info_signature": list(client.server_info()["q"].signature), "data": sample.data}


def scenario_insert_nested_unpacked(ctx):
    import tensorflow as tf

    reverb = ctx.reverb
    signature = {"a": tf.TensorSpec([], tf.int64), "b": {"c": tf.TensorSpec([2], tf.float32)}}
    _, client = ctx.server([_queue(reverb, signature=signature)])
    client.insert({"a": np.int64(1), "b": {"c": np.zeros(2, np.float32)}}, {"q": 1.0})
    client.insert({"a": np.int64(2), "b": {"c": np.ones(2, np.float32)}}, {"q": 1.0})
    first = next(client.sample("q", emit_timesteps=False, unpack_as_table_signature=True))
    second = next(client.sample("q", emit_timesteps=True, unpack_as_table_signature=True))
    return [_sample_view(first), _sample_view(second)]


def scenario_insert_into_step_signature(ctx):
    """dm-reverb checks a legacy insert against the signature of one step."""
    import tensorflow as tf

    reverb = ctx.reverb
    table = _queue(reverb, signature=tf.TensorSpec([], tf.int64))
    _, client = ctx.server([table])
    result = ctx.call(client.insert, [np.int64(0)], {"q": 1.0})
    wrong = ctx.call(client.insert, [np.float32(0)], {"q": 1.0})
    info = client.server_info()["q"]
    return {"insert": result, "wrong_dtype": wrong, "size": info.current_size}


def scenario_insert_into_time_signature(ctx):
    import tensorflow as tf

    reverb = ctx.reverb
    table = _queue(reverb, signature=tf.TensorSpec([1, 4], tf.float32))
    _, client = ctx.server([table])
    result = ctx.call(client.insert, [np.ones(4, np.float32)], {"q": 1.0})
    return {"insert": result, "size": client.server_info()["q"].current_size}


def scenario_insert_multiple_tables(ctx):
    reverb = ctx.reverb
    _, client = ctx.server([_queue(reverb, "a"), _queue(reverb, "b")])
    client.insert(np.arange(3), {"a": 1.0, "b": 2.0})
    info = client.server_info()
    return {
        name: (
            info[name].current_size,
            _sample_view(next(client.sample(name, emit_timesteps=False))),
        )
        for name in ("a", "b")
    }


def scenario_insert_errors(ctx):
    reverb = ctx.reverb
    _, client = ctx.server([_queue(reverb)])
    return {
        "unknown_table": ctx.call(client.insert, [np.int64(1)], {"nope": 1.0}),
        "empty_priorities": ctx.call(client.insert, [np.int64(1)], {}),
        "negative_priority": ctx.call(client.insert, [np.int64(1)], {"q": -1.0}),
    }


def scenario_sample_unknown_table(ctx):
    reverb = ctx.reverb
    _, client = ctx.server([_queue(reverb)])
    return ctx.call(lambda: list(client.sample("nope", num_samples=1)))


def scenario_sample_many_fifo_order(ctx):
    reverb = ctx.reverb
    _, client = ctx.server(
        [
            reverb.Table(
                "t",
                sampler=reverb.selectors.Fifo(),
                remover=reverb.selectors.Fifo(),
                max_size=100,
                rate_limiter=reverb.rate_limiters.MinSize(1),
            )
        ]
    )
    for i in range(5):
        client.insert(np.int32(i), {"t": float(i)})
    return [_sample_view(s) for s in client.sample("t", num_samples=7, emit_timesteps=False)]


def scenario_mutate_priorities_and_delete(ctx):
    reverb = ctx.reverb
    _, client = ctx.server(
        [
            reverb.Table.queue("fifo", 100),
            reverb.Table(
                "heap",
                sampler=reverb.selectors.MaxHeap(),
                remover=reverb.selectors.Fifo(),
                max_size=100,
                rate_limiter=reverb.rate_limiters.MinSize(1),
            ),
        ]
    )
    for i in range(4):
        client.insert(np.int32(i), {"fifo": float(i), "heap": float(i)})
    samples = list(client.sample("fifo", num_samples=4, emit_timesteps=False))
    keys = {int(s.data[0][0]): s.info.key for s in samples}
    results = {
        "update": ctx.call(client.mutate_priorities, "heap", updates={keys[0]: 10.0}),
        "delete": ctx.call(client.mutate_priorities, "heap", deletes=[keys[3]]),
        "unknown_key": ctx.call(client.mutate_priorities, "heap", updates={12345: 1.0}),
        "unknown_table": ctx.call(client.mutate_priorities, "nope", updates={keys[0]: 1.0}),
        "nan": ctx.call(client.mutate_priorities, "heap", updates={keys[1]: float("nan")}),
    }
    results["size"] = client.server_info()["heap"].current_size
    results["top"] = _sample_view(next(client.sample("heap", emit_timesteps=False)))
    results["update_then_delete_same"] = ctx.call(
        client.mutate_priorities, "heap", updates={keys[2]: 50.0}, deletes=[keys[2]]
    )
    results["size_after"] = client.server_info()["heap"].current_size
    return results


def scenario_reset(ctx):
    reverb = ctx.reverb
    _, client = ctx.server([_queue(reverb)])
    client.insert(np.int32(1), {"q": 1.0})
    before = client.server_info()["q"].current_size
    result = ctx.call(client.reset, "q")
    return {
        "before": before,
        "reset": result,
        "after": client.server_info()["q"].current_size,
        "unknown": ctx.call(client.reset, "nope"),
    }


def scenario_server_info_fields(ctx):
    import tensorflow as tf

    reverb = ctx.reverb
    tables = [
        reverb.Table(
            "prio",
            sampler=reverb.selectors.Prioritized(0.8),
            remover=reverb.selectors.Fifo(),
            max_size=10,
            max_times_sampled=3,
            rate_limiter=reverb.rate_limiters.SampleToInsertRatio(
                samples_per_insert=2.0, min_size_to_sample=1, error_buffer=10.0
            ),
            signature={"x": tf.TensorSpec([2], tf.float32)},
        ),
        reverb.Table.queue("queue", 5),
        reverb.Table.stack("stack", 5),
        reverb.Table(
            "heap",
            sampler=reverb.selectors.MinHeap(),
            remover=reverb.selectors.MaxHeap(),
            max_size=7,
            rate_limiter=reverb.rate_limiters.MinSize(2),
        ),
        reverb.Table(
            "uni",
            sampler=reverb.selectors.Uniform(),
            remover=reverb.selectors.Lifo(),
            max_size=7,
            rate_limiter=reverb.rate_limiters.MinSize(1),
        ),
    ]
    _, client = ctx.server(tables)
    client.insert({"x": np.zeros(2, np.float32)}, {"prio": 1.0})
    list(client.sample("prio", num_samples=2))
    out = {}
    for name, info in sorted(client.server_info().items()):
        fields = {}
        for field in (
            "name",
            "sampler_options",
            "remover_options",
            "max_size",
            "max_times_sampled",
            "signature",
            "current_size",
            "num_episodes",
            "num_deleted_episodes",
            "num_unique_samples",
        ):
            fields[field] = getattr(info, field, "<missing>")
        limiter = info.rate_limiter_info
        fields["rate_limiter"] = {
            f: getattr(limiter, f, "<missing>")
            for f in ("samples_per_insert", "min_diff", "max_diff", "min_size_to_sample")
        }
        fields["rate_limiter_type"] = type(limiter).__name__
        fields["info_type"] = type(info).__name__
        fields["table_worker_time_type"] = type(getattr(info, "table_worker_time", None)).__name__
        out[name] = fields
    return out


def scenario_server_info_types(ctx):
    reverb = ctx.reverb
    _, client = ctx.server([_queue(reverb)])
    info = client.server_info()
    return {
        "type": type(info).__name__,
        "keys": sorted(info),
        "value_type": type(info["q"]).__name__,
        "sampler_kind": info["q"].sampler_options.WhichOneof("distribution")
        if hasattr(info["q"].sampler_options, "WhichOneof")
        else "<no WhichOneof>",
    }


def scenario_sample_blocks_until_insert(ctx):
    """A sample of an empty queue waits; it returns once an item arrives."""
    import threading

    reverb = ctx.reverb
    _, client = ctx.server([_queue(reverb)])
    result = []
    thread = threading.Thread(
        target=lambda: result.append(_sample_view(next(client.sample("q", emit_timesteps=False))))
    )
    thread.start()
    thread.join(0.5)
    blocked = thread.is_alive()
    client.insert(np.int32(7), {"q": 1.0})
    thread.join(10)
    return {"blocked": blocked, "result": result}
