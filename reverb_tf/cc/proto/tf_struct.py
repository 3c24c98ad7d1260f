# SPDX-License-Identifier: Apache-2.0
"""TensorFlow's `StructuredValue` messages, with or without TensorFlow.

Table signatures and StructuredWriter pattern structures are encoded as
TensorFlow's `tensorflow.StructuredValue` (what dm-reverb stores too), and
`reverb_tf.cc.patterns_pb2` declares its `pattern_structure` field with that
type. Where TensorFlow is installed this module is TensorFlow's own
`struct_pb2`, so messages are interchangeable with TensorFlow's. Where it is
not, the same file descriptors, taken from the TensorFlow the wheel was built
against (`tf_struct_fds.py`, generated at build time), are added to
protobuf's default pool under their own names, which gives wire-identical
messages without importing TensorFlow.

Exposes `StructuredValue`, `TensorSpecProto`, `DataType` (the enum's
descriptor) and `DESCRIPTOR` (struct.proto's file descriptor).
"""

from reverb_tf import _tensorflow

_STRUCT_FILE = "tensorflow/core/protobuf/struct.proto"

if _tensorflow.is_installed():
    # pylint: disable=g-import-not-at-top,wildcard-import,unused-wildcard-import
    from tensorflow.core.framework import types_pb2 as _types_pb2
    from tensorflow.core.protobuf.struct_pb2 import *  # noqa: F401,F403
    from tensorflow.core.protobuf.struct_pb2 import DESCRIPTOR  # noqa: F401

    DataType = _types_pb2.DataType.DESCRIPTOR
    # pylint: enable=g-import-not-at-top,wildcard-import,unused-wildcard-import
else:
    # pylint: disable=g-import-not-at-top
    from google.protobuf import descriptor_pb2 as _descriptor_pb2
    from google.protobuf import descriptor_pool as _descriptor_pool
    from google.protobuf import message_factory as _message_factory

    from reverb_tf.cc.proto import tf_struct_fds as _fds
    # pylint: enable=g-import-not-at-top

    def _register() -> None:
        pool = _descriptor_pool.Default()
        files = _descriptor_pb2.FileDescriptorSet.FromString(_fds.SERIALIZED).file
        for file_proto in files:  # dependencies come first (tf_struct_descriptors.py)
            try:
                pool.FindFileByName(file_proto.name)
            except KeyError:
                pool.AddSerializedFile(file_proto.SerializeToString())

    _register()
    _pool = _descriptor_pool.Default()
    DESCRIPTOR = _pool.FindFileByName(_STRUCT_FILE)
    DataType = _pool.FindEnumTypeByName("tensorflow.DataType")
    for _name in DESCRIPTOR.message_types_by_name:
        globals()[_name] = _message_factory.GetMessageClass(DESCRIPTOR.message_types_by_name[_name])
    del _name
