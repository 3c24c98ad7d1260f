# SPDX-License-Identifier: Apache-2.0
"""ReverbDataset / TrajectoryDataset: a table as a tf.data source (C++ kernel)."""

import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

import reverb_tf as reverb
from integration import wait_until
from reverb_tf import _ops

# Every test twice: over gRPC and in-process (conftest.py).
BOTH_TRANSPORTS = True


def _table(name="t", signature=None, limiter=None, max_times_sampled=0, sampler=None):
    return reverb.Table(
        name=name,
        sampler=sampler or reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(),
        max_size=10_000,
        rate_limiter=limiter or reverb.rate_limiters.MinSize(1),
        max_times_sampled=max_times_sampled,
        signature=signature,
    )


OBS = {"obs": tf.TensorSpec([3, 4], tf.float32), "action": tf.TensorSpec([], tf.int32)}


def _fill(client, table="t", steps=20):
    with client.trajectory_writer(num_keep_alive_refs=3) as writer:
        for t in range(steps):
            writer.append({"obs": np.full(4, t, np.float32), "action": np.int32(t)})
            if t >= 2:
                writer.create_item(
                    table,
                    1.0,
                    {"obs": writer.history["obs"][-3:], "action": writer.history["action"][-1]},
                )
        writer.flush()


@pytest.fixture
def server():
    with reverb.Server([_table(signature=OBS)]) as srv:
        _fill(reverb.Client(f"localhost:{srv.port}"))
        yield srv


def _address(srv):
    return f"localhost:{srv.port}"


def _check(sample):
    obs = sample.data["obs"].numpy()
    # Three consecutive steps; the action is the last step's index.
    assert obs.shape == (3, 4)
    assert np.all(obs[1] == obs[0] + 1) and np.all(obs[2] == obs[0] + 2)
    assert int(sample.data["action"]) == int(obs[2, 0])


def test_eager_iteration_yields_replay_samples(server):
    ds = reverb.ReverbDataset.from_table_signature(_address(server), "t", 16)
    assert reverb.TrajectoryDataset is reverb.ReverbDataset
    assert ds.element_spec.data == OBS
    keys = set()
    for sample in ds.take(50):
        _check(sample)
        assert sample.info.table_size.numpy() == 18
        assert sample.info.probability.numpy() == pytest.approx(1 / 18)
        assert sample.info.times_sampled.numpy() >= 1
        keys.add(int(sample.info.key))
    assert len(keys) > 5  # uniform over 18 items


def test_tf_function_loop_batch_prefetch_and_parallel_map(server):
    ds = reverb.TrajectoryDataset.from_table_signature(_address(server), "t", 64)
    ds = ds.map(lambda s: s.data["obs"] * 2.0, num_parallel_calls=2).batch(8).prefetch(2)

    @tf.function
    def total(dataset):
        acc = tf.constant(0.0)
        for batch in dataset.take(5):
            acc += tf.reduce_sum(batch[:, 1] - batch[:, 0])  # each row differs by 2
        return acc

    assert float(total(ds)) == pytest.approx(5 * 8 * 4 * 2.0)


def test_elements_held_across_many_later_elements_keep_their_values():
    """Small element tensors come from a pool of blocks that released tensors
    return to (kernels/element_tensor.h): a tensor still held must never get a
    block back, whichever thread releases the others and however many are out
    at once (more than the pool keeps, so some go back to malloc)."""
    signature = {
        "obs": tf.TensorSpec([4], tf.float32),  # pooled
        "action": tf.TensorSpec([], tf.int64),  # pooled
        "wide": tf.TensorSpec([100], tf.float32),  # 400 bytes: TensorFlow's
    }
    with reverb.Server([_table(signature=signature)]) as srv:
        with reverb.Client(_address(srv)).trajectory_writer(1) as writer:
            for t in range(200):
                writer.append(
                    {
                        "obs": np.full(4, t, np.float32),
                        "action": np.int64(t),
                        "wide": np.arange(100, dtype=np.float32) + t,
                    }
                )
                writer.create_item("t", 1.0, {k: writer.history[k][-1] for k in signature})

        def consistent(sample) -> bool:
            t = int(sample.data["action"])
            return (
                np.all(sample.data["obs"].numpy() == t)
                and np.array_equal(sample.data["wide"].numpy(), np.arange(100) + t)
                and int(sample.info.key) != 0
                and 0 < float(sample.info.probability) <= 1
                and int(sample.info.table_size) == 200
            )

        def read(n: int, into: list) -> None:
            dataset = reverb.TrajectoryDataset.from_table_signature(_address(srv), "t", 64)
            into.extend(dataset.take(n))  # list.extend: atomic under the GIL

        # Two readers at once (each element ~8 pooled tensors: 5,000 elements
        # hold more blocks than the pool keeps) ...
        held = []
        readers = [threading.Thread(target=read, args=(2500, held)) for _ in range(2)]
        for thread in readers:
            thread.start()
        for thread in readers:
            thread.join()
        assert len(held) == 5000
        failures = [s for s in held if not consistent(s)]
        # ... then one thread releases half of them while another reads more,
        # into the blocks being released; the elements still held are unchanged.
        released, kept, more = held[::2], held[1::2], []
        del held
        threads = [
            threading.Thread(target=released.clear),
            threading.Thread(target=read, args=(3000, more)),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(more) == 3000
        failures += [s for s in kept + more if not consistent(s)]
        assert not failures, f"{len(failures)} elements changed"


def test_graph_mode_with_compat_v1(server):
    address = _address(server)
    graph = tf.Graph()
    with graph.as_default():
        ds = reverb.TrajectoryDataset.from_table_signature(address, "t", 8)
        element = tf.compat.v1.data.make_one_shot_iterator(ds).get_next()
        with tf.compat.v1.Session(graph=graph) as session:
            for _ in range(3):
                value = session.run(element)
                assert value.data["obs"].shape == (3, 4)


def test_mirrored_strategy_distribute_datasets_from_function():
    # Logical devices must be set up before TF initializes: a fresh process.
    code = textwrap.dedent("""
        import numpy as np
        import tensorflow as tf
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        import reverb_tf as reverb

        spec = {"obs": tf.TensorSpec([3, 4], tf.float32)}
        table = reverb.Table(name="t", sampler=reverb.selectors.Uniform(),
                             remover=reverb.selectors.Fifo(), max_size=100,
                             rate_limiter=reverb.rate_limiters.MinSize(1), signature=spec)
        with reverb.Server([table]) as server:
            address = f"localhost:{server.port}"
            with reverb.Client(address).trajectory_writer(num_keep_alive_refs=3) as writer:
                for t in range(10):
                    writer.append({"obs": np.full(4, t, np.float32)})
                    if t >= 2:
                        writer.create_item("t", 1.0, {"obs": writer.history["obs"][-3:]})
                writer.flush()
            strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])

            def dataset_fn(context):
                batch = context.get_per_replica_batch_size(8)
                return reverb.TrajectoryDataset.from_table_signature(address, "t", 16).batch(batch)

            distributed = strategy.distribute_datasets_from_function(dataset_fn)

            @tf.function
            def step(batch):
                return tf.reduce_sum(batch.data["obs"][:, 2] - batch.data["obs"][:, 0])

            iterator = iter(distributed)
            for _ in range(3):
                per_replica = strategy.run(step, args=(next(iterator),))
                total = strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
                assert float(total) == 8 * 4 * 2.0, float(total)
            assert strategy.num_replicas_in_sync == 2
        print("OK")
    """)
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=180,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("OK")


def test_every_dtype_round_trips():
    values = {
        "f16": np.float16(1.5),
        "f32": np.float32(2.5),
        "f64": np.float64(3.5),
        "i8": np.int8(-4),
        "i16": np.int16(-5),
        "i32": np.int32(-6),
        "i64": np.int64(-7),
        "u8": np.uint8(8),
        "u16": np.uint16(9),
        "u32": np.uint32(10),
        "u64": np.uint64(11),
        "b": np.bool_(True),
        "c64": np.complex64(1 + 2j),
        "c128": np.complex128(3 - 4j),
        "s": np.array(b"bytes\x00with nul", dtype=object),
        "nested": {"m": np.arange(6, dtype=np.float32).reshape(2, 3)},
    }
    signature = tf.nest.map_structure(
        lambda v: tf.TensorSpec(
            np.shape(v),
            tf.string if np.asarray(v).dtype == object else tf.as_dtype(np.asarray(v).dtype),
        ),
        values,
    )
    with reverb.Server([_table(signature=signature)]) as srv:
        client = reverb.Client(_address(srv))
        with client.trajectory_writer(num_keep_alive_refs=1) as writer:
            writer.append(values)
            writer.create_item("t", 1.0, tf.nest.map_structure(lambda c: c[-1], writer.history))
            writer.flush()
        sample = next(iter(reverb.TrajectoryDataset.from_table_signature(_address(srv), "t", 1)))
        got = tf.nest.map_structure(lambda t: t.numpy(), sample.data)
        for path, want in [
            ("f16", values["f16"]),
            ("c128", values["c128"]),
            ("u64", values["u64"]),
        ]:
            assert got[path] == want and got[path].dtype == np.asarray(want).dtype
        assert got["s"] == b"bytes\x00with nul"
        np.testing.assert_array_equal(got["nested"]["m"], values["nested"]["m"])
        for key in ["f32", "f64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "b", "c64"]:
            assert got[key] == values[key], key


def test_variable_length_trajectories():
    signature = {"x": tf.TensorSpec([None], tf.int64)}
    with reverb.Server([_table(signature=signature)]) as srv:
        client = reverb.Client(_address(srv))
        with client.trajectory_writer(num_keep_alive_refs=5) as writer:
            for t in range(5):
                writer.append({"x": np.int64(t)})
            for length in (1, 3, 5):
                writer.create_item("t", 1.0, {"x": writer.history["x"][-length:]})
            writer.flush()
        ds = reverb.TrajectoryDataset.from_table_signature(_address(srv), "t", 4)
        assert ds.element_spec.data["x"].shape.as_list() == [None]
        lengths = {int(s.data["x"].shape[0]) for s in ds.take(60)}
        assert lengths == {1, 3, 5}


def test_rate_limiter_timeout_ends_the_dataset_cleanly():
    with reverb.Server([_table(signature=OBS, limiter=reverb.rate_limiters.MinSize(100))]) as srv:
        _fill(reverb.Client(_address(srv)))  # 18 items < 100: sampling stays blocked
        ds = reverb.TrajectoryDataset.from_table_signature(
            _address(srv), "t", 4, rate_limiter_timeout_ms=200
        )
        start = time.monotonic()
        assert list(ds) == []
        assert time.monotonic() - start < 10


def test_max_samples_ends_each_iterator_and_max_samples_per_stream_does_not(server):
    ds = reverb.TrajectoryDataset.from_table_signature(_address(server), "t", 4, max_samples=7)
    assert len(list(ds)) == 7
    assert len(list(ds)) == 7  # a new iterator, a new stream
    # As in dm-reverb, max_samples_per_stream only makes the iterator open a
    # new stream after that many samples; the iterator goes on.
    ds = reverb.TrajectoryDataset.from_table_signature(
        _address(server), "t", 4, max_samples_per_stream=7
    )
    assert len(list(ds.take(30))) == 30


def _await_blocked_sample(srv: reverb.Server) -> None:
    """Waits until a sample waits in table t's rate limiter: GetNext is blocked."""
    info = srv.localhost_client().server_info
    wait_until(
        lambda: info()["t"].rate_limiter_info.sample_stats.pending > 0,
        "a sample waits in the rate limiter",
    )


def test_server_stopping_under_a_blocked_get_next_fails_it_promptly():
    with reverb.Server([_table(signature=OBS)]) as srv:  # empty table: GetNext blocks
        ds = reverb.TrajectoryDataset.from_table_signature(_address(srv), "t", 4)
        result = {}

        def consume():
            try:
                next(iter(ds))
                result["outcome"] = "returned"
            except (tf.errors.CancelledError, tf.errors.UnavailableError) as e:
                result["outcome"] = type(e).__name__

        thread = threading.Thread(target=consume)
        thread.start()
        _await_blocked_sample(srv)
        start = time.monotonic()
        srv.stop()  # the server goes away under a blocked GetNext
        thread.join(timeout=15)
        assert not thread.is_alive(), "GetNext hung after the server stopped"
        assert result["outcome"] != "returned"
        assert time.monotonic() - start < 10


def test_cancelled_step_in_a_subprocess_does_not_hang():
    code = textwrap.dedent("""
        import threading, time
        import tensorflow as tf
        import reverb_tf as reverb
        spec = {"x": tf.TensorSpec([], tf.int32)}
        table = reverb.Table(name="t", sampler=reverb.selectors.Uniform(),
                             remover=reverb.selectors.Fifo(), max_size=10,
                             rate_limiter=reverb.rate_limiters.MinSize(1), signature=spec)
        server = reverb.Server([table])
        ds = reverb.TrajectoryDataset.from_table_signature(f"localhost:{server.port}", "t", 4)
        iterator = iter(ds)
        threading.Timer(0.5, lambda: None).start()
        start = time.monotonic()
        del iterator  # never started: deleting must not block
        print("deleted", round(time.monotonic() - start, 2))
        server.stop()
    """)
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert float(result.stdout.split()[-1]) < 5


def test_signature_problems_are_reported_at_construction():
    with reverb.Server([_table(signature=None)]) as srv:
        with pytest.raises(ValueError, match="does not have a signature"):
            reverb.TrajectoryDataset.from_table_signature(_address(srv), "t", 4)
        with pytest.raises(
            reverb.errors.InvalidArgumentError, match="does not contain any table named nope"
        ):
            reverb.TrajectoryDataset.from_table_signature(_address(srv), "nope", 4)
    with pytest.raises(ValueError, match="max_in_flight_samples_per_worker"):
        reverb.TrajectoryDataset("localhost:1", "t", {"x": tf.int32}, {"x": [2]}, 0)
    # What names no dtype: dm-reverb's op's words for its `dtypes` attribute.
    for cls, shapes in ((reverb.TrajectoryDataset, [None]), (reverb.TimestepDataset, [])):
        for bad in (None, "nonsense"):
            with pytest.raises(
                TypeError, match=f"Expected DataType for argument 'dtypes' not {bad!r}"
            ):
                cls("localhost:1", "t", bad, tf.TensorShape(shapes), 4)


def test_mismatching_explicit_dtypes_fail_when_the_iterator_is_made(server):
    ds = reverb.TrajectoryDataset(
        _address(server),
        "t",
        shapes={"action": [], "obs": [3, 4]},
        dtypes={"action": tf.int64, "obs": tf.float32},
        max_in_flight_samples_per_worker=4,
    )
    # Checked against the table's signature as dm-reverb does, in its words,
    # before any read takes an item from the table.
    message = (
        r"Requested incompatible tensor at flattened index 0 from table 't'\.  "
        r"Requested \(dtype, shape\): \(int64, \[\]\)\.  "
        r"Signature \(dtype, shape\): \(int32, \[\]\)\.  "
        r"Table signature: 0: Tensor<name: 'action', dtype: int32, shape: \[\]>, "
        r"1: Tensor<name: 'obs', dtype: float, shape: \[3,4\]>"
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        iter(ds)
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match="Inconsistent number of tensors requested from table 't'.  Requested 1 tensors, "
        "but table signature shows 2 tensors",
    ):
        iter(reverb.TrajectoryDataset(_address(server), "t", tf.int32, tf.TensorShape([]), 4))


@pytest.mark.parametrize("cls", [reverb.TrajectoryDataset, reverb.TimestepDataset])
def test_a_spec_the_signature_rules_out_takes_no_item_from_a_queue(cls):
    queue = reverb.Table.queue("q", 10, signature=tf.TensorSpec([], tf.int32))
    with reverb.Server([queue]) as srv:
        client = reverb.Client(_address(srv))
        for i in range(3):
            client.insert(np.int32(i), {"q": 1.0})
        for dtype, shape in [(tf.float32, []), (tf.int32, [3])]:
            ds = cls(_address(srv), "q", dtype, tf.TensorShape(shape), 1)
            with pytest.raises(tf.errors.InvalidArgumentError, match="Requested incompatible"):
                iter(ds)
        assert client.server_info()["q"].current_size == 3


def test_a_one_step_item_read_as_a_scalar_fails_in_dm_reverbs_words():
    """TFClient.insert keeps a time dimension of 1; a dataset that asks for
    the signature's scalar gets dm-reverb's message naming both shapes."""
    with reverb.Server([_table("q", signature=tf.TensorSpec([], tf.int32))]) as srv:
        reverb.Client(_address(srv)).insert(np.int32(3), {"q": 1.0})
        ds = reverb.TrajectoryDataset(
            _address(srv),
            "q",
            dtypes=tf.int32,
            shapes=tf.TensorShape([]),
            max_in_flight_samples_per_worker=1,
        )
        message = (
            r"Received incompatible tensor at flattened index 0 from table 'q'\.  "
            r"Specification has \(dtype, shape\): \(int32, \[\]\)\.  "
            r"Tensor has \(dtype, shape\): \(int32, \[1\]\)\."
        )
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            next(iter(ds))


def test_dataset_survives_graph_serialization(server):
    ds = reverb.TrajectoryDataset.from_table_signature(_address(server), "t", 4).batch(2)
    graph_def = tf.raw_ops.DatasetToGraphV2(input_dataset=ds._variant_tensor)
    assert b"ReverbTfTrajectoryDataset" in graph_def.numpy()
    # Rebuild it from the graph (what tf.data rewrites and tf.distribute do).
    restored = tf.data.experimental.from_variant(
        tf.raw_ops.DatasetFromGraph(graph_def=graph_def), ds.element_spec
    )
    batch = next(iter(restored))
    assert batch.data["obs"].shape == (2, 3, 4)


def test_server_dying_mid_stream_surfaces_a_tf_error():
    with reverb.Server([_table(signature=OBS)]) as srv:
        _fill(reverb.Client(_address(srv)))
        iterator = iter(reverb.TrajectoryDataset.from_table_signature(_address(srv), "t", 2))
        _check(next(iterator))
    with pytest.raises((tf.errors.UnavailableError, tf.errors.CancelledError)):
        for _ in range(100):
            next(iterator)


def _load_with_build_info(tmp_path, monkeypatch, tensorflow_version):
    fake = tmp_path / "_build_info.json"
    fake.write_text(json.dumps({"tensorflow_version": tensorflow_version}))
    monkeypatch.setattr(_ops, "_BUILD_INFO", fake)
    _ops.load.cache_clear()
    try:
        return _ops.load()
    finally:
        _ops.load.cache_clear()


def test_op_library_refuses_another_tensorflow(tmp_path, monkeypatch):
    info = json.loads(_ops._BUILD_INFO.read_text())
    # Built for this TensorFlow (a wheel may run on another patch release).
    assert info["tensorflow_version"].split(".")[:2] == tf.__version__.split(".")[:2]
    major, minor = tf.__version__.split(".")[:2]
    for other in ["1.0.0", f"{major}.{int(minor) + 1}.0", f"{major}.{int(minor) - 1}.0"]:
        with pytest.raises(ImportError, match=f"built for TensorFlow {other}.*Rebuild"):
            _load_with_build_info(tmp_path, monkeypatch, other)


def test_op_library_accepts_another_patch_release(tmp_path, monkeypatch):
    major, minor = tf.__version__.split(".")[:2]
    ops = _load_with_build_info(tmp_path, monkeypatch, f"{major}.{minor}.99")
    assert hasattr(ops, "reverb_tf_insert")


def test_timestep_dataset_splits_items_into_steps():
    with reverb.Server([_table(signature=None)]) as srv:
        client = reverb.Client(_address(srv))
        with client.trajectory_writer(num_keep_alive_refs=4) as writer:
            for t in range(4):
                writer.append({"obs": np.full(2, t, np.float32), "t": np.int32(t)})
            writer.create_item(
                "t", 1.0, {"obs": writer.history["obs"][-4:], "t": writer.history["t"][-4:]}
            )
            writer.flush()
        ds = reverb.TimestepDataset(
            _address(srv),
            "t",
            dtypes={"obs": tf.float32, "t": tf.int32},
            shapes={"obs": tf.TensorShape([2]), "t": tf.TensorShape([])},
            max_in_flight_samples_per_worker=2,
            max_samples=1,
        )
        assert ds.element_spec.data["obs"].shape == (2,)
        steps = list(ds)
        assert [int(s.data["t"]) for s in steps] == [0, 1, 2, 3]
        assert len({int(s.info.key) for s in steps}) == 1  # one item, its info repeated
        np.testing.assert_array_equal(steps[2].data["obs"].numpy(), [2.0, 2.0])


def test_timestep_dataset_from_a_single_step_signature():
    signature = {"x": tf.TensorSpec([3], tf.float32)}
    with reverb.Server([_table(signature=signature)]) as srv:
        client = reverb.Client(_address(srv))
        with client.trajectory_writer(num_keep_alive_refs=1) as writer:
            for i in range(5):  # single-step items, stored without a time dimension
                writer.append({"x": np.full(3, i, np.float32)})
                writer.create_item("t", 1.0, {"x": writer.history["x"][-1]})
            writer.flush()
        ds = reverb.TimestepDataset.from_table_signature(_address(srv), "t", 4, max_samples=20)
        values = [float(s.data["x"][0]) for s in ds]
        assert len(values) == 20 and set(values) <= {0.0, 1.0, 2.0, 3.0, 4.0}


def test_closing_a_session_cancels_a_blocked_get_next():
    # Cancelling the step must reach the kernel's cancellation callback: a
    # GetNext blocked on an empty table returns at once, not when data comes.
    with reverb.Server([_table(signature=OBS)]) as srv:
        graph = tf.Graph()
        with graph.as_default():
            ds = reverb.TrajectoryDataset.from_table_signature(_address(srv), "t", 4)
            element = tf.compat.v1.data.make_one_shot_iterator(ds).get_next()
        session = tf.compat.v1.Session(graph=graph)
        outcome = {}

        def run():
            try:
                session.run(element)
                outcome["result"] = "returned"
            except tf.errors.CancelledError:
                outcome["result"] = "cancelled"

        thread = threading.Thread(target=run)
        thread.start()
        _await_blocked_sample(srv)
        start = time.monotonic()
        session.close()
        thread.join(timeout=10)
        assert not thread.is_alive(), "the blocked GetNext ignored the cancellation"
        assert outcome["result"] == "cancelled"
        assert time.monotonic() - start < 5
        assert srv.localhost_client().server_info()["t"].current_size == 0


def test_dataset_waits_a_bounded_time_for_a_server_that_is_starting():
    import portpicker  # pylint: disable=g-import-not-at-top

    port = portpicker.pick_unused_port()
    ds = reverb.TrajectoryDataset(
        f"localhost:{port}",
        "t",
        shapes={"x": tf.TensorShape([])},
        dtypes={"x": tf.int32},
        max_in_flight_samples_per_worker=2,
    )
    holder = {}

    def start_later():
        time.sleep(0.3)  # no server for a while: the dataset must retry, not fail
        server = reverb.Server([_table(signature={"x": tf.TensorSpec([], tf.int32)})], port=port)
        client = reverb.Client(f"localhost:{port}")
        with client.trajectory_writer(num_keep_alive_refs=1) as writer:
            writer.append({"x": np.int32(7)})
            writer.create_item("t", 1.0, {"x": writer.history["x"][-1]})
            writer.flush()
        holder["server"] = server

    thread = threading.Thread(target=start_later)
    thread.start()
    try:
        sample = next(iter(ds))  # first attempts fail: nothing listens yet
        assert int(sample.data["x"]) == 7
    finally:
        thread.join()
        holder["server"].stop()


def test_dataset_gives_up_on_an_absent_server():
    import portpicker  # pylint: disable=g-import-not-at-top

    ds = reverb.TrajectoryDataset(
        f"localhost:{portpicker.pick_unused_port()}",
        "t",
        shapes={"x": tf.TensorShape([])},
        dtypes={"x": tf.int32},
        max_in_flight_samples_per_worker=2,
    )
    start = time.monotonic()
    with pytest.raises(tf.errors.UnavailableError):
        next(iter(ds))
    assert time.monotonic() - start < 10  # 5 attempts, backoff 0.1+0.2+0.4+0.8 s
