"""Checks that native libraries are linked the way docs/native_linking.md says.

TensorFlow exports its own protobuf, gRPC, zlib and BoringSSL globally; our
shared objects must neither depend on shared copies of those nor export any
of their symbols, and must load into a process that imported TF first.
"""
import ctypes
import re
import subprocess

import pytest

FORBIDDEN_NEEDED = re.compile(r"lib(grpc|gpr|upb|protobuf|ssl|crypto|z|zstd|cares)\b")
FORBIDDEN_EXPORTS = re.compile(r"^(google::protobuf|grpc|gpr_|upb_|ZSTD_|deflate|inflate|SSL_|ares_)")

LIBRARIES = ["reverb_tf/cc/libreverb_tf.so"]


def _needed(path):
    out = subprocess.run(["readelf", "-d", str(path)], check=True, capture_output=True, text=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", out)


def _exported(path):
    out = subprocess.run(["nm", "-D", "--defined-only", "-C", str(path)],
                         check=True, capture_output=True, text=True).stdout
    return [line.split(" ", 2)[2] for line in out.splitlines() if line.count(" ") >= 2]


@pytest.mark.parametrize("library", LIBRARIES)
def test_no_shared_dependency_on_libraries_tensorflow_exports(bazel_bin, library):
    needed = _needed(bazel_bin / library)
    assert needed, "readelf found no NEEDED entries at all"
    assert [n for n in needed if FORBIDDEN_NEEDED.match(n)] == []


@pytest.mark.parametrize("library", LIBRARIES)
def test_exports_nothing_from_static_dependencies(bazel_bin, library):
    exported = _exported(bazel_bin / library)
    assert any(name.startswith("reverb_tf::") for name in exported)
    assert [name for name in exported if FORBIDDEN_EXPORTS.match(name)] == []


@pytest.mark.parametrize("library", LIBRARIES)
def test_loads_after_tensorflow(bazel_bin, library):
    import tensorflow as tf  # noqa: F401  (first, as in a user's process)
    handle = ctypes.CDLL(str(bazel_bin / library), mode=ctypes.RTLD_LOCAL)
    assert handle is not None
