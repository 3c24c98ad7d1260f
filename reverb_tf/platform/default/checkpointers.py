# SPDX-License-Identifier: Apache-2.0
"""dm-reverb's `reverb.platform.default.checkpointers`: the checkpointer classes
and the default a `Server` uses, from `reverb_tf.checkpointers`.
"""

from typing import Optional

from reverb_tf import checkpointers as _checkpointers

CheckpointerBase = _checkpointers.CheckpointerBase
DefaultCheckpointer = _checkpointers.DefaultCheckpointer
TempDirCheckpointer = _checkpointers.TempDirCheckpointer


def default_checkpointer(group: Optional[str] = None) -> CheckpointerBase:
    """The checkpointer a `Server` uses when none is given.

    Args:
      group: Accepted as dm-reverb does; it does not change the result.

    Returns:
      A `TempDirCheckpointer`.
    """
    del group  # One default on this platform, whatever the group.
    return _checkpointers.default_checkpointer()


__all__ = ["CheckpointerBase", "DefaultCheckpointer", "TempDirCheckpointer", "default_checkpointer"]
