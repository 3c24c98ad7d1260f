"""Repository rule exposing the venv's Python and pybind11 headers.

Like @local_tensorflow, it asks the project's venv python (REVERB_TF_PYTHON,
written to .bazelrc.local by scripts/setup.sh), so the extension module is
built for the interpreter that will import it.
"""

_QUERY = """
import sysconfig, pybind11
print(sysconfig.get_paths()["include"])
print(pybind11.get_include())
print(sysconfig.get_config_var("EXT_SUFFIX"))
"""

def _local_python_impl(rctx):
    python = rctx.os.environ.get("REVERB_TF_PYTHON", "")
    if not python:
        python = str(rctx.path(Label("//:WORKSPACE")).dirname) + "/.venv/bin/python"
    result = rctx.execute([python, "-c", _QUERY])
    if result.return_code != 0:
        fail("cannot query {}: {}\nrun scripts/setup.sh".format(python, result.stderr))
    python_include, pybind11_include, ext_suffix = result.stdout.strip().split("\n")
    rctx.symlink(python_include, "python_include")
    rctx.symlink(pybind11_include, "pybind11_include")
    # PYTHON: the interpreter itself, which builds the wheel (pip_package/).
    rctx.file("defs.bzl", "EXT_SUFFIX = {}\nPYTHON = {}\n".format(repr(ext_suffix), repr(python)))
    rctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

exports_files(["defs.bzl"])

cc_library(
    name = "python_headers",
    hdrs = glob(["python_include/**/*.h"]),
    includes = ["python_include"],
)

cc_library(
    name = "pybind11",
    hdrs = glob(["pybind11_include/**/*.h"]),
    includes = ["pybind11_include"],
    deps = [":python_headers"],
)
""")

local_python = repository_rule(
    implementation = _local_python_impl,
    environ = ["REVERB_TF_PYTHON"],
    local = True,
)
