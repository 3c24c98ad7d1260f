# SPDX-License-Identifier: Apache-2.0
"""`ReverbServerConfig`, at dm-reverb's module path.

The message is defined once, in `reverb_tf/cc/proto/schema.proto`; this
module only gives it dm-reverb's import path.
"""

from reverb_tf.cc.schema_pb2 import ReverbServerConfig

__all__ = ["ReverbServerConfig"]
