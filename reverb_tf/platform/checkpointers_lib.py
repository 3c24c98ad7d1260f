# SPDX-License-Identifier: Apache-2.0
"""dm-reverb's `reverb.platform.checkpointers_lib`: the checkpointers.

The implementation lives in `reverb_tf.checkpointers`; this module gives it
the path dm-reverb code imports it from.
"""

from reverb_tf.checkpointers import CheckpointerBase
from reverb_tf.checkpointers import default_checkpointer
from reverb_tf.checkpointers import DefaultCheckpointer
from reverb_tf.checkpointers import TempDirCheckpointer

__all__ = [
    "CheckpointerBase",
    "DefaultCheckpointer",
    "TempDirCheckpointer",
    "default_checkpointer",
]
