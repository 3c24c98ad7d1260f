# SPDX-License-Identifier: Apache-2.0
"""The input patterns of TPU and multi-host training, run on CPU over loopback.

On a TPU pod (or several GPU hosts) the input pipeline runs on each host's
CPU, per worker, often offloaded to the tf.data service, and trained
functions are exported as SavedModels. Each pattern here runs in real
processes that reach one reverb_tf server over loopback, as such a job's
hosts do (docs/tpu_and_multi_host.md):

* two `MultiWorkerMirroredStrategy` workers (`TF_CONFIG`) sample one table
  through `distribute_datasets_from_function` and update priorities from
  their training step;
* a tf.data service dispatcher and worker serve a Reverb dataset to this
  process (the learner), and fail as a user sees it when the worker has not
  registered reverb_tf's ops;
* a SavedModel of `TFClient` and `TFTrajectoryWriter` calls, loaded in a
  fresh process, writes and updates priorities; without reverb_tf's ops
  loading fails.

No TPU is used or needed: the placement of the input pipeline is the same.
"""

import json
import logging
import os
import pathlib
import subprocess
import sys
import textwrap
import time
from typing import Callable, Dict, List

import numpy as np
import pytest
import tensorflow as tf

import reverb_tf as reverb
from integration import port_outside_ephemeral_range
from integration import read_line
from reverb_tf import _ops

# What one child process may take, start to end (TensorFlow's import is most
# of it); a test's children together stay under a minute on 2 loaded cores.
CHILD_TIMEOUT_S = 60.0

# Items of the tables ("x" holds 0 .. ITEMS-1).
ITEMS = 16

# The lines of TensorFlow's C++ logging the children would print are noise.
CHILD_ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")

# The opening of every child: TensorFlow first, then reverb_tf, whose import
# then registers the ops (reverb_tf/_ops.py).
WITH_REVERB = "import tensorflow as tf\nimport reverb_tf\n"
WITHOUT_REVERB = "import tensorflow as tf\n"


def _x_table(name: str = "t") -> reverb.Table:
    return reverb.Table(
        name=name,
        sampler=reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(),
        max_size=1000,
        rate_limiter=reverb.rate_limiters.MinSize(1),
        signature={"x": tf.TensorSpec([], tf.int64)},
    )


def _fill(address: str, table: str = "t", n: int = ITEMS) -> None:
    with reverb.Client(address).trajectory_writer(num_keep_alive_refs=1) as writer:
        for x in range(n):
            writer.append({"x": np.int64(x)})
            writer.create_item(table, 1.0, {"x": writer.history["x"][-1]})
        writer.flush()


def _ports(n: int) -> List[int]:
    ports: List[int] = []
    while len(ports) < n:
        port = port_outside_ephemeral_range()
        if port not in ports:
            ports.append(port)
    return ports


def _priorities(address: str, table: str, count: int) -> Dict[int, float]:
    """Every item's priority as the server holds it, by key.

    The table samples uniformly, so sampling until `count` distinct keys came
    back sees every item (and changes no priority).

    Args:
      address: The server.
      table: The table, which must hold exactly `count` items.
      count: How many items it holds.

    Returns:
      {key: priority}.

    Raises:
      AssertionError: Not all items came back within 20 s.
    """
    client = reverb.Client(address)
    assert client.server_info()[table].current_size == count
    found: Dict[int, float] = {}
    deadline = time.monotonic() + 20
    while len(found) < count:
        assert time.monotonic() < deadline, f"sampled only {len(found)} of {count} items"
        for sample in client.sample(table, num_samples=200, emit_timesteps=False):
            found[int(sample.info.key)] = float(sample.info.priority)
    return found


class Children:
    """Child processes of one test, ended when it ends, whatever happens.

    Each child reads its Python code from `-c`, writes its stderr to a file
    (read back for failure messages) and, for servers, blocks reading stdin:
    closing stdin (or this process dying) ends it.
    """

    def __init__(self, directory: pathlib.Path) -> None:
        self._directory = directory
        self._processes: List[subprocess.Popen] = []
        self._stderr: Dict[int, pathlib.Path] = {}

    def start(self, code: str, *args: str, env: Dict[str, str] = CHILD_ENV) -> subprocess.Popen:
        """Starts `python -c code args...`.

        Args:
          code: The program.
          *args: Its arguments (sys.argv[1:]).
          env: Its environment.

        Returns:
          The process, with pipes for stdin and stdout.
        """
        stderr_path = self._directory / f"child-{len(self._processes)}.stderr"
        with open(stderr_path, "w") as stderr:
            process = subprocess.Popen(
                [sys.executable, "-c", code, *args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                env=env,
            )
        self._processes.append(process)
        self._stderr[process.pid] = stderr_path
        return process

    def stderr(self, process: subprocess.Popen) -> str:
        """The end of a child's stderr, for a failure message."""
        return self._stderr[process.pid].read_text()[-3000:]

    def ready(self, process: subprocess.Popen, what: str) -> None:
        """Waits for a server child's "ready" line; fails with its stderr."""
        line = read_line(process.stdout, f"readiness line of the {what}", CHILD_TIMEOUT_S)
        assert line.strip() == "ready", f"{what}: {line!r}\n{self.stderr(process)}"

    def output(self, process: subprocess.Popen, what: str, deadline: float) -> str:
        """Waits (until `deadline`, a time.monotonic()) for a child to end; its stdout.

        Raises:
          AssertionError: It did not end in time, or failed (with its stderr).
        """
        try:
            out, _ = process.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            raise AssertionError(f"{what} did not finish in time:\n{self.stderr(process)}")
        assert process.returncode == 0, f"{what} failed:\n{self.stderr(process)}"
        return out

    def end_all(self) -> None:
        for process in self._processes:
            if process.poll() is None and process.stdin is not None:
                process.stdin.close()  # servers end on EOF
        for process in self._processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            for pipe in (process.stdin, process.stdout):
                if pipe is not None and not pipe.closed:
                    pipe.close()


@pytest.fixture
def children(tmp_path):
    started = Children(tmp_path)
    yield started
    started.end_all()


# -- MultiWorkerMirroredStrategy ----------------------------------------------

MWMS_WORKER = textwrap.dedent("""
    import json, sys
    import tensorflow as tf
    import reverb_tf as reverb

    address, index, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    strategy = tf.distribute.MultiWorkerMirroredStrategy()  # the cluster of TF_CONFIG


    def dataset_fn(context):
        batch = context.get_per_replica_batch_size(8)
        return reverb.ReverbDataset.from_table_signature(
            address, "t", max_in_flight_samples_per_worker=8).batch(batch)


    iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))
    client = reverb.TFClient(address)


    @tf.function
    def train_step(iterator, step):
        def replica_fn(batch):
            x = batch.data["x"]
            # Each worker updates the items of its parity: every item has one
            # writer, so its last priority is known. Priorities grow with the
            # step: an update lost or applied out of order leaves an older one.
            mine = tf.equal(x % 2, index)
            priorities = tf.cast(tf.boolean_mask(x, mine), tf.float64) + 100.0 * tf.cast(
                step + 1, tf.float64)
            client.update_priorities("t", tf.boolean_mask(batch.info.key, mine), priorities)
            loss = tf.reduce_sum(tf.cast(x, tf.float32))
            total = tf.distribute.get_replica_context().all_reduce(
                tf.distribute.ReduceOp.SUM, loss)
            return x, batch.info.key, total
        return strategy.run(replica_fn, args=(next(iterator),))


    report = []
    for step in range(steps):
        x, keys, total = train_step(iterator, tf.constant(step, tf.int64))
        local = lambda value: strategy.experimental_local_results(value)[0].numpy()
        report.append({"x": local(x).tolist(), "keys": [str(k) for k in local(keys)],
                       "total": float(local(total))})
    print(json.dumps({"replicas": strategy.num_replicas_in_sync, "steps": report}))
""")


def test_multi_worker_mirrored_strategy_samples_on_both_workers_and_loses_no_update(children):
    steps = 5
    with reverb.Server([_x_table()]) as server:
        address = f"localhost:{server.port}"
        _fill(address)
        before = _priorities(address, "t", ITEMS)
        x_of_key = {}
        cluster = {"worker": [f"localhost:{port}" for port in _ports(2)]}
        workers = [
            children.start(
                MWMS_WORKER,
                address,
                str(index),
                str(steps),
                env=dict(
                    CHILD_ENV,
                    TF_CONFIG=json.dumps(
                        {"cluster": cluster, "task": {"type": "worker", "index": index}}
                    ),
                ),
            )
            for index in range(2)
        ]
        deadline = time.monotonic() + 2 * CHILD_TIMEOUT_S
        reports = [
            json.loads(children.output(worker, f"worker {index}", deadline).splitlines()[-1])
            for index, worker in enumerate(workers)
        ]
        expected = dict(before)  # key -> the priority its last update set
        for index, report in enumerate(reports):
            assert report["replicas"] == 2
            assert len(report["steps"]) == steps
            for step, batch in enumerate(report["steps"]):
                assert len(batch["x"]) == 4  # 8 a step across both workers
                for x, key in zip(batch["x"], batch["keys"]):
                    assert 0 <= x < ITEMS
                    assert x_of_key.setdefault(int(key), x) == x  # one item, one key
                    if x % 2 == index:
                        expected[int(key)] = x + 100.0 * (step + 1)
        # Both sampled, from the same table: every key is one the server had.
        for report in reports:
            assert {int(k) for batch in report["steps"] for k in batch["keys"]} <= set(before)
        # The training step's all-reduce spans both workers' batches.
        for step in range(steps):
            both = sum(sum(report["steps"][step]["x"]) for report in reports)
            assert [report["steps"][step]["total"] for report in reports] == [both, both]
        # Every update arrived, the last one of each item last.
        assert expected != before
        assert _priorities(address, "t", ITEMS) == expected


# -- the tf.data service -------------------------------------------------------

DISPATCHER = textwrap.dedent("""
    import sys
    port = int(sys.argv[1])
    dispatcher = tf.data.experimental.service.DispatchServer(
        tf.data.experimental.service.DispatcherConfig(port=port))
    print("ready", flush=True)
    sys.stdin.read()
""")

WORKER = textwrap.dedent("""
    import sys
    port, dispatcher_port = int(sys.argv[1]), int(sys.argv[2])
    worker = tf.data.experimental.service.WorkerServer(
        tf.data.experimental.service.WorkerConfig(
            dispatcher_address=f"localhost:{dispatcher_port}",
            worker_address=f"localhost:{port}", port=port))
    print("ready", flush=True)
    sys.stdin.read()
""")


@pytest.fixture
def data_service(children) -> Callable[[bool], Dict[str, int]]:
    """Starts a tf.data service: a dispatcher and a worker, each its own process.

    Returns a function `start(worker_imports_reverb)`: the dispatcher always
    imports reverb_tf, the worker only if told to. It returns the ports,
    {"dispatcher": ..., "worker": ...}.
    """

    def start(worker_imports_reverb: bool) -> Dict[str, int]:
        dispatcher_port, worker_port = _ports(2)
        dispatcher = children.start(WITH_REVERB + DISPATCHER, str(dispatcher_port))
        worker = children.start(
            (WITH_REVERB if worker_imports_reverb else WITHOUT_REVERB) + WORKER,
            str(worker_port),
            str(dispatcher_port),
        )
        children.ready(dispatcher, "dispatcher")
        children.ready(worker, "worker")
        return {"dispatcher": dispatcher_port, "worker": worker_port}

    return start


def _distributed(address: str, dispatcher_port: int, mode: str) -> tf.data.Dataset:
    dataset = reverb.ReverbDataset.from_table_signature(
        address, "t", max_in_flight_samples_per_worker=4
    ).batch(4)
    return dataset.apply(
        tf.data.experimental.service.distribute(
            processing_mode=mode,
            service=f"grpc://localhost:{dispatcher_port}",
            job_name=f"replay-{mode}",
        )
    )


def test_tf_data_service_serves_a_reverb_dataset_in_parallel_epochs_only(data_service):
    with reverb.Server([_x_table()]) as server:
        address = f"localhost:{server.port}"
        _fill(address)
        keys = set(_priorities(address, "t", ITEMS))
        ports = data_service(worker_imports_reverb=True)

        # parallel_epochs: the worker runs the whole dataset (its own sampling
        # stream) and streams its elements here.
        iterator = iter(_distributed(address, ports["dispatcher"], "parallel_epochs"))
        seen = set()
        for _ in range(5):
            batch = next(iterator)
            assert batch.data["x"].shape == (4,) and batch.info.key.shape == (4,)
            assert set(batch.info.key.numpy().tolist()) <= keys
            assert np.all((batch.data["x"].numpy() >= 0) & (batch.data["x"].numpy() < ITEMS))
            seen.update(batch.data["x"].numpy().tolist())
        assert len(seen) > 1

        # distributed_epoch splits a finite source's elements among workers
        # (each one processed once), through the source's split provider. A
        # table has no elements to split, only samples to draw, so the source
        # has none, and TensorFlow refuses the job when the iterator is made.
        with pytest.raises(
            tf.errors.UnimplementedError,
            match=r"Cannot create split providers for dataset of type "
            r"ReverbTfTrajectoryDataset, because the dataset is not unary",
        ):
            next(iter(_distributed(address, ports["dispatcher"], "distributed_epoch")))


def test_tf_data_service_worker_without_reverb_tf_fails_naming_the_op_and_worker(data_service):
    with reverb.Server([_x_table()]) as server:
        address = f"localhost:{server.port}"
        _fill(address)
        ports = data_service(worker_imports_reverb=False)
        # The learner (this process) has the ops; the worker, which builds
        # the dataset from its graph, has not. TensorFlow's own words reach
        # the learner, with the op's name and the worker's address.
        with pytest.raises(tf.errors.NotFoundError) as failure:
            next(iter(_distributed(address, ports["dispatcher"], "parallel_epochs")))
        message = str(failure.value)
        assert f"Failed to get element from worker localhost:{ports['worker']}" in message
        assert "Op type not registered 'ReverbTfTrajectoryDataset'" in message


# -- SavedModel ----------------------------------------------------------------


class _Actor(tf.Module):
    """What an exported actor-learner holds: a TFClient and a TFTrajectoryWriter."""

    def __init__(self, address: str) -> None:
        super().__init__()
        self.client = reverb.TFClient(address)
        self.writer = reverb.TFTrajectoryWriter(address, num_keep_alive_refs=2)

    @tf.function(input_signature=[tf.TensorSpec([], tf.float32)])
    def act(self, observation):
        """Writes two steps and an item over both."""
        self.writer.append({"obs": observation})
        self.writer.append({"obs": observation + 1.0})
        self.writer.create_item("t", 1.0, {"obs": self.writer.history["obs"][-2:]})
        self.writer.flush()
        return self.writer.episode_steps

    @tf.function(input_signature=[tf.TensorSpec([], tf.int64)])
    def insert(self, x):
        self.client.insert(
            [x], tables=tf.constant(["u"]), priorities=tf.constant([1.0], tf.float64)
        )
        return x

    @tf.function(input_signature=[])
    def sample(self):
        sample = self.client.sample("t", {"obs": tf.float32})
        return sample.info.key, sample.data["obs"]

    @tf.function(
        input_signature=[tf.TensorSpec([None], tf.uint64), tf.TensorSpec([None], tf.float64)]
    )
    def update(self, keys, priorities):
        self.client.update_priorities("t", keys, priorities)
        return keys


LOADER = textwrap.dedent("""
    import json, sys
    try:
        model = tf.saved_model.load(sys.argv[1])
    except Exception as e:  # what the user sees
        print(json.dumps({"error": type(e).__name__, "message": str(e)}))
        sys.exit(0)
    for i in range(3):
        model.act(tf.constant(10.0 * i))
        model.insert(tf.constant(i, tf.int64))
    key, observation = model.sample()
    model.update(tf.reshape(key, [1]), tf.constant([7.5], tf.float64))
    print(json.dumps({"key": str(key.numpy()), "observation": float(observation)}))
""")


@pytest.fixture
def saved_actor(tmp_path):
    """A SavedModel of `_Actor` with a live server at its address; (path, address)."""
    tables = [
        reverb.Table(
            name=name,
            sampler=reverb.selectors.Uniform(),
            remover=reverb.selectors.Fifo(),
            max_size=100,
            rate_limiter=reverb.rate_limiters.MinSize(1),
            signature=signature,
        )
        for name, signature in [
            ("t", {"obs": tf.TensorSpec([2], tf.float32)}),
            # TFClient.insert writes one step, with its time dimension.
            ("u", {"x": tf.TensorSpec([1], tf.int64)}),
        ]
    ]
    with reverb.Server(tables) as server:
        address = f"localhost:{server.port}"
        path = tmp_path / "actor"
        actor = _Actor(address)
        tf.saved_model.save(actor, str(path))
        # Saving wrote nothing: the functions only ran as traces.
        info = reverb.Client(address).server_info()
        assert info["t"].current_size == 0 and info["u"].current_size == 0
        yield str(path), address


def test_saved_model_of_tf_client_and_writer_calls_writes_from_a_fresh_process(
    saved_actor, children
):
    path, address = saved_actor
    loader = children.start(WITH_REVERB + LOADER, path)
    result = json.loads(
        children.output(loader, "loader", time.monotonic() + CHILD_TIMEOUT_S).splitlines()[-1]
    )
    assert "error" not in result, result
    client = reverb.Client(address)
    # The writer the loader made wrote three two-step items...
    stored = {}
    deadline = time.monotonic() + 20
    while len(stored) < 3:
        assert time.monotonic() < deadline, stored
        for sample in client.sample("t", num_samples=50, emit_timesteps=False):
            # Client.sample gives the flat columns: "obs" is the only one.
            stored[int(sample.info.key)] = (sample.data[0].tolist(), float(sample.info.priority))
    assert client.server_info()["t"].current_size == 3
    assert sorted(obs for obs, _ in stored.values()) == [[0.0, 1.0], [10.0, 11.0], [20.0, 21.0]]
    # ...the TFClient inserted three, and the sampled item took its update.
    inserted = {int(s.data[0][0]) for s in client.sample("u", 60, emit_timesteps=False)}
    assert inserted == {0, 1, 2}
    key = int(result["key"])
    assert stored[key][0][0] == result["observation"]
    assert stored[key][1] == 7.5
    assert sorted(priority for _, priority in stored.values()) == [1.0, 1.0, 7.5]


@pytest.mark.parametrize(
    "opening",
    [WITHOUT_REVERB, "import reverb_tf\n" + WITHOUT_REVERB],
    ids=["no_reverb_tf", "reverb_tf_before_tensorflow"],
)
def test_saved_model_without_reverb_tfs_ops_fails_to_load(saved_actor, children, opening):
    # reverb_tf's import registers the ops only where TensorFlow is imported
    # already (it does not import TensorFlow itself): imported before
    # TensorFlow, it leaves them unregistered too (docs/tpu_and_multi_host.md).
    path, address = saved_actor
    loader = children.start(opening + LOADER, path)
    result = json.loads(
        children.output(loader, "loader", time.monotonic() + CHILD_TIMEOUT_S).splitlines()[-1]
    )
    assert result.get("error") == "RuntimeError", result
    assert "Op type not registered 'ReverbTf" in result["message"]
    assert reverb.Client(address).server_info()["t"].current_size == 0


def test_saved_model_loads_after_the_raw_ops_module_registers_them(saved_actor, children):
    # The order-independent way: dm-reverb's module of raw ops loads the
    # library whenever it is imported.
    path, address = saved_actor
    opening = (
        "import reverb_tf\nimport tensorflow as tf\nfrom reverb_tf.cc.ops import gen_reverb_ops\n"
    )
    loader = children.start(opening + LOADER, path)
    result = json.loads(
        children.output(loader, "loader", time.monotonic() + CHILD_TIMEOUT_S).splitlines()[-1]
    )
    assert "error" not in result, result
    assert reverb.Client(address).server_info()["t"].current_size == 3


def test_import_logs_why_the_ops_could_not_register_and_goes_on(tmp_path, monkeypatch, caplog):
    # What `import reverb_tf` runs, with TensorFlow imported, when the library
    # was built for another TensorFlow: the rest of reverb_tf must still
    # import; the log says why graphs with its ops will not run here.
    fake = tmp_path / "_build_info.json"
    fake.write_text(json.dumps({"tensorflow_version": "1.0.0"}))
    with monkeypatch.context() as patch:
        patch.setattr(_ops, "_BUILD_INFO", fake)
        _ops.load.cache_clear()
        try:
            with caplog.at_level(logging.WARNING):
                assert _ops.load_if_tensorflow_is_imported() is False
        finally:
            _ops.load.cache_clear()
    assert "reverb_tf's TensorFlow ops are not registered" in caplog.text
    assert "built for TensorFlow 1.0.0" in caplog.text
    assert _ops.load_if_tensorflow_is_imported() is True
