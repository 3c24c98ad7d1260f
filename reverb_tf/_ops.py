# SPDX-License-Identifier: Apache-2.0
"""Loads reverb_tf's TensorFlow op library, built for one TensorFlow version.

A custom op library only works with the TensorFlow minor version it was
compiled against (C++ ABI); loading it into another gives obscure "undefined
symbol" errors. We check first and say how to rebuild instead. Patch releases
keep the ABI, and the wheel accepts them (`tensorflow-cpu>=2.21,<2.22`, see
docs/packaging.md): ops built for 2.19.0 pass the whole test suite in 2.19.1.
"""

import functools
import json
import pathlib
import sys
from typing import Any

from absl import logging

_PACKAGE = pathlib.Path(__file__).resolve().parent
_LIBRARY = _PACKAGE / "libreverb_tf_ops.so"
_BUILD_INFO = _PACKAGE / "_build_info.json"


@functools.lru_cache(maxsize=None)
def load() -> Any:
    """Returns the loaded op module (its ops are Python functions).

    Returns:
      The module returned by `tf.load_op_library`.

    Raises:
      ImportError: If the library is missing, or was built for another
        TensorFlow minor version than the one installed.
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    if not _LIBRARY.exists() or not _BUILD_INFO.exists():
        raise ImportError(
            f"{_LIBRARY.name} is missing next to the reverb_tf package ({_PACKAGE}); "
            "build it with `bash scripts/setup.sh` (or install a reverb_tf wheel)"
        )
    built_for = json.loads(_BUILD_INFO.read_text())["tensorflow_version"]
    if built_for.split(".")[:2] != tf.__version__.split(".")[:2]:
        raise ImportError(
            f"reverb_tf's TensorFlow ops were built for TensorFlow {built_for}, but "
            f"TensorFlow {tf.__version__} is installed (the minor versions must agree). "
            "Rebuild them against the "
            "installed TensorFlow: `bash scripts/setup.sh` (a checkout) or "
            "`bazel run //pip_package:build_pip_package` (a wheel)."
        )
    return tf.load_op_library(str(_LIBRARY))


def load_if_tensorflow_is_imported() -> bool:
    """Registers the ops now if this process has imported TensorFlow already.

    `import reverb_tf` calls this. A process can run reverb_tf's ops in a
    graph it did not build: a tf.data service worker given a Reverb
    dataset, a process loading a SavedModel. TensorFlow then looks the ops
    up in its registry, which only `tf.load_op_library` fills; dm-reverb's
    `import reverb` registers them. reverb_tf's import does not import
    TensorFlow (actors without TensorFlow stay light), but where TensorFlow
    is imported already registering them costs a few milliseconds, so it
    does it then. A process that imports reverb_tf first gets them when it
    makes its first dataset, TFClient or TFTrajectoryWriter, or by
    importing `reverb_tf.cc.ops.gen_reverb_ops` (docs/tpu_and_multi_host.md).

    Returns:
      Whether the ops are registered. A library that cannot load (missing,
      built for another TensorFlow) is logged, not raised: the rest of
      reverb_tf works without it, and its first TensorFlow feature raises
      the `ImportError` of `load`.
    """
    if sys.modules.get("tensorflow") is None:
        return False
    try:
        load()
    except ImportError as e:
        logging.warning("reverb_tf's TensorFlow ops are not registered: %s", e)
        return False
    return True
