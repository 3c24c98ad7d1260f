# SPDX-License-Identifier: Apache-2.0
"""TensorFlow as an optional dependency: one place decides and explains.

The core of reverb_tf (servers, clients, writers, sampling, checkpoints, the
binary, the CLI, Ray) never needs TensorFlow, so the wheel does not require
it. The features built on TensorFlow (the datasets, `TFClient`, signatures
given as `tf.TensorSpec`) import it through `import_tensorflow`, which turns
its absence into one `ImportError` that says which extra to install.
"""

import importlib.util
import sys
from types import ModuleType

# What to install for the TensorFlow-native features (pip_package's extras).
INSTALL_HINT = (
    "pip install 'reverb-tf[tensorflow-cpu]' (or 'reverb-tf[tensorflow]' "
    "for the GPU build), which pins the TensorFlow minor version the "
    "wheel's op library was built against"
)


class TensorFlowNotInstalledError(ImportError):
    """A TensorFlow-only feature was used where TensorFlow is not installed."""


def is_installed() -> bool:
    """True if TensorFlow can be imported (without importing it).

    Returns:
      Whether a `tensorflow` package is on the path, or already imported.
    """
    return "tensorflow" in sys.modules or importlib.util.find_spec("tensorflow") is not None


def is_imported() -> bool:
    """True if this process has imported TensorFlow already."""
    return "tensorflow" in sys.modules


def import_tensorflow(feature: str) -> ModuleType:
    """Imports TensorFlow for `feature`, or says how to get it.

    Args:
      feature: What needs TensorFlow, for the message (e.g.
        "reverb_tf.TrajectoryDataset").

    Returns:
      The `tensorflow` module.

    Raises:
      TensorFlowNotInstalledError: If TensorFlow is not installed (an
        `ImportError`, so `except ImportError` keeps working).
    """
    try:
        import tensorflow  # pylint: disable=g-import-not-at-top
    except ModuleNotFoundError as e:
        if e.name != "tensorflow":
            raise
        raise TensorFlowNotInstalledError(
            f"{feature} needs TensorFlow, which is not installed. Install it with "
            f"{INSTALL_HINT}. Everything else (Server, Client, the writers, "
            "Client.sample, reverb_tf.NumpyDataset) works without it."
        ) from None
    return tensorflow
