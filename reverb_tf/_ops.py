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
from typing import Any

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
