"""Repository rule exposing the venv's Python headers and nanobind.

Like @local_tensorflow, it asks the project's venv python (REVERB_TF_PYTHON,
written to .bazelrc.local by scripts/setup.sh), so the extension module is
built for the interpreter that will import it.

nanobind (pinned in requirements.txt) ships its sources in the pip package:
they are compiled into the extension itself (target :nanobind), offline,
from the venv's copy, with robin_map, which nanobind vendors under ext/.

`--config=abi3` (.bazelrc: --define=reverb_tf_abi3=1) builds the extension
on the stable ABI: Py_LIMITED_API = 0x030C0000 on every target that includes
Python.h through :python_headers (nanobind's sources and ours), so the
headers hide every API newer than 3.12 or outside the limited API and a use
of one fails the build. nanobind keys its stable-ABI mode on that macro.

REVERB_TF_PYTHON_HEADERS, a directory holding another CPython's Python.h
(its pyconfig.h the target's), compiles against those headers instead of
the interpreter's: CI's scripts/abi3_check.sh builds the stable-ABI
extension against Python 3.14's headers (from the Debian sid base) on a
machine whose venv is 3.11, then imports it under 3.14. The version is then
the headers' (patchlevel.h), and nanobind still the venv's.
"""

_QUERY = """
import sysconfig, nanobind
print(sysconfig.get_paths()["include"])
print(nanobind.include_dir())
print(nanobind.source_dir())
print(sysconfig.get_config_var("EXT_SUFFIX"))
import sys
print("%d.%d" % sys.version_info[:2])
"""

# The oldest CPython an abi3 build runs on, as Py_LIMITED_API spells it.
LIMITED_API = "0x030C0000"

def _headers_version(rctx, headers):
    """The "major.minor" that `headers`/patchlevel.h defines."""
    patchlevel = rctx.path(headers + "/patchlevel.h")
    if not patchlevel.exists:
        fail("REVERB_TF_PYTHON_HEADERS={} holds no patchlevel.h".format(headers))
    numbers = {}
    for line in rctx.read(patchlevel).split("\n"):
        words = [word for word in line.replace("\t", " ").split(" ") if word]
        if len(words) == 3 and words[0] == "#define" and words[1] in ("PY_MAJOR_VERSION", "PY_MINOR_VERSION"):
            numbers[words[1]] = words[2]
    if len(numbers) != 2:
        fail("{}: no PY_MAJOR_VERSION and PY_MINOR_VERSION".format(patchlevel))
    return "{}.{}".format(numbers["PY_MAJOR_VERSION"], numbers["PY_MINOR_VERSION"])

def _local_python_impl(rctx):
    python = rctx.os.environ.get("REVERB_TF_PYTHON", "")
    if not python:
        python = str(rctx.path(Label("//:WORKSPACE")).dirname) + "/.venv/bin/python"
    result = rctx.execute([python, "-c", _QUERY])
    if result.return_code != 0:
        fail("cannot query {}: {}\nrun scripts/setup.sh".format(python, result.stderr))
    lines = result.stdout.strip().split("\n")
    python_include, nanobind_include, nanobind_src, ext_suffix, version = lines
    headers = rctx.os.environ.get("REVERB_TF_PYTHON_HEADERS", "")
    if headers:
        python_include = headers
        version = _headers_version(rctx, headers)
    nanobind_root = nanobind_src.rsplit("/", 1)[0]
    rctx.symlink(python_include, "python_include")
    rctx.symlink(nanobind_include, "nanobind/include")
    rctx.symlink(nanobind_src, "nanobind/src")
    rctx.symlink(nanobind_root + "/ext/robin_map/include", "nanobind/robin_map")

    # PYTHON: the interpreter itself, which builds the wheel (pip_package/).
    # VERSION: its major.minor.
    rctx.file("defs.bzl", "EXT_SUFFIX = {}\nPYTHON = {}\nVERSION = {}\nLIMITED_API = {}\n".format(
        repr(ext_suffix),
        repr(python),
        repr(version),
        repr(LIMITED_API),
    ))
    major, minor = [int(part) for part in version.split(".")]
    if (major, minor) >= (3, 12):
        abi3_check = "touch $@"
    else:
        # The 3.12 limit needs 3.12's headers (nanobind's stable-ABI mode
        # relies on them): stop with the reason rather than a compile error.
        abi3_check = "echo '--config=abi3 needs Python >= 3.12; {} is {}' >&2; exit 1".format(
            python,
            version,
        )
    rctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

exports_files(["defs.bzl"])

config_setting(
    name = "abi3",
    define_values = {{"reverb_tf_abi3": "1"}},
)

genrule(
    name = "abi3_check",
    outs = ["abi3_check.h"],
    cmd = "{abi3_check}",
)

cc_library(
    name = "python_headers",
    hdrs = glob(["python_include/**/*.h"]) + select({{
        ":abi3": [":abi3_check"],
        "//conditions:default": [],
    }}),
    includes = ["python_include"],
    defines = select({{
        ":abi3": ["Py_LIMITED_API={limited}"],
        "//conditions:default": [],
    }}),
)

# nanobind's runtime (libnanobind), compiled from the pip package's sources
# as its CMake build compiles them: NB_BUILD, no strict aliasing (it puns
# CPython's object layouts), compact assertions as in a release build.
cc_library(
    name = "nanobind",
    srcs = glob(
        ["nanobind/src/*.cpp", "nanobind/src/*.h"],
        exclude = [
            "nanobind/src/nb_combined.cpp",
            # Free-threaded builds only; the backend module of split mode.
            "nanobind/src/nb_ft.cpp",
            "nanobind/src/nb_backend.cpp",
        ],
    ),
    hdrs = glob([
        "nanobind/include/**/*.h",
        "nanobind/robin_map/**/*.h",
    ]),
    includes = ["nanobind/include", "nanobind/robin_map"],
    copts = [
        "-DNB_BUILD",
        "-DNB_COMPACT_ASSERTIONS",
        "-fno-strict-aliasing",
        "-Wno-unused-function",
        "-Wno-missing-field-initializers",
    ],
    deps = [":python_headers"],
)
""".format(limited = LIMITED_API, abi3_check = abi3_check))

local_python = repository_rule(
    implementation = _local_python_impl,
    environ = ["REVERB_TF_PYTHON", "REVERB_TF_PYTHON_HEADERS"],
    local = True,
)
