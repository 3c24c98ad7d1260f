# SPDX-License-Identifier: Apache-2.0
"""Objects of the module surface: selectors, limiters, tables, protos, pybind."""


def scenario_tables_and_limiters(ctx):
    reverb = ctx.reverb
    table = reverb.Table(
        "t",
        sampler=reverb.selectors.Prioritized(0.5),
        remover=reverb.selectors.Fifo(),
        max_size=10,
        rate_limiter=reverb.rate_limiters.SampleToInsertRatio(
            samples_per_insert=1.0, min_size_to_sample=2, error_buffer=3.0
        ),
    )
    replaced = table.replace(name="u", max_size=20)
    return {
        "name": table.name,
        "replaced_name": replaced.name,
        "can_insert": [table.can_insert(n) for n in (1, 5, 6, 100)],
        "can_sample": [table.can_sample(n) for n in (1, 2)],
        "queue": reverb.Table.queue("q", 3).name,
        "limiter_errors": {
            "min_size_zero": ctx.call(reverb.rate_limiters.MinSize, 0),
            "spi_negative": ctx.call(reverb.rate_limiters.SampleToInsertRatio, -1.0, 1, 1.0),
            "queue_zero": ctx.call(reverb.rate_limiters.Queue, 0),
        },
        "selector_errors": {
            "negative_exponent": ctx.call(reverb.selectors.Prioritized, -1.0),
        },
    }


def scenario_live_can_insert_and_sample(ctx):
    import numpy as np

    reverb = ctx.reverb
    table = reverb.Table(
        "t",
        sampler=reverb.selectors.Fifo(),
        remover=reverb.selectors.Fifo(),
        max_size=100,
        rate_limiter=reverb.rate_limiters.SampleToInsertRatio(
            samples_per_insert=1.0, min_size_to_sample=2, error_buffer=3.0
        ),
    )
    _, client = ctx.server([table])
    out = []
    for k in range(3):
        client.insert(np.int32(k), {"t": 1.0})
        out.append(
            [[table.can_insert(n) for n in range(1, 7)], [table.can_sample(n) for n in range(1, 6)]]
        )
    info = table.info
    return {"steps": out, "info_size": info.current_size, "info_name": info.name}


def scenario_server_from_proto(ctx):
    from google.protobuf import text_format

    reverb = ctx.reverb
    import importlib

    config_pb2 = importlib.import_module(reverb.__name__ + ".server_executable.reverb_config_pb2")
    from_proto = importlib.import_module(reverb.__name__ + ".server_executable.server_from_proto")
    config = text_format.Parse(
        """
        port: 1234
        tables {
          table_name: "a"
          sampler { prioritized { priority_exponent: 0.6 } }
          remover { fifo: true }
          max_size: 100
          max_times_sampled: 2
          rate_limiter { samples_per_insert: 2.0 min_size_to_sample: 3 min_diff: -10 max_diff: 10 }
        }
        tables {
          table_name: "b"
          sampler { heap { min_heap: true } }
          remover { lifo: true }
          max_size: 5
          rate_limiter { samples_per_insert: 1.0 min_size_to_sample: 1
                         min_diff: -1e9 max_diff: 1e9 }
        }""",
        config_pb2.ReverbServerConfig(),
    )
    tables = from_proto.tables_from_proto(config.tables)
    server, client = ctx.server(tables)
    infos = client.server_info()
    return {
        "port": config.port,
        "tables": {
            name: (
                info.sampler_options,
                info.remover_options,
                info.max_size,
                info.max_times_sampled,
                info.rate_limiter_info.samples_per_insert,
                info.rate_limiter_info.min_diff,
                info.rate_limiter_info.max_diff,
            )
            for name, info in sorted(infos.items())
        },
        "false_fifo": ctx.call(
            from_proto.selector_from_proto, type(config.tables[0].sampler)(fifo=False)
        ),
        "empty": ctx.call(from_proto.selector_from_proto, type(config.tables[0].sampler)()),
    }


def scenario_pybind_names(ctx):
    reverb = ctx.reverb
    pybind = reverb.pybind
    selector = pybind.selector_from_proto(_options(reverb).SerializeToString())
    return {
        "num_info_tensors": pybind.Sampler.NUM_INFO_TENSORS,
        "constant": type(pybind.ConstantChunkerOptions(2, 4)).__name__,
        "autotuned": type(pybind.AutoTunedChunkerOptions(4, 1.0)).__name__,
        "selector_type": isinstance(selector, pybind.ItemSelector),
        "heap_is_selector": isinstance(pybind.HeapSelector(True), pybind.ItemSelector),
        "fifo_is_selector": isinstance(reverb.selectors.Fifo(), pybind.ItemSelector),
    }


def scenario_selector_class_relationships(ctx):
    """Which pybind classes the selectors' instances are (programs dispatch on it)."""
    reverb = ctx.reverb
    pybind, selectors = reverb.pybind, reverb.selectors
    made = {
        "uniform": selectors.Uniform(),
        "prioritized": selectors.Prioritized(0.5),
        "fifo": selectors.Fifo(),
        "lifo": selectors.Lifo(),
        "min_heap": selectors.MinHeap(),
        "max_heap": selectors.MaxHeap(),
    }
    classes = ("ItemSelector", "HeapSelector", "UniformSelector", "PrioritizedSelector")
    classes += ("FifoSelector", "LifoSelector")
    out = {
        name: {cls: isinstance(selector, getattr(pybind, cls)) for cls in classes}
        for name, selector in made.items()
    }
    for name, selector in made.items():
        out[name]["type_name"] = type(selector).__name__
        out[name]["repr"] = repr(selector)
    out["names_are_classes"] = {
        name: isinstance(getattr(selectors, name), type)
        for name in ("Uniform", "Prioritized", "Fifo", "Lifo", "MinHeap", "MaxHeap")
    }
    out["class_names"] = {
        name: getattr(selectors, name).__name__
        for name in ("Uniform", "Prioritized", "Fifo", "Lifo")
    }
    out["prioritized_repr_one"] = repr(selectors.Prioritized(1))
    return out


def scenario_rate_limiter_class_relationships(ctx):
    """The limiters' classes, base classes and reprs."""
    reverb = ctx.reverb
    pybind, limiters = reverb.pybind, reverb.rate_limiters
    made = {
        "min_size": limiters.MinSize(1),
        "ratio": limiters.SampleToInsertRatio(1.0, 1, 2.0),
        "queue": limiters.Queue(3),
        "stack": limiters.Stack(3),
    }
    out = {
        name: {
            "type_name": type(limiter).__name__,
            "bases": [cls.__name__ for cls in type(limiter).__mro__],
            "repr": repr(limiter),
            "is_pybind_rate_limiter": isinstance(limiter, pybind.RateLimiter),
            "is_rate_limiter": isinstance(limiter, limiters.RateLimiter),
        }
        for name, limiter in made.items()
    }
    out["pybind_is_python_class"] = pybind.RateLimiter is limiters.RateLimiter
    return out


def _options(reverb):
    import importlib

    schema = importlib.import_module(reverb.__name__ + ".cc.schema_pb2")
    options = schema.KeyDistributionOptions()
    options.prioritized.priority_exponent = 0.5
    return options


def scenario_replay_sample_types(ctx):
    reverb = ctx.reverb
    info = reverb.SampleInfo(key=1, probability=0.5, table_size=2, priority=1.0, times_sampled=3)
    sample = reverb.ReplaySample(info=info, data=[1])
    import tensorflow as tf

    return {
        "fields": list(reverb.SampleInfo._fields),
        "sample_fields": list(sample._fields),
        "tf_dtypes": reverb.SampleInfo.tf_dtypes(),
        "tf_shapes": [tf.TensorShape(s).as_list() for s in reverb.SampleInfo.tf_shapes()],
        "zeros": reverb.SampleInfo.zeros(),
    }


def scenario_errors_module(ctx):
    reverb = ctx.reverb
    return {
        "deadline_is_reverb_error": issubclass(
            reverb.errors.DeadlineExceededError, reverb.errors.ReverbError
        ),
        "deadline_bases": [
            c.__name__ for c in reverb.DeadlineExceededError.__mro__ if c.__module__ == "builtins"
        ],
    }


def scenario_checkpointers(ctx):
    import os
    import tempfile

    reverb = ctx.reverb
    root = tempfile.mkdtemp()
    checkpointer = reverb.checkpointers.DefaultCheckpointer(root)
    import numpy as np

    server, client = ctx.server([reverb.Table.queue("q", 10)], checkpointer=checkpointer)
    client.insert(np.int32(5), {"q": 1.0})
    path = client.checkpoint()
    server.stop()
    server2, client2 = ctx.server(
        [reverb.Table.queue("q", 10)], checkpointer=reverb.checkpointers.DefaultCheckpointer(root)
    )
    return {
        "path_type": type(path).__name__,
        "under_root": os.path.dirname(path) == root,
        "restored": next(client2.sample("q", emit_timesteps=False)).data,
        "temp": type(reverb.checkpointers.TempDirCheckpointer()).__name__,
    }
