# SPDX-License-Identifier: Apache-2.0
"""Adapters of `reverb_tf.NumpyDataset` to other ecosystems' idioms.

* `reverb_tf.interop.jax`: `device_put_iterator`, batches as `jax.Array`s,
  put on the device while the next batches are sampled.
* `reverb_tf.interop.torch`: `TorchDataset`, a `torch.utils.data.IterableDataset`
  of batches as `torch.Tensor`s.

Neither needs TensorFlow; each imports its own framework only when used.
"""

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    # `reverb_tf.interop.jax` without an import statement, as for the
    # package's other lazily loaded modules.
    if name in ("jax", "torch"):
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
