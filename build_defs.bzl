"""Build macros shared by every native target of reverb_tf."""

# Linker flags for any shared object that may be loaded into a Python process
# that imported TensorFlow first (docs/native_linking.md):
#   the version script EXPORTS (reverb_tf/cc/platform/exports.lds): only
#                       our REVERB_TF_EXPORT symbols leave the object, nothing
#                       of the static gRPC, protobuf, zlib or zstd, so TF's
#                       global copies cannot bind to ours or ours to theirs.
#                       (--exclude-libs,ALL did this until binutils 2.44,
#                       which also hides our own whole-archive libraries);
#   -z,defs             every reference is resolved at link time, so an
#                       unresolved symbol is a build error, not a runtime bind
#                       into whatever the process happens to have loaded.
EXPORTS = "//reverb_tf/cc/platform:exports.lds"

NATIVE_LIBRARY_LINKOPTS = [
    "-Wl,--version-script,$(location {})".format(EXPORTS),
    "-Wl,-z,defs",
    "-Wl,--as-needed",
]

def reverb_tf_native_library(name, srcs = [], deps = [], uses_tensorflow = False,
                             python_extension = False, **kwargs):
    """A hermetically linked shared object (pybind module, TF ops library).

    Our own code is compiled with hidden visibility (.bazelrc); gRPC, protobuf,
    zlib and zstd come in as static archives whose symbols stay hidden. When
    `uses_tensorflow`, libtensorflow_framework.so.2 goes LAST on the link
    line: placed earlier, ld would silently bind references meant for our
    static archives to TF's copies.

    Args:
      name: output file name, e.g. "libreverb_tf.so".
      srcs: extra sources compiled into the shared object.
      deps: cc_library targets linked statically into it.
      uses_tensorflow: link against the venv's libtensorflow_framework.so.2.
      python_extension: a Python extension module, whose references to the
        Python C API are resolved by the interpreter that loads it: -z,defs
        cannot apply to it.
      **kwargs: passed to cc_binary.
    """
    # The soname is the file name, so dependents record "libreverb_tf.so"
    # rather than Bazel's internal path, and find it next to themselves.
    linkopts = [
        opt
        for opt in NATIVE_LIBRARY_LINKOPTS
        if not (python_extension and opt == "-Wl,-z,defs")
    ] + [
        "-Wl,-soname," + name,
        "-Wl,-rpath,$$ORIGIN",
    ]
    additional_linker_inputs = [EXPORTS]
    if uses_tensorflow:
        tf = "@local_tensorflow//:tf_framework"
        additional_linker_inputs.append(tf)
        linkopts.append("$(location {})".format(tf))
    native.cc_binary(
        name = name,
        srcs = srcs,
        deps = deps,
        linkshared = True,
        linkstatic = True,
        linkopts = linkopts + kwargs.pop("linkopts", []),
        additional_linker_inputs = additional_linker_inputs,
        **kwargs
    )
