# SPDX-License-Identifier: Apache-2.0
"""TF1-style graph programs: datasets read through Session-run iterators."""

import numpy as np


def _filled(ctx, tf):
    reverb = ctx.reverb
    table = reverb.Table("t", reverb.selectors.Uniform(), reverb.selectors.Fifo(), 100,
                         reverb.rate_limiters.MinSize(1),
                         signature={"x": tf.TensorSpec([2], tf.float32)})
    _, client = ctx.server([table])
    with client.trajectory_writer(1) as writer:
        for i in range(40):
            writer.append({"x": np.full(2, i, np.float32)})
            writer.create_item("t", 1.0, {"x": writer.history["x"][-1]})


# Only the first four iterators: in this scenario dm-reverb 0.14 then blocks
# in Session.run for good (a TimestepDataset, or a fifth dataset of the
# process; reverb_tf's go on: tests/test_tf1_graphs.py).
def scenario_graph_mode_iterators(ctx):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    reverb = ctx.reverb
    _filled(ctx, tf)
    address = f"localhost:{ctx._servers[-1].port}"  # pylint: disable=protected-access
    cases = {
        "from_table_signature": lambda: reverb.TrajectoryDataset.from_table_signature(
            address, "t", 10),
        "batch_map": lambda: reverb.TrajectoryDataset.from_table_signature(
            address, "t", 10).batch(3).map(lambda s: s.data["x"] * 2),
    }
    out = {}
    for name, make in cases.items():
        for kind in ("initializable", "one_shot"):
            def run():
                with tf.Graph().as_default():
                    dataset = make()
                    if kind == "initializable":
                        iterator = tf.compat.v1.data.make_initializable_iterator(dataset)
                    else:
                        iterator = tf.compat.v1.data.make_one_shot_iterator(dataset)
                    element = iterator.get_next()
                    with tf.compat.v1.Session() as session:
                        if kind == "initializable":
                            session.run(iterator.initializer)
                        value = session.run(element)
                return tf.nest.map_structure(
                    lambda a: (str(np.asarray(a).dtype), np.asarray(a).shape), value)
            out[f"{name}/{kind}"] = ctx.call(run)
    return out


def scenario_graph_mode_placeholder_address(ctx):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    reverb = ctx.reverb
    _filled(ctx, tf)
    address = f"localhost:{ctx._servers[-1].port}"  # pylint: disable=protected-access

    def run():
        with tf.Graph().as_default():
            placeholder = tf.compat.v1.placeholder(tf.string, [])
            dataset = reverb.TrajectoryDataset(placeholder, "t", {"x": tf.float32},
                                               {"x": tf.TensorShape([2])}, 4)
            iterator = tf.compat.v1.data.make_initializable_iterator(dataset)
            element = iterator.get_next()
            with tf.compat.v1.Session() as session:
                session.run(iterator.initializer, feed_dict={placeholder: address})
                return np.asarray(session.run(element).data["x"]).shape
    return ctx.call(run)
