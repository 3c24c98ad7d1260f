# SPDX-License-Identifier: Apache-2.0
"""reverb_tf: a TensorFlow-native experience replay system.

The public API mirrors dm-reverb 0.14, name for name, so that

    import reverb_tf as reverb

runs existing Reverb code. TensorFlow is optional: importing this package
does not import it, and everything but the TensorFlow-native features (the
datasets, `TFClient`) works without it installed; `NumpyDataset` and
`reverb_tf.interop` read tables for numpy, JAX and PyTorch programs. The
native module is loaded by the first Server, Client or writer. In a process
that has imported TensorFlow already, the import registers reverb_tf's
TensorFlow ops (as dm-reverb's does), so that graphs holding them run there.
"""

import sys as _sys

from reverb_tf import _ops
from reverb_tf import batched_trajectory_writer
from reverb_tf import cc
from reverb_tf import checkpointers
from reverb_tf import client
from reverb_tf import errors
from reverb_tf import item_selectors
from reverb_tf import item_selectors as selectors
from reverb_tf import numpy_dataset
from reverb_tf import platform
from reverb_tf import rate_limiters
from reverb_tf import replay_sample
from reverb_tf import reverb_types
from reverb_tf import server
from reverb_tf import trajectory_writer
from reverb_tf.batched_trajectory_writer import BatchedTrajectoryColumn
from reverb_tf.batched_trajectory_writer import BatchedTrajectoryWriter
from reverb_tf.client import Client
from reverb_tf.client import Writer
from reverb_tf.errors import DeadlineExceededError
from reverb_tf.errors import ReverbError
from reverb_tf.numpy_dataset import NumpyDataset
from reverb_tf.replay_sample import ReplaySample
from reverb_tf.replay_sample import SampleInfo
from reverb_tf.replay_sample import SampleInfoWithStats
from reverb_tf.server import Server
from reverb_tf.server import Table
from reverb_tf.signatures import ArraySpec
from reverb_tf.trajectory_writer import TrajectoryColumn
from reverb_tf.trajectory_writer import TrajectoryWriter

# dm-reverb exposes the selectors only as an attribute; registering the
# module name too lets `from reverb_tf.selectors import Uniform` work.
_sys.modules[__name__ + ".selectors"] = item_selectors

__version__ = "0.1.0"

# The TF-backed names load TensorFlow; resolve them on first use so that
# `import reverb_tf` stays cheap for actors that never touch TF.
_LAZY = {
    "ReverbDataset": ("reverb_tf.trajectory_dataset", "ReverbDataset"),
    "TrajectoryDataset": ("reverb_tf.trajectory_dataset", "TrajectoryDataset"),
    "TimestepDataset": ("reverb_tf.timestep_dataset", "TimestepDataset"),
    "PatternDataset": ("reverb_tf.pattern_dataset", "PatternDataset"),
    "trajectory_dataset": ("reverb_tf.trajectory_dataset", None),
    "interop": ("reverb_tf.interop", None),
    "timestep_dataset": ("reverb_tf.timestep_dataset", None),
    "pattern_dataset": ("reverb_tf.pattern_dataset", None),
    "structured_writer": ("reverb_tf.structured_writer", None),
    "structured": ("reverb_tf.structured_writer", None),
    "pybind": ("reverb_tf.pybind", None),
    "server_executable": ("reverb_tf.server_executable", None),
    "TFClient": ("reverb_tf.tf_client", "TFClient"),
    "tf_client": ("reverb_tf.tf_client", None),
    "TFTrajectoryWriter": ("reverb_tf.tf_trajectory_writer", "TFTrajectoryWriter"),
    "tf_trajectory_writer": ("reverb_tf.tf_trajectory_writer", None),
}


# With TensorFlow imported already, register the ops now, as dm-reverb's
# import does: a process that only runs graphs holding them (a tf.data
# service worker, a SavedModel loader) needs nothing else (_ops.py).
_ops.load_if_tensorflow_is_imported()


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'reverb_tf' has no attribute '{name}'")
    import importlib  # pylint: disable=g-import-not-at-top

    module_name, attribute = _LAZY[name]
    # Modules that need TensorFlow say which extra to install themselves
    # (reverb_tf._tensorflow).
    module = importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "ArraySpec",
    "BatchedTrajectoryColumn",
    "BatchedTrajectoryWriter",
    "Client",
    "DeadlineExceededError",
    "NumpyDataset",
    "PatternDataset",
    "ReplaySample",
    "ReverbDataset",
    "ReverbError",
    "SampleInfo",
    "SampleInfoWithStats",
    "Server",
    "Table",
    "TFClient",
    "TFTrajectoryWriter",
    "TimestepDataset",
    "TrajectoryColumn",
    "TrajectoryDataset",
    "TrajectoryWriter",
    "Writer",
    "checkpointers",
    "errors",
    "item_selectors",
    "rate_limiters",
    "replay_sample",
    "reverb_types",
    "selectors",
    "structured",
    "structured_writer",
]
