# SPDX-License-Identifier: Apache-2.0
"""Writes TensorFlow's struct.proto and its imports as a FileDescriptorSet.

patterns.proto imports "tensorflow/core/protobuf/struct.proto", which the
TensorFlow wheel does not ship as a file. protoc reads it from this
descriptor set instead (`--descriptor_set_in`), built from the descriptors
compiled into the installed TensorFlow. Build tool only; not part of the
package.

Usage: python tf_struct_descriptors.py OUTPUT
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from google.protobuf import descriptor_pb2  # pylint: disable=g-import-not-at-top
from tensorflow.core.protobuf import struct_pb2  # pylint: disable=g-import-not-at-top


def main(output: str) -> None:
    descriptor_set = descriptor_pb2.FileDescriptorSet()
    seen = set()

    def add(file_descriptor):
        if file_descriptor.name in seen:
            return
        seen.add(file_descriptor.name)
        for dependency in file_descriptor.dependencies:
            add(dependency)
        file_descriptor.CopyToProto(descriptor_set.file.add())

    add(struct_pb2.DESCRIPTOR)
    with open(output, "wb") as f:
        f.write(descriptor_set.SerializeToString())


if __name__ == "__main__":
    main(sys.argv[1])
