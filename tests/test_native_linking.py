# SPDX-License-Identifier: Apache-2.0
"""Checks that native libraries are linked the way docs/native_linking.md says.

TensorFlow exports its own protobuf, gRPC, zlib and BoringSSL globally; our
shared objects must neither depend on shared copies of those nor export any
of their symbols, and must load into a process that imported TF first.
"""

import ctypes
import pathlib
import re
import subprocess

import pytest

FORBIDDEN_NEEDED = re.compile(r"lib(grpc|gpr|upb|protobuf|ssl|crypto|z|zstd|cares)\b")
FORBIDDEN_EXPORTS = re.compile(
    r"^(google::protobuf|grpc|gpr_|upb_|ZSTD_|deflate|inflate|ares_|"
    # OpenSSL, whose names TensorFlow's BoringSSL exports too.
    r"SSL_|EVP_|CRYPTO_|BIO_|X509|PEM_|ERR_|OPENSSL_|RSA_|EC_|BN_)"
)

# In the imported package: a checkout's copy of Bazel's output, or a wheel's.
LIBRARIES = ["libreverb_tf.so"]


def _needed(path):
    out = subprocess.run(
        ["readelf", "-d", str(path)], check=True, capture_output=True, text=True
    ).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", out)


def _dynamic_symbols(path):
    """(binding, defined, demangled name) of each .dynsym entry."""
    out = subprocess.run(
        ["readelf", "-W", "--dyn-syms", "-C", str(path)], check=True, capture_output=True, text=True
    ).stdout
    symbols = []
    for line in out.splitlines():
        fields = line.split(None, 7)
        if len(fields) == 8 and fields[0].endswith(":"):
            symbols.append((fields[4], fields[6] != "UND", fields[7]))
    return symbols


def _exported(path):
    # Local entries (TLS variables keep .dynsym slots) are not visible outside.
    return [
        name
        for binding, defined, name in _dynamic_symbols(path)
        if defined and binding in ("GLOBAL", "WEAK", "UNIQUE")
    ]


def _tensorflow_exports():
    import tensorflow as tf

    lib_dir = pathlib.Path(tf.sysconfig.get_lib())
    names = set()
    for lib in [
        lib_dir / "libtensorflow_framework.so.2",
        lib_dir / "libtensorflow_cc.so.2",
        lib_dir / "python" / "_pywrap_tensorflow_internal.so",
    ]:
        if lib.exists():
            names.update(
                name
                for binding, defined, name in _dynamic_symbols(lib)
                if defined and binding != "LOCAL"
            )
    return names


@pytest.mark.parametrize("library", LIBRARIES)
def test_no_shared_dependency_on_libraries_tensorflow_exports(package_dir, library):
    needed = _needed(package_dir / library)
    assert needed, "readelf found no NEEDED entries at all"
    assert [n for n in needed if FORBIDDEN_NEEDED.match(n)] == []


@pytest.mark.parametrize("library", LIBRARIES)
def test_exports_nothing_from_static_dependencies(package_dir, library):
    exported = _exported(package_dir / library)
    assert any(name.startswith("reverb_tf::") for name in exported)
    assert [name for name in exported if FORBIDDEN_EXPORTS.match(name)] == []


@pytest.mark.parametrize("library", LIBRARIES)
def test_no_undefined_symbol_binds_into_tensorflow(package_dir, library):
    # Weak undefined references (e.g. gRPC's thread_local init hooks) would
    # resolve against TF's copies if TF exported the same names.
    undefined = {
        name
        for binding, defined, name in _dynamic_symbols(package_dir / library)
        if not defined and FORBIDDEN_EXPORTS.match(name.replace("TLS init function for ", ""))
    }
    assert undefined, "expected gRPC/zstd weak references to check"
    assert undefined & _tensorflow_exports() == set()


@pytest.mark.parametrize("library", LIBRARIES)
def test_loads_after_tensorflow(package_dir, library):
    import tensorflow as tf  # noqa: F401  (first, as in a user's process)

    handle = ctypes.CDLL(str(package_dir / library), mode=ctypes.RTLD_LOCAL)
    # Loaded, and its exported code runs (it takes an absl mutex setting; a
    # library that bound into TensorFlow's copies would crash or fail here).
    handle._ZN9reverb_tf29DisableMutexDeadlockDetectionEv.restype = None
    handle._ZN9reverb_tf29DisableMutexDeadlockDetectionEv()
