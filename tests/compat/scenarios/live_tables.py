# SPDX-License-Identifier: Apache-2.0
"""A Table is live from its construction, and the server hosts that very table."""

import numpy as np


def _info_fields(info):
    limiter = info.rate_limiter_info
    return {
        "name": info.name,
        "max_size": info.max_size,
        "current_size": info.current_size,
        "max_times_sampled": info.max_times_sampled,
        "num_episodes": info.num_episodes,
        "num_deleted_episodes": info.num_deleted_episodes,
        "min_size_to_sample": limiter.min_size_to_sample,
        "samples_per_insert": limiter.samples_per_insert,
        "insert_completed": limiter.insert_stats.completed,
        "sample_completed": limiter.sample_stats.completed,
        "signature": info.signature,
    }


def scenario_table_info_before_a_server(ctx):
    reverb = ctx.reverb
    table = reverb.Table(
        "t",
        reverb.selectors.Prioritized(0.8),
        reverb.selectors.Fifo(),
        10,
        reverb.rate_limiters.SampleToInsertRatio(2.0, 3, 5.0),
        max_times_sampled=4,
    )
    return {
        "type": type(table.info).__name__,
        "info": _info_fields(table.info),
        "can_sample": [table.can_sample(1), table.can_sample(5)],
        "can_insert": [table.can_insert(1), table.can_insert(4)],
    }


def scenario_hosted_table_object_sees_the_servers_items(ctx):
    reverb = ctx.reverb
    table = reverb.Table(
        "t",
        reverb.selectors.Uniform(),
        reverb.selectors.Fifo(),
        10,
        reverb.rate_limiters.MinSize(2),
    )
    before = [table.can_sample(1), table.info.current_size]
    _, client = ctx.server([table])
    client.insert(np.zeros(2, np.float32), {"t": 1.0})
    one = [table.can_sample(1), table.info.current_size]
    client.insert(np.zeros(2, np.float32), {"t": 1.0})
    next(client.sample("t"))
    return {
        "before": before,
        "one": one,
        "two": [table.can_sample(1), table.can_insert(1)],
        "info": _info_fields(table.info),
    }


def scenario_replace_makes_a_new_live_table(ctx):
    reverb = ctx.reverb
    table = reverb.Table(
        "t",
        reverb.selectors.Uniform(),
        reverb.selectors.Fifo(),
        10,
        reverb.rate_limiters.MinSize(1),
    )
    _, client = ctx.server([table])
    client.insert(np.zeros(2, np.float32), {"t": 1.0})
    replaced = table.replace(name="u", max_size=3)
    return {"original": _info_fields(table.info), "replaced": _info_fields(replaced.info)}


def scenario_items_outlive_the_server(ctx):
    reverb = ctx.reverb
    table = reverb.Table(
        "t",
        reverb.selectors.Uniform(),
        reverb.selectors.Fifo(),
        10,
        reverb.rate_limiters.MinSize(1),
    )
    server, client = ctx.server([table])
    for _ in range(3):
        client.insert(np.zeros(2, np.float32), {"t": 1.0})
    server.stop()
    return {"size_after_stop": table.info.current_size, "can_sample": table.can_sample(1)}
