# SPDX-License-Identifier: Apache-2.0
"""reverb_tf/_core.pyi, the native module's type stub, matches the module as built.

The stub is what editors and type checkers see of `_core`; a binding changed
without regenerating it (scripts/core_stub.sh) would describe an API that
is not there.
"""

import ast
import pathlib
import subprocess
import sys

import pytest

from reverb_tf import _native

ROOT = pathlib.Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.checkout_only(
    reason="compares the module with the stub in the sources (reverb_tf/_core.pyi)"
)
STUB = ROOT / "reverb_tf" / "_core.pyi"


def test_the_checked_in_stub_is_what_the_module_generates(tmp_path):
    generated = subprocess.run(
        [sys.executable, "-m", "pybind11_stubgen", "reverb_tf._core", "-o", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert generated.returncode == 0, generated.stderr
    fresh = (tmp_path / "out" / "reverb_tf" / "_core.pyi").read_text()
    checked_in = STUB.read_text()
    body = checked_in.split("\n", 2)[2]  # after the two header lines
    assert body == fresh, "reverb_tf/_core.pyi is stale: run bash scripts/core_stub.sh"


def test_the_stub_names_every_public_name_of_the_module():
    tree = ast.parse(STUB.read_text())
    stubbed = {node.name for node in tree.body if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
    core = _native.core()
    public = {name for name in dir(core) if not name.startswith("_")}
    assert public - stubbed == set()
    assert {"Server", "Table", "Client", "TrajectoryWriter"} <= stubbed
    server = next(
        node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Server"
    )
    init = next(
        node
        for node in server.body
        if isinstance(node, ast.FunctionDef) and node.name == "__init__"
    )
    # The keyword arguments of the binding, with their types.
    assert "memory_limit" in {arg.arg for arg in init.args.args + init.args.kwonlyargs}
