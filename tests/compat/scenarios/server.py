# SPDX-License-Identifier: Apache-2.0
"""Server, Table.info, server_info timeouts, unreachable servers, checkpoints."""

import numpy as np


def scenario_localhost_client_and_port(ctx):
    reverb = ctx.reverb
    server, _ = ctx.server([reverb.Table.queue("q", 5)])
    client = server.localhost_client()
    client.insert(np.int32(3), {"q": 1.0})
    return {
        "port_type": type(server.port).__name__,
        "port_positive": server.port > 0,
        "client_type": type(client).__name__,
        "address_ends_with_port": client.server_address.endswith(str(server.port)),
        "sample": next(client.sample("q", emit_timesteps=False)).data,
    }


def scenario_table_info_of_hosted_table(ctx):
    import tensorflow as tf

    reverb = ctx.reverb
    table = reverb.Table(
        "t",
        sampler=reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(),
        max_size=10,
        rate_limiter=reverb.rate_limiters.MinSize(1),
        signature=tf.TensorSpec([1], tf.int32),
    )
    _, client = ctx.server([table])
    client.insert(np.int32(1), {"t": 1.0})
    info = table.info
    return {
        "name": info.name,
        "size": info.current_size,
        "signature": info.signature,
        "type": type(info).__name__,
        "sampler": info.sampler_options,
    }


def scenario_unreachable_server_metadata(ctx):
    import portpicker

    reverb = ctx.reverb
    address = f"localhost:{portpicker.pick_unused_port()}"
    return {
        "from_table_signature": ctx.call(
            reverb.TrajectoryDataset.from_table_signature,
            address,
            "t",
            2,
            get_signature_timeout_secs=1,
        ),
        "server_info": ctx.call(reverb.Client(address).server_info, timeout=1),
    }


def scenario_server_info_after_activity(ctx):
    reverb = ctx.reverb
    table = reverb.Table(
        "t",
        sampler=reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(),
        max_size=3,
        rate_limiter=reverb.rate_limiters.MinSize(1),
    )
    _, client = ctx.server([table])
    for i in range(5):
        client.insert(np.int32(i), {"t": 1.0})
    list(client.sample("t", num_samples=4))
    info = client.server_info()["t"]
    limiter = info.rate_limiter_info
    return {
        "size": info.current_size,
        "episodes": info.num_episodes,
        "deleted_episodes": info.num_deleted_episodes,
        "unique_samples_at_most_3": info.num_unique_samples <= 3,
        "insert_completed": limiter.insert_stats.completed,
        "sample_completed": limiter.sample_stats.completed,
    }


def scenario_sample_emit_timesteps_ragged(ctx):
    """An item whose columns have different lengths cannot be split into steps."""
    reverb = ctx.reverb
    _, client = ctx.server([reverb.Table.queue("q", 5)])
    with client.trajectory_writer(3) as writer:
        for i in range(3):
            writer.append({"a": np.int32(i), "b": np.float32(i)})
        writer.create_item("q", 1.0, {"a": writer.history["a"][-3:], "b": writer.history["b"][-2:]})
        writer.create_item("q", 1.0, {"a": writer.history["a"][-2:], "b": writer.history["b"][-2:]})
    ragged = ctx.call(lambda: next(client.sample("q", emit_timesteps=True)))
    steps = next(client.sample("q", emit_timesteps=True))
    return {
        "ragged": ragged if isinstance(ragged, Exception) else "no error",
        "steps": [s.data for s in steps],
    }


def scenario_checkpoint_without_and_with_checkpointer(ctx):
    import os
    import tempfile

    reverb = ctx.reverb
    root = tempfile.mkdtemp()
    _, client = ctx.server(
        [reverb.Table.queue("q", 5)], checkpointer=reverb.checkpointers.DefaultCheckpointer(root)
    )
    client.insert(np.float32(1.5), {"q": 2.0})
    first = client.checkpoint()
    second = client.checkpoint()
    return {
        "two_paths": first != second,
        "both_exist": os.path.isdir(first) and os.path.isdir(second),
        "parent": os.path.dirname(first) == root,
    }


def scenario_writer_into_two_tables_shares_data(ctx):
    reverb = ctx.reverb
    _, client = ctx.server([reverb.Table.queue("a", 5), reverb.Table.queue("b", 5)])
    with client.trajectory_writer(2) as writer:
        writer.append({"x": np.arange(4, dtype=np.int16)})
        writer.append({"x": np.arange(4, dtype=np.int16) * 2})
        writer.create_item("a", 1.0, {"x": writer.history["x"][-2:]})
        writer.create_item("b", 3.0, writer.history["x"][-1])
    return {t: next(client.sample(t, emit_timesteps=False)).data for t in ("a", "b")}


def scenario_dtypes_round_trip(ctx):
    reverb = ctx.reverb
    _, client = ctx.server([reverb.Table.queue("q", 20)])
    values = [
        np.array([1, 2], np.uint8),
        np.array([-1], np.int8),
        np.array([3], np.uint16),
        np.array([4], np.int16),
        np.array([5], np.uint32),
        np.array([6], np.int32),
        np.array([7], np.uint64),
        np.array([8], np.int64),
        np.array([0.5], np.float16),
        np.array([1.5], np.float32),
        np.array([2.5], np.float64),
        np.array([True, False]),
        np.array([b"ab", b"c"], object),
        np.array([1 + 2j], np.complex64),
    ]
    client.insert(values, {"q": 1.0})
    return next(client.sample("q", emit_timesteps=False)).data


def scenario_strings_as_str(ctx):
    reverb = ctx.reverb
    _, client = ctx.server([reverb.Table.queue("q", 5)])
    client.insert(["hello", np.array(["a", "bc"])], {"q": 1.0})
    return next(client.sample("q", emit_timesteps=False)).data
