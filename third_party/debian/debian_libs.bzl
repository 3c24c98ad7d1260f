"""Repository rules for the native libraries this project takes from Debian
and from the project's venv, so that Bazel builds fully offline.

Linking policy (see docs/native_linking.md):
  * gRPC (with TLS), OpenSSL (libssl, libcrypto), upb, gpr, c-ares,
    address_sorting, zlib, zstd and protobuf are linked STATICALLY, and every
    shared object we build hides their symbols. TensorFlow exports its own
    protobuf, BoringSSL, zlib and gRPC globally; a shared Debian copy would
    bind into TF's and crash (for OpenSSL: TF's BoringSSL has the same
    symbol names).
  * Debian's libprotobuf.a is not position independent, so protobuf comes from
    a PIC build of Debian's own source package (scripts/build_protobuf_pic.sh).
  * GNU libmicrohttpd (the /metrics endpoint) is linked statically too, from
    a build of Debian's source without HTTPS (scripts/build_microhttpd.sh),
    so that it needs no GnuTLS.
  * absl and re2 stay shared: TF's absl lives in another inline namespace and
    gRPC's re2 use does not reach TF's copy in the features we use.
"""

_STATIC_ARCHIVES = [
    # Order matters for the static link: each archive after those using it.
    "grpc++_reflection",
    "grpc++",
    "grpc",
    "upb",
    "address_sorting",
    "cares",
    "gpr",
    "ssl",
    "crypto",
]

_ABSL_MODULES = [
    "absl_base",
    "absl_flat_hash_map",
    "absl_flat_hash_set",
    "absl_node_hash_map",
    "absl_hash",
    "absl_log_severity",
    "absl_random_random",
    "absl_status",
    "absl_statusor",
    "absl_str_format",
    "absl_strings",
    "absl_synchronization",
    "absl_time",
    "absl_flags",
    "absl_flags_parse",
    "absl_cord",
]

def _run(rctx, args):
    result = rctx.execute(args)
    if result.return_code != 0:
        fail("'{}' failed: {}".format(" ".join(args), result.stderr))
    return result.stdout.strip()

def _debian_libs_impl(rctx):
    # REVERB_TF_TARGET_MULTIARCH (e.g. aarch64-linux-gnu) names the target of
    # a cross build (scripts/cross_build.sh): the static archives and the
    # pkg-config files of that architecture's -dev packages (Debian multiarch,
    # dpkg --add-architecture), while protoc and grpc_cpp_plugin stay the
    # build machine's, since Bazel runs them.
    multiarch = rctx.os.environ.get("REVERB_TF_TARGET_MULTIARCH", "")
    pkg_config = "pkg-config"
    if multiarch:
        pkg_config = multiarch + "-pkg-config"
    else:
        multiarch = _run(rctx, ["gcc", "-print-multiarch"])
    libdir = "/usr/lib/" + multiarch
    for name in _STATIC_ARCHIVES + ["z", "zstd"]:
        archive = "{}/lib{}.a".format(libdir, name)
        if not rctx.path(archive).exists:
            fail("missing {}: run scripts/setup.sh (it installs the Debian packages)".format(archive))
        rctx.symlink(archive, "lib/lib{}.a".format(name))

    absl_libs = _run(rctx, [pkg_config, "--libs"] + _ABSL_MODULES).split(" ")
    re2_libs = _run(rctx, [pkg_config, "--libs", "re2"]).split(" ")

    pic_dir = rctx.os.environ.get("REVERB_TF_PROTOBUF_PIC", "")
    if not pic_dir:
        pic_dir = rctx.os.environ["HOME"] + "/.cache/reverb_tf/protobuf-pic"
    pic_archive = pic_dir + "/lib/libprotobuf.a"
    if not rctx.path(pic_archive).exists:
        fail("missing {}: run scripts/setup.sh (it builds a PIC protobuf)".format(pic_archive))
    rctx.symlink(pic_archive, "lib/libprotobuf_pic.a")

    microhttpd_dir = rctx.os.environ.get("REVERB_TF_MICROHTTPD", "")
    if not microhttpd_dir:
        microhttpd_dir = rctx.os.environ["HOME"] + "/.cache/reverb_tf/microhttpd"
    if not rctx.path(microhttpd_dir + "/.complete").exists:
        fail("missing {}: run scripts/setup.sh (it builds libmicrohttpd)".format(microhttpd_dir))
    rctx.symlink(microhttpd_dir + "/lib/libmicrohttpd.a", "lib/libmicrohttpd.a")
    rctx.symlink(microhttpd_dir + "/include/microhttpd.h", "microhttpd/microhttpd.h")

    # The code generators, from the same Debian packages as the libraries:
    # protoc 3.21 must match the PIC libprotobuf built from its source.
    for tool in ["protoc", "grpc_cpp_plugin"]:
        path = rctx.which(tool)
        if path == None:
            fail("missing {}: run scripts/setup.sh (it installs the Debian packages)".format(tool))
        rctx.symlink(path, "bin/" + tool)

    rctx.template("BUILD", rctx.attr._build_template, {
        "%{STATIC_ARCHIVES}": repr(["lib/lib{}.a".format(n) for n in _STATIC_ARCHIVES]),
        "%{ABSL_LINKOPTS}": repr([f for f in absl_libs if f]),
        "%{RE2_LINKOPTS}": repr([f for f in re2_libs if f]),
    })

debian_libs = repository_rule(
    implementation = _debian_libs_impl,
    attrs = {"_build_template": attr.label(default = "//third_party/debian:BUILD.tpl")},
    environ = ["REVERB_TF_PROTOBUF_PIC", "REVERB_TF_MICROHTTPD", "REVERB_TF_TARGET_MULTIARCH", "HOME"],
    local = True,
)
