# SPDX-License-Identifier: Apache-2.0
"""TrajectoryColumn built by a program from WeakCellRefs: what it sees."""

import numpy as np


def _writer(ctx):
    reverb = ctx.reverb
    _, client = ctx.server([reverb.Table.queue("q", 100)])
    writer = client.trajectory_writer(num_keep_alive_refs=3)
    for i in range(2):
        writer.append(
            {
                "a": np.int32(i),
                "b": np.float32(10 + i),
                "c": np.int32(20 + i),
                "d": np.full([2], i, np.int32),
            }
        )
    return client, writer


def _drain(client, n):
    return [next(client.sample("q", emit_timesteps=False)).data for _ in range(n)]


def scenario_constructor_validation(ctx):
    reverb = ctx.reverb
    _, writer = _writer(ctx)
    refs = list(writer.history["a"][-2:])
    column = reverb.TrajectoryColumn
    phrase_none = "TrajectoryColumns cannot contain any None data references"
    phrase_squeeze = "Columns must contain exactly one data reference when squeeze set, got"
    result = {
        "none": ctx.call_expecting(phrase_none, column, [refs[0], None], path=("x",)),
        "none_path": ctx.call_expecting(
            "TrajectoryColumn at path ('x', 0) got", column, [None], path=("x", 0)
        ),
        "squeeze_two": ctx.call_expecting(phrase_squeeze + " 2", column, refs, squeeze=True),
        "squeeze_none": ctx.call_expecting(phrase_squeeze + " 0", column, [], squeeze=True),
        "positional_squeeze": ctx.call(column, refs, True),
    }
    empty = column([])
    result["empty"] = {
        "len": len(empty),
        "shape": ctx.call(lambda: empty.shape),
        "dtype": ctx.call(lambda: empty.dtype),
        "numpy": ctx.call_expecting("need at least one array to stack", empty.numpy),
    }
    writer.close()
    return result


def scenario_built_columns_read_and_index(ctx):
    reverb = ctx.reverb
    _, writer = _writer(ctx)
    history = writer.history
    refs = list(history["a"][-2:])
    column = reverb.TrajectoryColumn(refs)
    squeezed = reverb.TrajectoryColumn(refs[-1:], squeeze=True, path=("a",))
    result = {
        "type": type(column).__name__,
        "len": len(column),
        "shape": column.shape,
        "dtype": str(column.dtype),
        "numpy": column.numpy(),
        "is_squeezed": [column.is_squeezed, squeezed.is_squeezed],
        "squeezed": [squeezed.shape, squeezed.numpy(), len(squeezed)],
        "iterated": [(r.numpy(), r.shape, str(r.dtype), r.expired) for r in column],
        "int_index": [column[0].shape, column[0].numpy(), column[0].is_squeezed],
        "negative_index": column[-1].numpy(),
        "slice": [column[1:].shape, column[1:].numpy(), column[1:].is_squeezed],
        "list_index": column[[1, 0, 1]].numpy(),
        "out_of_range": ctx.call(lambda: column[5]),
        "float_index": ctx.call_expecting(
            "TrajectoryColumn indices must be integers or slices", lambda: column[1.0]
        ),
        "from_history_column": reverb.TrajectoryColumn(list(history["d"][-2:])).numpy(),
    }
    # Cells of different columns: readable in both.
    mixed = reverb.TrajectoryColumn([refs[0], list(history["c"][-1:])[0]])
    result["mixed_columns"] = [mixed.shape, str(mixed.dtype), mixed.numpy()]
    mixed_dtypes = reverb.TrajectoryColumn([refs[0], list(history["b"][-1:])[0]])
    result["mixed_dtypes"] = [mixed_dtypes.shape, str(mixed_dtypes.dtype), mixed_dtypes.numpy()]
    mixed_shapes = reverb.TrajectoryColumn([refs[0], list(history["d"][-1:])[0]])
    result["mixed_shapes"] = [
        mixed_shapes.shape,
        str(mixed_shapes.dtype),
        ctx.call(mixed_shapes.numpy),
    ]
    writer.close()
    return result


def scenario_built_columns_make_items(ctx):
    reverb = ctx.reverb
    client, writer = _writer(ctx)
    history = writer.history
    refs = list(history["a"][-2:])
    writer.create_item(
        "q",
        1.0,
        {
            "a": reverb.TrajectoryColumn(refs),
            "b": reverb.TrajectoryColumn(list(history["b"][-1:]), squeeze=True),
            "d": reverb.TrajectoryColumn(list(history["d"][-2:]))[[1, 0]],
        },
    )
    # A column cut from a built column.
    writer.create_item("q", 2.0, reverb.TrajectoryColumn(refs)[-1])
    writer.flush()
    items = _drain(client, 2)
    writer.close()
    return items


def scenario_built_columns_rejected_by_create_item(ctx):
    reverb = ctx.reverb
    _, writer = _writer(ctx)
    history = writer.history
    ref_a = list(history["a"][-1:])[0]
    result = {
        "different_dtypes": ctx.call_expecting(
            "Column references tensors with different dtypes:",
            writer.create_item,
            "q",
            1.0,
            reverb.TrajectoryColumn([ref_a, list(history["b"][-1:])[0]]),
        ),
        "incompatible_shapes": ctx.call_expecting(
            "Column references tensors with incompatible shapes:",
            writer.create_item,
            "q",
            1.0,
            reverb.TrajectoryColumn([ref_a, list(history["d"][-1:])[0]]),
        ),
        "empty_column": ctx.call_expecting(
            "trajectory must not be empty.",
            writer.create_item,
            "q",
            1.0,
            {"x": reverb.TrajectoryColumn([])},
        ),
        "not_a_column": ctx.call_expecting(
            "All leaves of `trajectory` must be `TrajectoryColumn` but got",
            writer.create_item,
            "q",
            1.0,
            {"x": np.int32(1)},
        ),
    }
    old = reverb.TrajectoryColumn(list(history["a"][-2:]))
    old_ref = list(old)[0]
    writer.end_episode(clear_buffers=True)
    writer.append({"a": np.int32(5)})
    result["cleared_in_item"] = ctx.call_expecting(
        "Column contains expired CellRef.", writer.create_item, "q", 1.0, old
    )
    result["cleared_numpy"] = ctx.call_expecting(
        "Cannot convert TrajectoryColumn with expired data references to numpy array.", old.numpy
    )
    result["cleared_ref_numpy"] = ctx.call_expecting(
        "Cannot access data from expired WeakCellRef", old_ref.numpy
    )
    result["cleared_ref_expired"] = old_ref.expired
    writer.close()
    return result
