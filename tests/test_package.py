# SPDX-License-Identifier: Apache-2.0
"""What `import reverb_tf` provides, and what it must not do."""

import os
import subprocess
import sys

import pytest

import reverb_tf

DM_REVERB_NAMES = [
    "Client",
    "Writer",
    "Server",
    "Table",
    "ReplaySample",
    "SampleInfo",
    "TrajectoryWriter",
    "TrajectoryColumn",
    "DeadlineExceededError",
    "ReverbError",
    "selectors",
    "rate_limiters",
]


@pytest.mark.parametrize("name", DM_REVERB_NAMES)
def test_public_names_exist(name):
    assert hasattr(reverb_tf, name)


@pytest.mark.parametrize(
    "module",
    [
        "reverb_tf.server",
        "reverb_tf.client",
        "reverb_tf.item_selectors",
        "reverb_tf.selectors",
        "reverb_tf.rate_limiters",
        "reverb_tf.errors",
        "reverb_tf.replay_sample",
        "reverb_tf.trajectory_writer",
    ],
)
def test_module_paths_import(module):
    __import__(module)


def test_module_attributes_mirror_dm_reverb():
    from reverb_tf import client, server, trajectory_writer

    assert client.Client is reverb_tf.Client and client.Writer is reverb_tf.Writer
    assert server.Server is reverb_tf.Server and server.Table is reverb_tf.Table
    assert trajectory_writer.TrajectoryWriter is reverb_tf.TrajectoryWriter
    for name in ["Uniform", "Prioritized", "Fifo", "Lifo", "MinHeap", "MaxHeap"]:
        assert hasattr(reverb_tf.selectors, name)
    for name in ["MinSize", "SampleToInsertRatio", "Queue", "Stack", "RateLimiter"]:
        assert hasattr(reverb_tf.rate_limiters, name)


def test_checkpointers_have_dm_reverb_names():
    from reverb_tf.platform import checkpointers_lib

    for module in (reverb_tf.checkpointers, checkpointers_lib):
        for name in (
            "DefaultCheckpointer",
            "TempDirCheckpointer",
            "default_checkpointer",
            "CheckpointerBase",
        ):
            assert hasattr(module, name), (module, name)
    with pytest.raises(ValueError):
        reverb_tf.checkpointers.DefaultCheckpointer("")
    with pytest.raises(TypeError, match="checkpointer"):
        reverb_tf.Server(
            [
                reverb_tf.Table(
                    "t",
                    reverb_tf.selectors.Uniform(),
                    reverb_tf.selectors.Fifo(),
                    10,
                    reverb_tf.rate_limiters.MinSize(1),
                )
            ],
            checkpointer="/tmp/not-a-checkpointer",
        )


def test_datasets_load_lazily_and_are_one_class():
    code = (
        "import sys, reverb_tf\n"
        "before = 'tensorflow' in sys.modules\n"
        "dataset = reverb_tf.ReverbDataset\n"
        "print(before, 'tensorflow' in sys.modules, dataset is reverb_tf.TrajectoryDataset)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
    ).stdout
    assert out.split() == ["False", "True", "True"]


def test_version():
    assert reverb_tf.__version__ == "0.1.0"


def test_import_does_not_import_tensorflow_or_the_native_module():
    # Importing is light; describing a table loads the native module (the
    # selector and rate-limiter options are native), still not TensorFlow.
    code = (
        "import sys, reverb_tf\n"
        "print('tensorflow' in sys.modules, 'reverb_tf._core' in sys.modules)\n"
        "reverb_tf.Table('t', reverb_tf.selectors.Uniform(), reverb_tf.selectors.Fifo(),"
        " 10, reverb_tf.rate_limiters.MinSize(1))\n"
        "print('tensorflow' in sys.modules, 'reverb_tf._core' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["False", "False", "False", "True"]
