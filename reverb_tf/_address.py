# SPDX-License-Identifier: Apache-2.0
"""Server addresses given as TensorFlow string tensors.

dm-reverb's datasets take `server_address` as a `tf.Tensor` too. reverb_tf's
ops take the address as a string tensor input, so a tensor that only has a
value when the graph runs (an argument of a `tf.function`) goes to the op as
it is; an eager tensor, or a constant, becomes its string at once. Code that
needs the address in Python (reading a table's signature) accepts only the
latter.

This module does not import TensorFlow: a tensor can only exist if the
program already imported it.
"""

import sys
from typing import Any, Optional, Union

import numpy as np

from reverb_tf.client import ServerAddress
from reverb_tf.client import target_string


def _tensor_value(tensor: Any) -> Optional[str]:
    """The string a scalar string tensor holds, if known now (else None).

    Raises:
      TypeError: If the tensor is not of dtype tf.string.
      ValueError: If the tensor is known not to be a scalar.
    """
    tf = sys.modules["tensorflow"]
    if tensor.dtype != tf.string:
        raise TypeError(
            f"server_address must be a string (or a tf.string scalar tensor), got a "
            f"{tensor.dtype.name} tensor"
        )
    if tensor.shape.rank is not None and tensor.shape.rank != 0:
        raise ValueError(f"server_address must be a scalar string tensor, got shape {tensor.shape}")
    value = tf.get_static_value(tensor)
    return None if value is None else np.asarray(value).item().decode()


def _as_tensor(server_address: Any) -> Any:
    """`server_address` if it is a TensorFlow tensor or variable, else None."""
    tf = sys.modules.get("tensorflow")
    if tf is not None and isinstance(server_address, (tf.Tensor, tf.Variable)):
        return server_address
    return None


def op_address(server_address: Union[ServerAddress, Any]) -> Union[str, Any]:
    """The address as the ops take it: a target string, or a string tensor.

    Args:
      server_address: Anything `client.target_string` takes, or a scalar
        tf.string tensor holding one target ("host:port", a comma-separated
        list of shards, a "dns:///" name).

    Returns:
      The target string, or the tensor itself if its value is only known
      when the graph runs (the op then reads it).

    Raises:
      TypeError: If a tensor is not of dtype tf.string.
      ValueError: If a tensor is not a scalar, or as `client.target_string`.
    """
    tensor = _as_tensor(server_address)
    tf = sys.modules.get("tensorflow")
    if (
        tensor is None
        and tf is not None
        and not isinstance(server_address, (str, bytes, list, tuple))
    ):
        # What the op would do with it: TF's own errors for None (ValueError)
        # or a number (TypeError), as dm-reverb's datasets raise them.
        tensor = tf.convert_to_tensor(server_address, tf.string)
    if tensor is None:
        return target_string(server_address)
    value = _tensor_value(tensor)
    return tensor if value is None else target_string(value)


def python_address(server_address: Union[ServerAddress, Any], what: str) -> ServerAddress:
    """The address as `Client` takes it, for code that talks to the server now.

    Args:
      server_address: As `op_address` takes it.
      what: The caller, for the message.

    Returns:
      `server_address`, or the string a tensor holds.

    Raises:
      TypeError: If a tensor's value is only known when the graph runs, or
        is not of dtype tf.string.
      ValueError: If a tensor is not a scalar.
    """
    tensor = _as_tensor(server_address)
    if tensor is None:
        return server_address
    value = _tensor_value(tensor)
    if value is None:
        raise TypeError(
            f"{what} talks to the server while the dataset is built, so server_address "
            "must have a value then: a str or an eager tensor, not a graph tensor "
            f"({tensor!r}); pass dtypes and shapes to the constructor instead"
        )
    return value
