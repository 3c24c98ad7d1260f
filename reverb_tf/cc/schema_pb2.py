# SPDX-License-Identifier: Apache-2.0
"""dm-reverb's `reverb.cc.schema_pb2`: the messages of a table's schema.

They are defined once, in `reverb_tf/cc/proto/schema.proto`, whose module
(`reverb_tf.cc.proto.schema_pb2`) the wire format's modules import; this
module gives its messages dm-reverb's path. A second module compiled from the
same file would register it twice and make classes that are not the wire's.
"""

from reverb_tf.cc.proto.schema_pb2 import *  # noqa: F401,F403
from reverb_tf.cc.proto.schema_pb2 import DESCRIPTOR  # noqa: F401
