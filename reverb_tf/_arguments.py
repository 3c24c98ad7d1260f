# SPDX-License-Identifier: Apache-2.0
"""Type checks of public arguments: one place, one wording.

A value of the wrong type is a `TypeError` and a value of the right type but
out of range a `ValueError`, as dm-reverb's bindings raise them. The checks
of a value's range live with what it configures (mostly the C++ core); these
only make sure the value is of a type the core can take, so that a float
never becomes an integer by truncation and a string never becomes a number.
"""

import math
import numbers
import operator
from typing import Any, Optional

import numpy as np


def integer(name: str, value: Any) -> int:
    """`value` as an int: Python and numpy integers, not bools or floats.

    Args:
      name: The argument's name, for the message.
      value: What the caller passed.

    Returns:
      The integer.

    Raises:
      TypeError: `value` is not an integer.
    """
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {value!r}") from None


def number(name: str, value: Any, allow_nan: bool = False) -> float:
    """`value` as a float: any real number but a bool, not NaN.

    Args:
      name: The argument's name, for the message.
      value: What the caller passed.
      allow_nan: Let NaN through (for a caller that checks it later, where
        dm-reverb checks it).

    Returns:
      The float.

    Raises:
      TypeError: `value` is not a real number.
      ValueError: `value` is NaN.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {value!r}")
    result = float(value)
    if not allow_nan and math.isnan(result):
        raise ValueError(f"`{name}` must not be nan.")
    return result


def string(name: str, value: Any) -> str:
    """`value` if it is a str.

    Args:
      name: The argument's name, for the message.
      value: What the caller passed.

    Returns:
      `value`.

    Raises:
      TypeError: `value` is not a str.
    """
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {value!r}")
    return value


def timeout_ms_in_s(timeout_ms: Any) -> Optional[float]:
    """A writer's `timeout_ms` (an integer; None waits forever) in seconds.

    Raises:
      TypeError: `timeout_ms` is neither None nor an integer.
    """
    if timeout_ms is None:
        return None
    return integer("timeout_ms", timeout_ms) / 1000.0


def array_like_leaves(values: Any) -> None:
    """Checks that each of `values` is a value the native writers take.

    They take what np.asarray turns into numbers, bools or text. Called only
    where the writer would otherwise report something else first (it is
    closed, or the step's structure changed), so that a value of the wrong
    type is a TypeError there too; the native writers check it themselves
    on every append.

    Args:
      values: The flattened leaves of a step (None leaves are skipped).

    Raises:
      TypeError: A leaf is no array-like value.
    """
    for value in values:
        if value is None or isinstance(value, (str, bytes, numbers.Number, np.ndarray)):
            continue
        try:
            array = np.asarray(value)
        except Exception:  # pylint: disable=broad-except
            continue  # ragged or odd: left to the native writer's checks
        if array.dtype.kind != "O":
            continue
        for element in array.flat:
            if not isinstance(element, (str, bytes)):
                raise TypeError(
                    "a value must be array-like (numbers, bools, bytes or str); got an "
                    f"element of type {type(element).__name__}"
                )


def table_name(value: Any) -> str:
    """A table's name: a non-empty str (dm-reverb's phrase for an empty one).

    Raises:
      ValueError: `value` is empty or None.
      TypeError: `value` is not a str.
    """
    if value is None or value == "":
        raise ValueError(f"name must be nonempty, got {value!r}")
    return string("name", value)


def boolean(name: str, value: Any) -> bool:
    """`value` as a bool, taking what dm-reverb's bindings take for one:
    bools (numpy's too), integers and None (False).

    Raises:
      TypeError: `value` is of another type (a str, say).
    """
    if value is None or isinstance(value, (bool, int, np.bool_, np.integer)):
        return bool(value)
    raise TypeError(f"{name} must be a bool, got {value!r}")
