# SPDX-License-Identifier: Apache-2.0
"""reverb_tf where TensorFlow is not installed: the core, and JAX and PyTorch programs.

Each test runs a script in the venv `scripts/setup_interop.sh` makes (numpy,
dm-tree, protobuf, absl-py, JAX on the CPU, PyTorch's CPU build; never
TensorFlow) with the package under test, and only it, on the path: this
checkout's in development, the installed wheel's under
scripts/check_wheel.sh. Without that venv these tests fail; they do not
skip.
"""

import os
import subprocess
import textwrap

import numpy as np
import pytest
from integration import side_venv_python

pytestmark = pytest.mark.side_venv(
    reason="scripts/setup_interop.sh's venv: the CPU PyTorch file on disk is for Python 3.11"
)


@pytest.fixture(scope="module")
def interop_python() -> str:
    """The TF-free venv's interpreter (made, or checked, by scripts/setup_interop.sh)."""
    return side_venv_python("REVERB_TF_INTEROP_PYTHON", "setup_interop.sh")


def run_without_tf(
    interop_python: str, package_path: str, script: str, *args: str, timeout: int = 240
) -> str:
    """Runs `script` in the TF-free venv; fails the test with its output unless it exits 0."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONPATH"] = package_path
    env["JAX_PLATFORMS"] = "cpu"
    result = subprocess.run(
        [interop_python, "-c", textwrap.dedent(script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd="/",
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(
            f"exit {result.returncode}\nstdout:\n{result.stdout[-4000:]}\n"
            f"stderr:\n{result.stderr[-4000:]}"
        )
    return result.stdout


# Every script starts with this: it proves TensorFlow cannot be imported and
# that reverb_tf comes from the package under test.
_PRELUDE = """
import importlib.util, sys
assert importlib.util.find_spec("tensorflow") is None, "TensorFlow is installed here"
import numpy as np
import reverb_tf as reverb
"""


def test_core_serves_writes_samples_and_checkpoints(interop_python, package_path, tmp_path):
    out = run_without_tf(
        interop_python,
        package_path,
        _PRELUDE
        + """
import collections, tree
Step = collections.namedtuple("Step", ["obs", "reward"])
signature = Step(obs=reverb.ArraySpec((2, 3), np.float32, "obs"),
                 reward=reverb.ArraySpec((), np.float64))
checkpoints = sys.argv[1]
table = reverb.Table("replay", reverb.selectors.Prioritized(0.8), reverb.selectors.Fifo(), 100,
                     reverb.rate_limiters.MinSize(1), signature=signature)
queue = reverb.Table.queue("queue", 10)
checkpointer = reverb.checkpointers.DefaultCheckpointer(checkpoints)
server = reverb.Server([table, queue], checkpointer=checkpointer)
client = reverb.Client(f"localhost:{server.port}")
info = client.server_info()["replay"]
assert type(info.signature).__name__ == "Step", info.signature
assert info.signature.obs == reverb.ArraySpec((2, 3), np.float32, "obs"), info.signature
# TrajectoryWriter: 2-step items, checked against the signature.
with client.trajectory_writer(num_keep_alive_refs=2) as writer:
    for t in range(5):
        writer.append({"obs": np.full(3, t, np.float32), "reward": float(t)})
        if t >= 1:
            writer.create_item("replay", 1.0 + t, Step(obs=writer.history["obs"][-2:],
                                                    reward=writer.history["reward"][-1]))
# The signature is checked: an int32 observation is refused, naming the column.
with client.trajectory_writer(num_keep_alive_refs=2) as writer:
    writer.append({"obs": np.zeros(3, np.int32), "reward": 0.0})
    writer.append({"obs": np.zeros(3, np.int32), "reward": 0.0})
    try:
        writer.create_item("replay", 1.0, Step(obs=writer.history["obs"][-2:],
                                                reward=writer.history["reward"][-1]))
        writer.flush()
        raise SystemExit("a wrong dtype was accepted")
    except reverb.errors.InvalidArgumentError as e:
        assert "obs" in str(e), e
# The legacy Writer and a StructuredWriter.
with client.writer(max_sequence_length=1) as writer:
    writer.append(np.int64(7))
    writer.create_item("queue", 1, 1.0)
from reverb_tf import structured_writer as sw
ref = sw.create_reference_step({"x": np.zeros(2, np.float32)})
config = sw.create_config(pattern={"x": ref["x"][-2:]}, table="queue",
                          conditions=[sw.Condition.step_index() >= 1])
inferred = sw.infer_signature([config], {"x": reverb.ArraySpec((2,), np.float32)})
assert inferred == {"x": reverb.ArraySpec((2, 2), np.float32, "x")}, inferred
assert sw.unpack_pattern(config) == {"x": config.flat[0]}
writer = client.structured_writer([config])
for t in range(3):
    writer.append({"x": np.full(2, t, np.float32)})
writer.flush()
sample = next(client.sample("replay", emit_timesteps=False, unpack_as_table_signature=True))
assert type(sample.data).__name__ == "Step" and sample.data.obs.shape == (2, 3), sample
queued = [s.data for s in client.sample("queue", num_samples=3, emit_timesteps=False)]
assert np.asarray(queued[0][0]).reshape(-1).tolist() == [7], queued
assert [q[0].shape for q in queued[1:]] == [(2, 2), (2, 2)], queued
client.mutate_priorities("replay", updates={int(sample.info.key): 9.0})
path = client.checkpoint()
server.stop()
restored = reverb.Server([reverb.Table("replay", reverb.selectors.Uniform(),
                                       reverb.selectors.Fifo(), 100,
                                       reverb.rate_limiters.MinSize(1), signature=signature),
                          reverb.Table.queue("queue", 10)],
                         checkpointer=reverb.checkpointers.DefaultCheckpointer(checkpoints))
infos = reverb.Client(f"localhost:{restored.port}").server_info()
sizes = {k: v.current_size for k, v in infos.items()}
assert sizes == {"replay": 4, "queue": 0}, sizes
restored.stop()
print("tensorflow imported:", "tensorflow" in sys.modules)
""",
        str(tmp_path),
    )
    assert "tensorflow imported: False" in out


def test_tensorflow_features_say_which_extra_to_install(interop_python, package_path):
    out = run_without_tf(
        interop_python,
        package_path,
        _PRELUDE
        + """
import importlib
for attempt in [lambda: reverb.TrajectoryDataset, lambda: reverb.TFClient,
                lambda: reverb.ReverbDataset, lambda: reverb.TimestepDataset,
                lambda: reverb.PatternDataset,
                lambda: importlib.import_module("reverb_tf.trajectory_dataset"),
                lambda: importlib.import_module("reverb_tf.tf_client")]:
    try:
        attempt()
        raise SystemExit("no ImportError")
    except ImportError as e:
        assert "reverb-tf[tensorflow-cpu]" in str(e), e
        print("ok:", str(e).split(" needs")[0])
""",
    )
    assert out.count("ok:") == 7, out


def test_server_binary_and_cli_without_tensorflow(interop_python, package_path, package_dir):
    out = run_without_tf(
        interop_python,
        package_path,
        _PRELUDE
        + """
import re, subprocess
from reverb_tf import cli
binary = str(__import__("pathlib").Path(reverb.__file__).parent / "reverb_tf_server")
config = ('port: 0 tables { table_name: "replay" sampler { uniform: true } remover { fifo: true } '
          'max_size: 1000 rate_limiter { samples_per_insert: 1 min_size_to_sample: 1 '
          'min_diff: -1e300 max_diff: 1e300 } }')
process = subprocess.Popen([binary, "--config=" + config],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
try:
    port = int(re.search(r"on port (\\d+)", process.stdout.readline()).group(1))
    client = reverb.Client(f"localhost:{port}")
    with client.trajectory_writer(1) as writer:
        for i in range(3):
            writer.append({"x": np.float32(i)})
            writer.create_item("replay", 1.0, {"x": writer.history["x"][-1]})
    assert cli.main(["info", f"localhost:{port}"]) == 0
    assert cli.main(["bench", f"localhost:{port}", "--table", "replay", "--seconds", "0.3"]) == 0
finally:
    process.terminate()
    process.wait(10)
print("tensorflow imported:", "tensorflow" in sys.modules)
""",
    )
    assert "replay" in out and "items/s" in out, out
    assert "tensorflow imported: False" in out


def test_numpy_dataset_serves_a_jax_training_loop(interop_python, package_path):
    out = run_without_tf(
        interop_python,
        package_path,
        _PRELUDE
        + """
import jax, jax.numpy as jnp
from reverb_tf.interop import jax as reverb_jax
# y = 3x - 1 with noise-free samples; a prioritized table of (x, y) pairs.
signature = {"x": reverb.ArraySpec((1,), np.float32), "y": reverb.ArraySpec((), np.float32)}
table = reverb.Table("replay", reverb.selectors.Prioritized(0.6), reverb.selectors.Fifo(),
                     10_000, reverb.rate_limiters.MinSize(64), signature=signature)
server = reverb.Server([table])
address = f"localhost:{server.port}"
client = reverb.Client(address)
xs = np.linspace(-1, 1, 512, dtype=np.float32)
with client.trajectory_writer(1) as writer:
    for x in xs:
        writer.append({"x": np.array([x], np.float32), "y": np.float32(3 * x - 1)})
        writer.create_item("replay", 1.0, {k: writer.history[k][-1] for k in ("x", "y")})

def loss_fn(params, batch):
    prediction = batch.data["x"][:, 0] * params["w"] + params["b"]
    errors = prediction - batch.data["y"]
    weights = batch.info.importance_weight(0.4)
    return jnp.mean(weights * errors ** 2), jnp.abs(errors)

@jax.jit
def train_step(params, batch):
    (loss, td), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, batch)
    return jax.tree_util.tree_map(lambda p, g: p - 0.3 * g, params, grads), loss, td

params = {"w": jnp.float32(0.0), "b": jnp.float32(0.0)}
dataset = reverb.NumpyDataset(address, "replay", batch_size=64, sampling_stats=True,
                              max_samples=64 * 150)
assert dataset.signature == signature and dataset.batch_size == 64, dataset.signature
losses = []
for batch in reverb_jax.device_put_iterator(dataset):
    assert isinstance(batch.data["x"], jax.Array) and batch.data["x"].shape == (64, 1)
    assert isinstance(batch.info.key, np.ndarray) and batch.info.key.dtype == np.uint64
    params, loss, td = train_step(params, batch)
    losses.append(float(loss))
    client.mutate_priorities("replay", updates=dict(zip(batch.info.key.tolist(),
                                                       (np.asarray(td) + 1e-3).tolist())))
print("batches", len(losses), "first", losses[0], "last", losses[-1])
assert len(losses) == 150, len(losses)
assert losses[-1] < 1e-3 * losses[0], losses[::15]
assert abs(float(params["w"]) - 3) < 0.05 and abs(float(params["b"]) + 1) < 0.05, params
server.stop()
print("tensorflow imported:", "tensorflow" in sys.modules)
""",
    )
    assert "tensorflow imported: False" in out, out


def test_torch_dataset_serves_a_pytorch_training_loop(interop_python, package_path):
    out = run_without_tf(
        interop_python,
        package_path,
        _PRELUDE
        + """
import torch
from reverb_tf.interop import torch as reverb_torch
torch.manual_seed(0)
signature = {"x": reverb.ArraySpec((2,), np.float32), "label": reverb.ArraySpec((), np.int64)}
table = reverb.Table("replay", reverb.selectors.Uniform(), reverb.selectors.Fifo(), 10_000,
                     reverb.rate_limiters.MinSize(64), signature=signature)
server = reverb.Server([table])
address = f"localhost:{server.port}"
rng = np.random.default_rng(0)
with reverb.Client(address).trajectory_writer(1) as writer:
    for _ in range(1000):
        x = rng.standard_normal(2).astype(np.float32)
        writer.append({"x": x, "label": np.int64(x[0] + x[1] > 0)})
        writer.create_item("replay", 1.0, {k: writer.history[k][-1] for k in ("x", "label")})
dataset = reverb_torch.TorchDataset(address, "replay", 128, max_samples=128 * 120)
assert isinstance(dataset, torch.utils.data.IterableDataset)
model = torch.nn.Linear(2, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
losses = []
for batch in torch.utils.data.DataLoader(dataset, batch_size=None):
    assert isinstance(batch.data["x"], torch.Tensor) and batch.data["x"].shape == (128, 2)
    assert batch.data["label"].dtype == torch.int64
    loss = torch.nn.functional.cross_entropy(model(batch.data["x"]), batch.data["label"])
    optimizer.zero_grad(); loss.backward(); optimizer.step()
    losses.append(loss.item())
with torch.no_grad():
    x = torch.from_numpy(rng.standard_normal((500, 2)).astype(np.float32))
    accuracy = (model(x).argmax(1) == (x.sum(1) > 0).long()).float().mean().item()
print("batches", len(losses), "first", losses[0], "last", losses[-1], "accuracy", accuracy)
assert len(losses) == 120 and losses[-1] < 0.5 * losses[0] and accuracy > 0.95
import pickle
assert pickle.loads(pickle.dumps(dataset))._arguments == (address, "replay", 128)
server.stop()
print("tensorflow imported:", "tensorflow" in sys.modules)
""",
    )
    assert "tensorflow imported: False" in out, out


def test_a_signature_made_without_tensorflow_reads_back_as_tf_specs(interop_python, package_path):
    """A TF-free process's table signature, as a process with TF reads it from the server."""
    out = run_without_tf(
        interop_python,
        package_path,
        _PRELUDE
        + """
import collections
from reverb_tf import signatures
Pair = collections.namedtuple("Pair", ["a", "b"])
signature = {"pair": Pair(reverb.ArraySpec((None, 2), np.float32, "a"),
                          reverb.ArraySpec((), np.uint8)),
             "list": [reverb.ArraySpec((3,), np.int64)],
             "text": reverb.ArraySpec((), object)}
print(signatures.flatten_signature(signature)[1].hex())
""",
    )
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from reverb_tf import signatures  # pylint: disable=g-import-not-at-top

    signature = signatures.decode_structure(bytes.fromhex(out.strip().splitlines()[-1]))
    assert signature["pair"].a == tf.TensorSpec((None, 2), tf.float32, "a")
    assert signature["pair"].b == tf.TensorSpec((), tf.uint8)
    assert type(signature["pair"]).__name__ == "Pair"
    assert signature["list"] == [tf.TensorSpec((3,), tf.int64)]
    assert signature["text"] == tf.TensorSpec((), tf.string)


def test_tf_free_encoding_equals_tensorflows():
    """What signatures.encode_structured_value writes, TensorFlow's coder writes too."""
    import collections  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from reverb_tf import signatures  # pylint: disable=g-import-not-at-top

    Step = collections.namedtuple("Step", ["obs", "done"])
    structure = {
        "step": Step(
            tf.TensorSpec((None, 84, 84, 4), tf.uint8, "pixels"), tf.TensorSpec((), tf.bool)
        ),
        "extras": (tf.TensorSpec((2,), tf.float16), [tf.TensorSpec((), tf.string)]),
        "nothing": None,
        "b": tf.TensorSpec((1, 0), tf.complex64),
    }
    ours = signatures.encode_structured_value(structure)
    theirs = tf.__internal__.saved_model.encode_structure(structure)
    assert ours == theirs
    decoded = tf.__internal__.saved_model.decode_proto(ours)
    assert decoded["step"].obs == structure["step"].obs
    # And the TF-free decoder reads TensorFlow's encoding into ArraySpecs.
    plain = signatures._decode_value(theirs)  # pylint: disable=protected-access
    assert plain["step"].obs == signatures.ArraySpec((None, 84, 84, 4), np.uint8, "pixels")
    assert plain["extras"][1] == [signatures.ArraySpec((), object)]
    assert plain["b"].dtype == np.complex64 and plain["nothing"] is None
