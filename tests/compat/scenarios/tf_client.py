# SPDX-License-Identifier: Apache-2.0
"""TFClient: insert, sample, update_priorities, argument checks."""

import numpy as np


def _table(reverb, signature=None):
    return reverb.Table(
        "t",
        sampler=reverb.selectors.Fifo(),
        remover=reverb.selectors.Fifo(),
        max_size=10,
        rate_limiter=reverb.rate_limiters.MinSize(1),
        signature=signature,
    )


def scenario_insert_then_sample(ctx):
    import tensorflow as tf

    reverb = ctx.reverb
    server, client = ctx.server([_table(reverb)])
    tf_client = reverb.TFClient(f"localhost:{server.port}")
    op = tf_client.insert(
        [tf.ones([4]), tf.constant(3, tf.int64)], tf.constant(["t"]), tf.constant([1.5], tf.float64)
    )
    sample = tf_client.sample("t", [tf.float32, tf.int64])
    py_sample = next(client.sample("t", emit_timesteps=False))
    return {
        "op": type(op).__name__ if op is not None else None,
        "info": {f: getattr(sample.info, f) for f in sample.info._fields if f != "key"},
        "data": sample.data,
        "py_data": py_sample.data,
    }


def scenario_insert_time_signature(ctx):
    import tensorflow as tf

    reverb = ctx.reverb
    server, client = ctx.server([_table(reverb, tf.TensorSpec([1, 4], tf.float32))])
    tf_client = reverb.TFClient(f"localhost:{server.port}")
    result = ctx.call(
        tf_client.insert, [tf.ones([4])], tf.constant(["t"]), tf.constant([1.0], tf.float64)
    )
    step = ctx.call(
        lambda: reverb.Client(f"localhost:{server.port}").server_info()["t"].current_size
    )
    return {"insert": result is None or not isinstance(result, Exception), "size": step}


def scenario_insert_step_signature(ctx):
    import tensorflow as tf

    reverb = ctx.reverb
    server, client = ctx.server([_table(reverb, tf.TensorSpec([4], tf.float32))])
    tf_client = reverb.TFClient(f"localhost:{server.port}")
    result = ctx.call(
        tf_client.insert, [tf.ones([4])], tf.constant(["t"]), tf.constant([1.0], tf.float64)
    )
    return {
        "error": result if isinstance(result, Exception) else None,
        "size": client.server_info()["t"].current_size,
    }


def scenario_insert_argument_checks(ctx):
    import tensorflow as tf

    reverb = ctx.reverb
    server, _ = ctx.server([_table(reverb)])
    tf_client = reverb.TFClient(f"localhost:{server.port}")
    data = [tf.ones([2])]
    return {
        "scalar_tables": ctx.call(
            tf_client.insert, data, tf.constant("t"), tf.constant([1.0], tf.float64)
        ),
        "scalar_priorities": ctx.call(
            tf_client.insert, data, tf.constant(["t"]), tf.constant(1.0, tf.float64)
        ),
        "float32_priorities": ctx.call(
            tf_client.insert, data, tf.constant(["t"]), tf.constant([1.0], tf.float32)
        ),
        "length_mismatch": ctx.call(
            tf_client.insert, data, tf.constant(["t", "t"]), tf.constant([1.0], tf.float64)
        ),
        "unknown_table": ctx.call(
            tf_client.insert, data, tf.constant(["nope"]), tf.constant([1.0], tf.float64)
        ),
    }


def scenario_update_priorities(ctx):
    import tensorflow as tf

    reverb = ctx.reverb
    server, client = ctx.server(
        [
            reverb.Table(
                "t",
                sampler=reverb.selectors.MaxHeap(),
                remover=reverb.selectors.Fifo(),
                max_size=10,
                rate_limiter=reverb.rate_limiters.MinSize(1),
            )
        ]
    )
    for i in range(3):
        client.insert(np.int32(i), {"t": float(i)})
    tf_client = reverb.TFClient(f"localhost:{server.port}")
    top = tf_client.sample("t", [tf.int32])
    key = top.info.key
    result = tf_client.update_priorities("t", tf.reshape(key, [1]), tf.constant([-0.5], tf.float64))
    after = tf_client.sample("t", [tf.int32])
    return {
        "update": result if isinstance(result, Exception) else "ok",
        "after_data": after.data,
        "rank0_keys": ctx.call(
            tf_client.update_priorities, "t", key, tf.constant([1.0], tf.float64)
        ),
        "length_mismatch": ctx.call(
            tf_client.update_priorities,
            "t",
            tf.constant([1, 2], tf.uint64),
            tf.constant([1.0], tf.float64),
        ),
        "unknown_table": ctx.call(
            tf_client.update_priorities,
            "nope",
            tf.constant([1], tf.uint64),
            tf.constant([1.0], tf.float64),
        ),
    }


def scenario_sample_wrong_dtypes(ctx):
    import tensorflow as tf

    reverb = ctx.reverb
    server, client = ctx.server([_table(reverb)])
    client.insert(np.int32(1), {"t": 1.0})
    tf_client = reverb.TFClient(f"localhost:{server.port}")
    return {
        "wrong_dtype": ctx.call(tf_client.sample, "t", [tf.float32]),
        "too_many": ctx.call(tf_client.sample, "t", [tf.int32, tf.int32]),
        "unknown_table": ctx.call(tf_client.sample, "nope", [tf.int32]),
    }


def scenario_in_tf_function(ctx):
    import tensorflow as tf

    reverb = ctx.reverb
    server, client = ctx.server([_table(reverb)])
    tf_client = reverb.TFClient(f"localhost:{server.port}")

    @tf.function
    def act(i):
        tf_client.insert(
            [tf.cast(i, tf.float32) * tf.ones([2])],
            tf.constant(["t"]),
            tf.constant([1.0], tf.float64),
        )
        return tf_client.sample("t", [tf.float32]).data[0]

    return [act(tf.constant(i)) for i in range(3)]


def scenario_sample_nested_dtypes(ctx):
    import tensorflow as tf

    reverb = ctx.reverb
    server, client = ctx.server([_table(reverb)])
    client.insert(
        {"a": np.int64(7), "b": {"c": np.ones([2], np.float32), "d": np.int32(3)}}, {"t": 1.0}
    )
    tf_client = reverb.TFClient(f"localhost:{server.port}")
    nested = {"a": tf.int64, "b": {"c": tf.float32, "d": tf.int32}}

    @tf.function
    def traced():
        return tf_client.sample("t", nested).data

    return {
        "dict": tf_client.sample("t", nested).data,
        "tuple": tf_client.sample("t", (tf.int64, (tf.float32, tf.int32))).data,
        "list": tf_client.sample("t", [tf.int64, [tf.float32], tf.int32]).data,
        "traced": traced(),
        "wrong_structure": ctx.call(tf_client.sample, "t", {"a": tf.int64}),
    }
