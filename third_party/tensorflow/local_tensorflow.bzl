"""Repository rule exposing the TensorFlow installed in the project's venv.

The headers and libtensorflow_framework.so.2 are located through
tf.sysconfig, so the ops library is always built against the TensorFlow the
user has (see pip_package/ and docs/native_linking.md).
"""

# The distribution is the pip project that installed the `tensorflow` package
# (tensorflow, tensorflow-cpu, ...; empty if none did): the wheel requires that
# one, so that installing it never pulls a second TensorFlow (pip_package/).
_QUERY = """
import importlib.metadata, re
import tensorflow as tf
print(tf.__version__)
owners = [name for name in importlib.metadata.packages_distributions().get("tensorflow", [])
          if any(str(f) == "tensorflow/__init__.py"
                 for f in importlib.metadata.distribution(name).files or [])]
print(re.sub(r"[-_.]+", "-", owners[0]).lower() if owners else "")
print(tf.sysconfig.get_include())
print(tf.sysconfig.get_lib())
print(' '.join(f for f in tf.sysconfig.get_compile_flags() if not f.startswith('-I')))
"""

# A cross build (scripts/cross_build.sh) compiles against a TensorFlow wheel
# of the target architecture that this machine cannot import: the wheel is
# unpacked into REVERB_TF_TARGET_TENSORFLOW (its tensorflow/ and
# *.dist-info/), and the version, distribution and compile flags are read
# from its files and REVERB_TF_TARGET_TENSORFLOW_CFLAGS instead.
_TARGET_QUERY = """
import email.parser, pathlib, re, sys
site = pathlib.Path(sys.argv[1])
(metadata,) = [p for p in site.glob("*.dist-info/METADATA")
               if (p.parent / "RECORD").read_text().find("tensorflow/__init__.py,") >= 0]
fields = email.parser.Parser().parsestr(metadata.read_text())
print(fields["Version"])
print(re.sub(r"[-_.]+", "-", fields["Name"]).lower())
print(site / "tensorflow" / "include")
print(site / "tensorflow")
print(sys.argv[2])
"""

def _local_tensorflow_impl(rctx):
    python = rctx.os.environ.get("REVERB_TF_PYTHON", "")
    if not python:
        python = str(rctx.path(Label("//:WORKSPACE")).dirname) + "/.venv/bin/python"
    target = rctx.os.environ.get("REVERB_TF_TARGET_TENSORFLOW", "")
    if target:
        cflags = rctx.os.environ.get("REVERB_TF_TARGET_TENSORFLOW_CFLAGS", "")
        if not cflags:
            fail("REVERB_TF_TARGET_TENSORFLOW needs REVERB_TF_TARGET_TENSORFLOW_CFLAGS")
        result = rctx.execute([python, "-c", _TARGET_QUERY, target, cflags])
    else:
        result = rctx.execute([python, "-c", _QUERY], environment = {"TF_CPP_MIN_LOG_LEVEL": "3"})
    if result.return_code != 0:
        fail("cannot import tensorflow with {}: {}\nrun scripts/setup.sh".format(python, result.stderr))
    version, distribution, include, lib, cflags = result.stdout.strip().split("\n")
    rctx.symlink(include, "include")
    rctx.symlink(lib + "/libtensorflow_framework.so.2", "lib/libtensorflow_framework.so.2")
    rctx.file("version.bzl", "TF_VERSION = {}\nTF_DISTRIBUTION = {}\nTF_LIB_DIR = {}\n".format(
        repr(version),
        repr(distribution),
        repr(lib),
    ))
    rctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

exports_files(["version.bzl"])

cc_library(
    name = "tf_headers",
    # Eigen's headers have no extension: take the whole include tree.
    hdrs = glob(["include/**"]),
    includes = ["include"],
    copts = {cflags},
)

# Only for the ops library macro, which puts it LAST on the link line.
filegroup(
    name = "tf_framework",
    srcs = ["lib/libtensorflow_framework.so.2"],
)
""".format(cflags = repr(cflags.split(" "))))

local_tensorflow = repository_rule(
    implementation = _local_tensorflow_impl,
    environ = ["REVERB_TF_PYTHON", "REVERB_TF_TARGET_TENSORFLOW", "REVERB_TF_TARGET_TENSORFLOW_CFLAGS"],
    local = True,
)
