# SPDX-License-Identifier: Apache-2.0
"""server_address given as a tf.Tensor: the datasets take it eager or traced."""

import numpy as np


def _server(ctx):
    """A server whose tables serve the same two-step item again and again.

    Table "t" has a signature (for `from_table_signature`), "s" none (a
    `TimestepDataset` reads a signature as one step's).
    """
    import tensorflow as tf

    reverb = ctx.reverb

    def table(name, signature):
        return reverb.Table(
            name,
            sampler=reverb.selectors.Fifo(),
            remover=reverb.selectors.Fifo(),
            max_size=10,
            rate_limiter=reverb.rate_limiters.MinSize(1),
            signature=signature,
        )

    server, client = ctx.server(
        [
            table("t", {"x": tf.TensorSpec([2], tf.int64), "y": tf.TensorSpec([2, 3], tf.float32)}),
            table("s", None),
        ]
    )
    with client.trajectory_writer(num_keep_alive_refs=2) as writer:
        for i in range(2):
            writer.append({"x": np.int64(i), "y": np.full([3], i, np.float32)})
        for name in ("t", "s"):
            writer.create_item(
                name, 1.0, {"x": writer.history["x"][-2:], "y": writer.history["y"][-2:]}
            )
    return server


def _specs():
    import tensorflow as tf

    return (
        {"x": tf.int64, "y": tf.float32},
        {"x": tf.TensorShape([2]), "y": tf.TensorShape([2, 3])},
        {"x": tf.TensorShape([]), "y": tf.TensorShape([3])},
    )


def _first(dataset, n):
    return [element.data for element in dataset.take(n)]


def scenario_eager_tensor_address(ctx):
    import tensorflow as tf

    reverb = ctx.reverb
    server = _server(ctx)
    address = tf.constant(f"localhost:{server.port}")
    dtypes, item_shapes, step_shapes = _specs()
    return {
        "trajectory": _first(
            reverb.TrajectoryDataset(
                address,
                "t",
                dtypes,
                item_shapes,
                max_in_flight_samples_per_worker=1,
                num_workers_per_iterator=1,
            ),
            2,
        ),
        "timestep": _first(
            reverb.TimestepDataset(
                address,
                "s",
                dtypes,
                step_shapes,
                max_in_flight_samples_per_worker=1,
                num_workers_per_iterator=1,
            ),
            3,
        ),
    }


def scenario_graph_tensor_address(ctx):
    import tensorflow as tf

    reverb = ctx.reverb
    server = _server(ctx)
    dtypes, item_shapes, step_shapes = _specs()

    @tf.function(input_signature=[tf.TensorSpec([], tf.string)])
    def trajectory(address):
        dataset = reverb.TrajectoryDataset(
            address, "t", dtypes, item_shapes, max_in_flight_samples_per_worker=1
        )
        return next(iter(dataset)).data

    @tf.function(input_signature=[tf.TensorSpec([], tf.string)])
    def timesteps(address):
        dataset = reverb.TimestepDataset(
            address,
            "s",
            dtypes,
            step_shapes,
            max_in_flight_samples_per_worker=1,
            num_workers_per_iterator=1,
        )
        return dataset.take(2).reduce(tf.constant(0.0), lambda s, e: s + tf.reduce_sum(e.data["y"]))

    @tf.function(input_signature=[tf.TensorSpec([], tf.string)])
    def from_signature(address):
        dataset = reverb.TrajectoryDataset.from_table_signature(
            address, "t", max_in_flight_samples_per_worker=1
        )
        return next(iter(dataset)).data

    address = f"localhost:{server.port}"
    return {
        "trajectory": trajectory(tf.constant(address)),
        "timesteps": timesteps(tf.constant(address)),
        # Reading the signature needs the address while tracing.
        "from_table_signature": ctx.call(from_signature, tf.constant(address)),
    }
