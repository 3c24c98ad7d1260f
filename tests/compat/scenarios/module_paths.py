# SPDX-License-Identifier: Apache-2.0
"""Module paths of dm-reverb 0.14's wheel beyond the public API: they import
and do what they do there."""

import importlib
import os
import subprocess
import sys
import time

import numpy as np


def _module(ctx, path):
    return importlib.import_module(ctx.reverb.__name__ + "." + path)


def _catch(fn):
    """Like ctx.call, for calls that must raise from inside an except block."""
    try:
        return fn()
    except Exception as e:  # pylint: disable=broad-except
        return e


def scenario_checkpoint_pb2_builds_a_server_config(ctx):
    checkpoint_pb2 = _module(ctx, "cc.checkpointing.checkpoint_pb2")
    schema_pb2 = _module(ctx, "cc.schema_pb2")
    config_pb2 = _module(ctx, "server_executable.reverb_config_pb2")
    from_proto = _module(ctx, "server_executable.server_from_proto")
    table = checkpoint_pb2.PriorityTableCheckpoint(
        table_name="replay",
        max_size=50,
        max_times_sampled=3,
        sampler=schema_pb2.KeyDistributionOptions(
            prioritized=schema_pb2.KeyDistributionOptions.Prioritized(priority_exponent=0.5)
        ),
        remover=schema_pb2.KeyDistributionOptions(fifo=True),
        rate_limiter=checkpoint_pb2.RateLimiterCheckpoint(
            samples_per_insert=2.0, min_diff=-10.0, max_diff=10.0, min_size_to_sample=1
        ),
    )
    config = config_pb2.ReverbServerConfig(tables=[table], port=0)
    tables = from_proto.tables_from_proto(config.tables)
    server, client = ctx.server(tables)
    info = client.server_info()["replay"]
    return {
        "names": sorted(
            n
            for n in ("PriorityTableCheckpoint", "RateLimiterCheckpoint")
            if hasattr(checkpoint_pb2, n)
        ),
        "config": config,
        "round_trip": config_pb2.ReverbServerConfig.FromString(config.SerializeToString()),
        "table": [
            info.name,
            info.max_size,
            info.max_times_sampled,
            info.sampler_options.prioritized.priority_exponent,
            info.remover_options.WhichOneof("distribution"),
            info.rate_limiter_info.samples_per_insert,
            info.rate_limiter_info.min_diff,
            info.rate_limiter_info.max_diff,
            info.rate_limiter_info.min_size_to_sample,
        ],
    }


def scenario_platform_default_modules(ctx):
    checkpointers = _module(ctx, "platform.default.checkpointers")
    ensure = _module(ctx, "platform.default.ensure_tf_install")
    load_op_library = _module(ctx, "platform.default.load_op_library")
    importlib.import_module(ctx.reverb.__name__ + ".platform.default")

    def reraised(error):
        try:
            raise error
        except Exception as e:  # pylint: disable=broad-except
            return _catch(lambda e=e: load_op_library.reraise_wrapped_error(e))

    mismatch = reraised(OSError("lib.so: undefined symbol: _ZN10tensorflow"))
    return {
        "default": type(checkpointers.default_checkpointer()).__name__,
        "default_group": type(checkpointers.default_checkpointer(group="g")).__name__,
        "classes": [
            c.__name__
            for c in (
                checkpointers.CheckpointerBase,
                checkpointers.DefaultCheckpointer,
                checkpointers.TempDirCheckpointer,
            )
        ],
        "is_lib_class": checkpointers.DefaultCheckpointer
        is _module(ctx, "platform.checkpointers_lib").DefaultCheckpointer,
        "ensure_tf_version": ensure.ensure_tf_version(),
        "undefined_symbol": mismatch,
        "undefined_symbol_keeps_original": "_ZN10tensorflow" in str(mismatch),
        "message_is_str": isinstance(load_op_library.UNDEFINED_SYMBOL_ERROR_MESSAGE, str),
        "other_error": reraised(ValueError("something else")),
    }


def scenario_server_main_runs_a_configured_server(ctx):
    import portpicker

    reverb = ctx.reverb
    args = _module(ctx, "platform.default.server_main_command_line_args")
    server_main = _module(ctx, "server_executable.server_main")
    port = portpicker.pick_unused_port()
    config = (
        f'port: {port} tables {{ table_name: "t" sampler {{ fifo: true }} '
        "remover { fifo: true } max_size: 7 "
        "rate_limiter { samples_per_insert: 1.0 min_diff: -1e9 max_diff: 1e9 "
        "min_size_to_sample: 1 } }"
    )
    from absl import flags

    flags.FLAGS(["server_main", f"--config={config}"])
    parsed = args.get_server_config_proto()
    parsed_port = parsed.port == port
    parsed.port = 0  # picked at random
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            reverb.__name__ + ".server_executable.server_main",
            f"--config={config}",
        ],
        cwd="/",
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        client = reverb.Client(f"localhost:{port}")
        deadline = time.monotonic() + 45
        info = None
        while info is None and time.monotonic() < deadline:
            try:
                info = client.server_info(timeout=1)
            except Exception:  # pylint: disable=broad-except
                time.sleep(0.2)
        if info is None:
            return {"__failed__": "server_main did not start"}
        client.insert(np.int32(5), {"t": 1.0})
        sample = next(client.sample("t", emit_timesteps=False)).data
        return {
            "parsed": parsed,
            "parsed_port": parsed_port,
            "callables": [callable(server_main.main), callable(server_main.app_run_main)],
            "tables": sorted(info),
            "max_size": info["t"].max_size,
            "sample": sample,
        }
    finally:
        process.terminate()
        process.wait(timeout=30)


def scenario_gen_reverb_ops_raw_client_ops(ctx):
    import tensorflow as tf

    reverb = ctx.reverb
    ops = _module(ctx, "cc.ops.gen_reverb_ops")
    table = reverb.Table(
        "t",
        sampler=reverb.selectors.Fifo(),
        remover=reverb.selectors.Fifo(),
        max_size=10,
        rate_limiter=reverb.rate_limiters.MinSize(1),
    )
    server, client = ctx.server([table])
    handle = ops.reverb_client(server_address=f"localhost:{server.port}")
    ops.reverb_client_insert(
        handle,
        [tf.constant([1.0, 2.0]), tf.constant(3, tf.int64)],
        tf.constant(["t"]),
        tf.constant([2.5], tf.float64),
    )
    sampled = ops.reverb_client_sample(handle, "t", [tf.float32, tf.int64])
    ops.reverb_client_update_priorities(
        handle, "t", tf.reshape(sampled[0], [1]), tf.constant([9.0], tf.float64)
    )
    raw = ops.ReverbClientSample(handle=handle, table="t", Toutput_list=[tf.float32, tf.int64])
    names = [
        "reverb_client",
        "reverb_client_insert",
        "reverb_client_sample",
        "reverb_client_update_priorities",
        "reverb_pattern_dataset",
        "reverb_timestep_dataset",
        "reverb_trajectory_dataset",
        "ReverbClient",
        "ReverbClientInsert",
        "ReverbClientSample",
        "ReverbClientUpdatePriorities",
        "ReverbPatternDataset",
        "ReverbTimestepDataset",
        "ReverbTrajectoryDataset",
    ]
    return {
        "names": [n for n in names if callable(getattr(ops, n, None))],
        "sampled_type": type(sampled).__name__,
        "sampled_fields": list(getattr(sampled, "_fields", [])),
        "sampled": [len(sampled)] + list(sampled[1:5]) + [sampled[5]],
        "raw_info": list(raw[1:5]),
        "priority_after_update": client.server_info()["t"].current_size,
        "positional_raw_op": ctx.call(ops.ReverbClientSample, handle, "t", [tf.float32]),
        "sampled_priority": float(next(client.sample("t", emit_timesteps=False)).info.priority),
    }


def scenario_gen_reverb_ops_raw_datasets(ctx):
    import tensorflow as tf

    reverb = ctx.reverb
    ops = _module(ctx, "cc.ops.gen_reverb_ops")
    table = reverb.Table(
        "t",
        sampler=reverb.selectors.Fifo(),
        remover=reverb.selectors.Fifo(),
        max_size=10,
        rate_limiter=reverb.rate_limiters.MinSize(1),
    )
    server, client = ctx.server([table])
    with client.trajectory_writer(num_keep_alive_refs=2) as writer:
        for i in range(2):
            writer.append({"x": np.int64(i), "y": np.full([2], i, np.float32)})
        writer.create_item("t", 1.0, {"x": writer.history["x"][-2:], "y": writer.history["y"][-2:]})
    info_dtypes = [tf.uint64, tf.double, tf.int64, tf.double, tf.int32]
    info_shapes = [tf.TensorShape([])] * 5
    address = f"localhost:{server.port}"

    def elements(variant, shapes, n):
        structure = tuple(
            tf.TensorSpec(s, d) for s, d in zip(shapes, info_dtypes + [tf.int64, tf.float32])
        )
        dataset = tf.data.experimental.from_variant(variant, structure)
        return [element[5:] for element in dataset.take(n)]

    item_shapes = info_shapes + [tf.TensorShape([2]), tf.TensorShape([2, 2])]
    step_shapes = info_shapes + [tf.TensorShape([]), tf.TensorShape([2])]
    trajectory = ops.reverb_trajectory_dataset(
        address,
        "t",
        dtypes=info_dtypes + [tf.int64, tf.float32],
        shapes=item_shapes,
        max_in_flight_samples_per_worker=1,
    )
    timesteps = ops.reverb_timestep_dataset(
        address,
        "t",
        dtypes=info_dtypes + [tf.int64, tf.float32],
        shapes=step_shapes,
        max_in_flight_samples_per_worker=1,
        num_workers_per_iterator=1,
    )
    return {
        "trajectory": elements(trajectory, item_shapes, 1),
        "timesteps": elements(timesteps, step_shapes, 3),
    }
