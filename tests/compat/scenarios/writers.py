# SPDX-License-Identifier: Apache-2.0
"""TrajectoryWriter and the legacy Writer: what a program sees."""

import numpy as np


def _queue(reverb, name="q", signature=None):
    return reverb.Table.queue(name, 100, signature=signature)


def _drain(client, table, n):
    return [next(client.sample(table, emit_timesteps=False)).data for _ in range(n)]


def scenario_trajectory_writer_items(ctx):
    reverb = ctx.reverb
    _, client = ctx.server([_queue(reverb)])
    with client.trajectory_writer(num_keep_alive_refs=3) as writer:
        for i in range(4):
            writer.append({"x": np.int64(i), "y": np.full([2], i, np.float32)})
            if i >= 1:
                writer.create_item(
                    "q", 1.0, {"x": writer.history["x"][-2:], "y": writer.history["y"][-1]}
                )
        writer.flush()
        steps = writer.episode_steps
    return {"episode_steps": steps, "items": _drain(client, "q", 3)}


def scenario_trajectory_writer_history_and_columns(ctx):
    reverb = ctx.reverb
    _, client = ctx.server([_queue(reverb)])
    with client.trajectory_writer(num_keep_alive_refs=2) as writer:
        writer.append({"a": np.arange(3, dtype=np.int32)})
        writer.append({"a": np.arange(3, dtype=np.int32) + 1, "b": np.float64(2.5)})
        history = writer.history
        column = history["a"][-2:]
        cells = list(column)
        result = {
            "history_type": type(history).__name__,
            "keys": sorted(history),
            "len_a": len(history["a"]),
            "column_shape": column.shape,
            "column_dtype": str(column.dtype),
            "column_numpy": column.numpy(),
            "squeezed_numpy": history["a"][-1].numpy(),
            "is_squeezed": [history["a"][-1].is_squeezed, column.is_squeezed],
            "cells": [(c.numpy(), c.shape, str(c.dtype), c.expired) for c in cells],
            "b_missing_first": ctx.call(lambda: history["b"][0]),
            "out_of_range": ctx.call(lambda: history["a"][5]),
        }
        writer.append({"a": np.arange(3, dtype=np.int32) + 2})
        writer.append({"a": np.arange(3, dtype=np.int32) + 3})
        result["expired_after_window"] = [c.expired for c in cells]
        result["old_reference"] = ctx.call(writer.create_item, "q", 1.0, column)
        # The writer keeps only the window: expired cells have no data.
        result["expired_column_numpy"] = ctx.call(column.numpy)
        result["expired_cell_numpy"] = ctx.call(cells[0].numpy)
        squeezed = writer.history["a"][-1]
        writer.end_episode(clear_buffers=True)
        result["cleared_column_numpy"] = ctx.call(squeezed.numpy)
    return result


def scenario_trajectory_writer_errors(ctx):
    reverb = ctx.reverb
    _, client = ctx.server([_queue(reverb)])
    writer = client.trajectory_writer(num_keep_alive_refs=2)
    writer.append({"a": np.int32(1)})
    result = {
        "dtype_change": ctx.call_expecting(
            "Tensor of wrong dtype provided for column", writer.append, {"a": np.float32(1)}
        ),
        "shape_change": ctx.call_expecting(
            "Tensor of incompatible shape provided for column",
            writer.append,
            {"a": np.zeros(2, np.int32)},
        ),
        "unknown_table": ctx.call(
            lambda: (writer.create_item("nope", 1.0, writer.history["a"][-1]), writer.flush())
        ),
    }
    result["bad_keep_alive"] = ctx.call(client.trajectory_writer, 0)
    return result


def scenario_trajectory_writer_messages_name_columns_by_path(ctx):
    """Value checks name a column by its path tuple, with TF's dtype and shape spellings."""
    reverb = ctx.reverb
    _, client = ctx.server([_queue(reverb)])
    result = {}
    with client.trajectory_writer(2) as writer:
        writer.append(
            {"scalar": np.int32(1), "a": {"b": np.float32(1)}, "v": np.zeros(3, np.float32)}
        )
        result["double"] = ctx.call_expecting(
            "Tensor of wrong dtype provided for column ('scalar',). Got double but expected int32.",
            writer.append,
            {"scalar": 1.0},
        )
        result["nested"] = ctx.call_expecting(
            "Tensor of wrong dtype provided for column ('a', 'b'). Got double but expected float.",
            writer.append,
            {"a": {"b": np.float64(1)}},
        )
        result["shape"] = ctx.call_expecting(
            "Tensor of incompatible shape provided for column ('v',). Got [2,2] which is "
            "incompatible with [3].",
            writer.append,
            {"v": np.zeros((2, 2), np.float32)},
        )
    with client.trajectory_writer(2) as writer:
        writer.append([np.int32(1), (np.int32(2),)])
        result["list_path"] = ctx.call_expecting(
            "Tensor of wrong dtype provided for column (1, 0). Got float but expected int32.",
            writer.append,
            [np.int32(1), (np.float32(2),)],
        )
    with client.trajectory_writer(2) as writer:
        writer.append({"x": 1}, partial_step=True)
        result["twice"] = ctx.call_expecting(
            "Field ('x',) has already been set in the active step by previous (partial) "
            "append call and thus must be omitted or set to None",
            writer.append,
            {"x": 2},
        )
        # Programs catch ValueError (dm-reverb raises exactly that).
        result["twice_is_value_error"] = isinstance(
            getattr(result["twice"], "error", None), ValueError
        )
    return result


def scenario_trajectory_writer_history_indices_without_a_cell(ctx):
    """Indices with no cell behind them, before and after the window moves."""
    reverb = ctx.reverb
    _, client = ctx.server([_queue(reverb)])
    result = {}
    with client.trajectory_writer(4) as writer:
        result["before_append"] = ctx.call_expecting(
            "history cannot be accessed before `append` is called at least once.",
            lambda: writer.history,
        )
        for i in range(3):
            writer.append({"x": np.int32(i)})
        history = writer.history["x"]
        result["past_the_end"] = ctx.call(lambda: history[4])
        for index in (-4, -5):
            # A ValueError with dm-reverb's phrase (reverb_tf's is also an
            # IndexError, as for a list: docs/compatibility.md).
            error = ctx.call(lambda index=index: history[index])
            result[f"before_the_first_{index}"] = {
                "value_error": isinstance(error, ValueError),
                "phrase": "TrajectoryColumns cannot contain any None data references" in str(error),
            }
        for i in range(3, 7):
            writer.append({"x": np.int32(i)})
        history = writer.history["x"]
        for index in (0, -5, slice(0, 3)):
            result[f"expired_{index}"] = ctx.call_expecting(
                "TrajectoryColumns cannot contain any None data references",
                lambda index=index: history[index],
            )
        result["window"] = history[-4:].numpy().tolist()
    return result


def scenario_trajectory_writer_signature_check(ctx):
    import tensorflow as tf

    reverb = ctx.reverb
    _, client = ctx.server([_queue(reverb, signature={"a": tf.TensorSpec([2], tf.int32)})])
    with client.trajectory_writer(num_keep_alive_refs=3) as writer:
        for i in range(3):
            writer.append({"a": np.int32(i)})
        ok = ctx.call(writer.create_item, "q", 1.0, {"a": writer.history["a"][-2:]})
        wrong_len = ctx.call(writer.create_item, "q", 1.0, {"a": writer.history["a"][-3:]})
        wrong_struct = ctx.call(writer.create_item, "q", 1.0, [writer.history["a"][-2:]])
        writer.flush()
    return {
        "ok": ok,
        "wrong_len": wrong_len,
        "wrong_struct": wrong_struct,
        "size": client.server_info()["q"].current_size,
    }


def scenario_trajectory_writer_partial_steps_and_episodes(ctx):
    reverb = ctx.reverb
    _, client = ctx.server([_queue(reverb)])
    with client.trajectory_writer(num_keep_alive_refs=4) as writer:
        writer.append({"a": np.int32(0)}, partial_step=True)
        writer.append({"b": np.int32(10)})
        writer.append({"a": np.int32(1), "b": np.int32(11)})
        writer.create_item("q", 1.0, {"a": writer.history["a"][-2:], "b": writer.history["b"][-2:]})
        twice = ctx.call(
            lambda: (
                writer.append({"a": np.int32(2)}, partial_step=True),
                writer.append({"a": np.int32(3)}),
            )
        )
        writer.append({"b": np.int32(12)})  # closes the step left open
        writer.end_episode(clear_buffers=True)
        after_end = {"episode_steps": writer.episode_steps, "len": len(writer.history["a"])}
        writer.append({"a": np.int32(5), "b": np.int32(15)})
        writer.create_item("q", 2.0, {"a": writer.history["a"][-1:], "b": writer.history["b"][-1]})
        writer.flush()
    info = client.server_info()["q"]
    return {
        "twice": twice,
        "after_end": after_end,
        "items": _drain(client, "q", 2),
        "episodes": info.num_episodes,
    }


def scenario_trajectory_writer_flush_timeout(ctx):
    reverb = ctx.reverb
    _, client = ctx.server([reverb.Table.queue("q", 1)])
    writer = client.trajectory_writer(num_keep_alive_refs=1)
    for i in range(3):
        writer.append({"a": np.int32(i)})
        writer.create_item("q", 1.0, writer.history["a"][-1])
    result = ctx.call(writer.flush, timeout_ms=200)
    blocked = ctx.call(writer.end_episode, timeout_ms=100)
    return {"flush": result, "end_episode": blocked}


def scenario_legacy_writer(ctx):
    reverb = ctx.reverb
    _, client = ctx.server([_queue(reverb)])
    with client.writer(max_sequence_length=3) as writer:
        for i in range(4):
            writer.append([np.int64(i), np.full([2], i, np.float32)])
            if i >= 1:
                writer.create_item("q", min(i + 1, 3), float(i))
    items = [next(client.sample("q", emit_timesteps=True)) for _ in range(3)]
    return [[step.data for step in item] for item in items]


def scenario_legacy_writer_errors(ctx):
    reverb = ctx.reverb
    _, client = ctx.server([_queue(reverb)])
    writer = client.writer(max_sequence_length=2)
    writer.append([np.int64(0)])
    result = {
        "too_many_steps": ctx.call(writer.create_item, "q", 3, 1.0),
        "zero_steps": ctx.call(writer.create_item, "q", 0, 1.0),
        "structure_change": ctx.call(writer.append, [np.int64(0), np.int64(1)]),
        "bad_sequence_length": ctx.call(client.writer, 0),
    }
    writer.close()
    result["closed_twice"] = ctx.call(writer.close)
    return result


def scenario_legacy_writer_append_sequence(ctx):
    reverb = ctx.reverb
    _, client = ctx.server([_queue(reverb)])
    with client.writer(max_sequence_length=4) as writer:
        writer.append_sequence([np.arange(4, dtype=np.int32), np.ones([4, 2], np.float32)])
        writer.create_item("q", 4, 1.0)
    return next(client.sample("q", emit_timesteps=False)).data
