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
    fresh_path = tmp_path / "_core.pyi"
    generated = subprocess.run(
        [sys.executable, "-m", "nanobind.stubgen", "-q", "-m", "reverb_tf._core"]
        + ["-o", str(fresh_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert generated.returncode == 0, generated.stderr
    fresh = fresh_path.read_text()
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
    # The keyword arguments of the binding, with their types and defaults.
    arguments = {arg.arg: arg for arg in init.args.args + init.args.kwonlyargs}
    assert "memory_limit" in arguments
    assert ast.unparse(arguments["memory_limit"].annotation) == "int"
    assert ast.unparse(arguments["host"].annotation) == "str"


def test_the_stub_keeps_the_keyword_names_and_defaults_of_the_bindings():
    """What Python calls by keyword is spelled in the stub as the binding takes it."""
    tree = ast.parse(STUB.read_text())
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}

    def parameter(cls: str, method: str, name: str) -> str:
        """`name: annotation = default` of one parameter, as the stub declares it."""
        node = next(
            node
            for node in classes[cls].body
            if isinstance(node, ast.FunctionDef) and node.name == method
        )
        positional = node.args.posonlyargs + node.args.args
        defaults = [None] * (len(positional) - len(node.args.defaults)) + node.args.defaults
        for arg, default in zip(positional, defaults):
            if arg.arg == name:
                text = f"{arg.arg}: {ast.unparse(arg.annotation)}"
                return text if default is None else f"{text} = {ast.unparse(default)}"
        raise AssertionError(f"{cls}.{method} has no parameter {name}")

    assert parameter("Client", "server_info", "timeout_s") == "timeout_s: float | None = None"
    assert (
        parameter("Client", "new_writer", "num_keep_alive_refs") == "num_keep_alive_refs: int = 1"
    )
    assert parameter("TrajectoryWriter", "flush", "block_until_num_items") == (
        "block_until_num_items: int = 0"
    )
    # Booleans take None (as False) as dm-reverb's pybind11 bindings do.
    assert parameter("TrajectoryWriter", "append", "partial_step") == (
        "partial_step: bool | None = False"
    )
    assert parameter("StructuredWriter", "end_episode", "clear_buffers") == (
        "clear_buffers: bool | None = True"
    )
