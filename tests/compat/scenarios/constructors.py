# SPDX-License-Identifier: Apache-2.0
"""Constructor and argument errors of Server, Table, Client, writers, limiters."""

import numpy as np


def scenario_server_arguments(ctx):
    import portpicker

    reverb = ctx.reverb
    port = portpicker.pick_unused_port()
    server, client = ctx.server([reverb.Table.queue("q", 3)], port=port)
    result = {
        "explicit_port": server.port == port,
        "duplicate_names": ctx.call(
            reverb.Server, [reverb.Table.queue("a", 1), reverb.Table.queue("a", 1)]
        ),
        "port_in_use": ctx.call(reverb.Server, [reverb.Table.queue("b", 1)], port=port),
    }
    return result


def scenario_table_arguments(ctx):
    reverb = ctx.reverb
    s, r = reverb.selectors, reverb.rate_limiters

    def make(**kwargs):
        args = dict(
            name="t", sampler=s.Uniform(), remover=s.Fifo(), max_size=10, rate_limiter=r.MinSize(1)
        )
        args.update(kwargs)
        return ctx.call(lambda: reverb.Table(**args).name)

    return {
        "ok": make(),
        "max_times_sampled": make(max_times_sampled=5),
        "signature_not_spec": make(signature={"a": 1}),
        "extensions": make(extensions=[object()]),
    }


def scenario_rate_limiter_arguments(ctx):
    r = ctx.reverb.rate_limiters
    return {
        "min_size_ok": type(r.MinSize(3)).__name__,
        "ratio_ok": type(r.SampleToInsertRatio(2.0, 10, 5.0)).__name__,
        "ratio_tuple_buffer": type(r.SampleToInsertRatio(1.0, 1, (0.0, 4.0))).__name__,
        "raw": type(r.RateLimiter(1.0, 1, -10.0, 10.0)).__name__,
        "raw_inverted": ctx.call(r.RateLimiter, 1.0, 1, 10.0, -10.0),
        "min_size_float": ctx.call(r.MinSize, 1.5),
        "stack": type(r.Stack(4)).__name__,
    }


def scenario_writer_after_close(ctx):
    reverb = ctx.reverb
    _, client = ctx.server([reverb.Table.queue("q", 5)])
    writer = client.trajectory_writer(1)
    writer.append({"a": np.int32(1)})
    writer.create_item("q", 1.0, writer.history["a"][-1])
    writer.flush()
    writer.close()
    return {
        "append": ctx.call(writer.append, {"a": np.int32(2)}),
        "flush": ctx.call(writer.flush),
        "end_episode": ctx.call(writer.end_episode),
        "create_item": ctx.call(writer.create_item, "q", 1.0, writer.history["a"][-1]),
        "size": client.server_info()["q"].current_size,
    }


def scenario_append_with_none_leaves(ctx):
    reverb = ctx.reverb
    _, client = ctx.server([reverb.Table.queue("q", 5)])
    with client.trajectory_writer(2) as writer:
        first = ctx.call(writer.append, [np.int32(1), None])
        second = ctx.call(writer.append, [None, np.float32(2.0)])
        history = {"len0": len(writer.history[0]), "len1": len(writer.history[1])}
        missing = ctx.call(lambda: writer.history[1][0])
    legacy = client.writer(2)
    legacy_none = ctx.call(legacy.append, [np.int32(1), None])
    legacy.close()
    return {
        "first": first,
        "second": second,
        "history": history,
        "missing": missing,
        "legacy_none": legacy_none,
    }


def scenario_trajectory_writer_configure(ctx):
    reverb = ctx.reverb
    _, client = ctx.server([reverb.Table.queue("q", 5)])
    with client.trajectory_writer(num_keep_alive_refs=3) as writer:
        writer.append({"a": np.int32(0), "b": np.int32(10)})
        writer.configure(("a",), num_keep_alive_refs=3, max_chunk_length=1)
        for i in range(1, 4):
            writer.append({"a": np.int32(i), "b": np.int32(10 + i)})
        long_a = ctx.call(writer.create_item, "q", 1.0, {"a": writer.history["a"][-3:]})
        long_b = ctx.call(writer.create_item, "q", 1.0, {"b": writer.history["b"][-2:]})
        bad = ctx.call(writer.configure, ("a",), num_keep_alive_refs=0, max_chunk_length=1)
        writer.flush()
    return {
        "long_a": long_a,
        "long_b": long_b,
        "bad": bad,
        "item": next(client.sample("q", emit_timesteps=False)).data,
    }


def scenario_client_pickles(ctx):
    import pickle

    reverb = ctx.reverb
    server, client = ctx.server([reverb.Table.queue("q", 5)])
    copy = pickle.loads(pickle.dumps(client))
    copy.insert(np.int32(4), {"q": 1.0})
    return {"type": type(copy).__name__, "size": client.server_info()["q"].current_size}


def scenario_sample_to_insert_ratio_window(ctx):
    # The window (min_diff, max_diff) is centred on min_size_to_sample *
    # samples_per_insert, also when that is below 1.
    reverb = ctx.reverb
    result = {}
    for spi, min_size, buffer in [(0.1, 1, 5.0), (0.5, 1, 3.0), (2.0, 3, 10.0), (0.25, 2, 1.5)]:
        limiter = reverb.rate_limiters.SampleToInsertRatio(spi, min_size, buffer)
        table = reverb.Table("t", reverb.selectors.Uniform(), reverb.selectors.Fifo(), 100, limiter)
        _, client = ctx.server([table])
        info = client.server_info()["t"].rate_limiter_info
        result[f"{spi}/{min_size}/{buffer}"] = (round(info.min_diff, 9), round(info.max_diff, 9))
    return result
