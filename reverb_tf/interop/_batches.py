# SPDX-License-Identifier: Apache-2.0
"""What the framework adapters share: importing the framework, mapping a batch."""

import importlib
from types import ModuleType
from typing import Any, Callable

import numpy as np
import tree

from reverb_tf import replay_sample


def import_framework(name: str, adapter: str) -> ModuleType:
    """Imports `name`, or says which adapter needs it.

    Args:
      name: The framework's module ("jax", "torch").
      adapter: The adapter's module, for the message.

    Returns:
      The module.

    Raises:
      ImportError: If the framework is not installed.
    """
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name != name:
            raise
        raise ImportError(f"{adapter} needs {name}: pip install {name}") from None


def map_arrays(
    batch: replay_sample.ReplaySample, convert: Callable[[np.ndarray], Any]
) -> replay_sample.ReplaySample:
    """Applies `convert` to a batch's numeric arrays.

    `info.key` stays a numpy uint64 array (what `Client.mutate_priorities`
    takes; frameworks without 64-bit integers would truncate it), and string
    columns (numpy object arrays) stay as they are.

    Args:
      batch: A `ReplaySample` of numpy arrays (from `NumpyDataset`).
      convert: What each numeric array becomes.

    Returns:
      The converted batch.
    """

    def leaf(value: Any) -> Any:
        if isinstance(value, np.ndarray) and value.dtype != object:
            return convert(value)
        return value

    info = batch.info._replace(
        **{
            field: leaf(getattr(batch.info, field))
            for field in batch.info._fields
            if field != "key"
        }
    )
    return replay_sample.ReplaySample(info, tree.map_structure(leaf, batch.data))
