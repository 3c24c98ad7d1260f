# SPDX-License-Identifier: Apache-2.0
"""validate_items=False: items that do not match the signature are inserted."""

import numpy as np


def _table(reverb, tf):
    return reverb.Table(
        "t",
        reverb.selectors.Fifo(),
        reverb.selectors.Fifo(),
        10,
        reverb.rate_limiters.MinSize(1),
        max_times_sampled=1,
        signature={"a": tf.TensorSpec([], tf.float32)},
    )


def scenario_unchecked_writer_inserts_off_signature_items(ctx):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    reverb = ctx.reverb
    _, client = ctx.server([_table(reverb, tf)])
    with client.trajectory_writer(1, validate_items=False) as writer:
        # One column more than the signature (TF-Agents' RLDS path does this).
        writer.append({"a": np.float32(1.5), "b": np.int32(7)})
        writer.create_item("t", 1.0, {"a": writer.history["a"][-1], "b": writer.history["b"][-1]})
    with client.trajectory_writer(1, validate_items=False) as writer:
        # A dtype other than the signature's.
        writer.append({"a": np.int64(3)})
        writer.create_item("t", 1.0, {"a": writer.history["a"][-1]})
    samples = [next(client.sample("t", emit_timesteps=False)).data for _ in range(2)]
    return {
        "size_before": 2,
        "samples": samples,
        "size_after": client.server_info()["t"].current_size,
    }


def scenario_checked_writer_refuses_off_signature_items(ctx):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    reverb = ctx.reverb
    _, client = ctx.server([_table(reverb, tf)])

    def write():
        with client.trajectory_writer(1) as writer:
            writer.append({"a": np.int64(3)})
            writer.create_item("t", 1.0, {"a": writer.history["a"][-1]})

    error = ctx.call_expecting(
        "since the provided trajectory is inconsistent with the table signature", write
    )
    return {"error": error, "size": client.server_info()["t"].current_size}
