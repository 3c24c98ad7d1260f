# SPDX-License-Identifier: Apache-2.0
"""dm-reverb's `reverb.cc.checkpointing.checkpoint_pb2`: a table's configuration.

dm-reverb defines the messages a server configuration is built from
(`PriorityTableCheckpoint`, `RateLimiterCheckpoint`) in its checkpoint proto;
reverb_tf defines them once, with dm-reverb's field names and numbers, in
`reverb_tf/cc/proto/schema.proto`. This module gives them dm-reverb's path,
so that

    table = checkpoint_pb2.PriorityTableCheckpoint(table_name="replay", ...)
    reverb_config_pb2.ReverbServerConfig(tables=[table], port=8000)

works as it does there. reverb_tf's checkpoint files have a format of their
own (`reverb_tf/cc/checkpointing/`), not these messages.
"""

from reverb_tf.cc.schema_pb2 import PriorityTableCheckpoint
from reverb_tf.cc.schema_pb2 import RateLimiterCheckpoint

__all__ = ["PriorityTableCheckpoint", "RateLimiterCheckpoint"]
