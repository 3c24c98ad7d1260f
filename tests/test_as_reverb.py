# SPDX-License-Identifier: Apache-2.0
"""`reverb_tf.as_reverb`: `import reverb` served by reverb_tf.

Each case runs in a child interpreter, so the alias never leaks into this
test process (where `reverb` must stay unimportable).
"""

import os
import pathlib
import subprocess
import sys
import textwrap

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _python(*args: str, cwd=None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=env,
        check=False,
    )


def _script(body: str) -> subprocess.CompletedProcess:
    return _python("-c", textwrap.dedent(body))


def test_every_reverb_module_is_the_reverb_tf_module():
    result = _script(
        """
        import importlib.util, sys
        assert importlib.util.find_spec("reverb") is None
        from reverb_tf import as_reverb
        assert not as_reverb.installed()
        as_reverb.install()
        as_reverb.install()  # idempotent
        assert as_reverb.installed()
        assert sum(type(f).__name__ == "_AliasFinder" for f in sys.meta_path) == 1
        import reverb, reverb_tf
        import reverb.structured_writer
        from reverb import selectors, errors
        from reverb.cc.checkpointing import checkpoint_pb2
        from reverb.platform import checkpointers_lib
        import reverb_tf.cc.checkpointing.checkpoint_pb2 as real_pb2
        assert reverb is reverb_tf
        assert reverb.structured_writer is reverb_tf.structured_writer
        assert selectors is reverb_tf.item_selectors
        assert errors.DeadlineExceededError is reverb_tf.errors.DeadlineExceededError
        assert checkpoint_pb2 is real_pb2
        assert sys.modules["reverb.structured_writer"] is reverb_tf.structured_writer
        # Listed under the alias too, the modules keep their own identity.
        assert reverb_tf.__spec__.name == "reverb_tf", reverb_tf.__spec__
        assert reverb_tf.structured_writer.__spec__.name == "reverb_tf.structured_writer"
        import importlib
        assert importlib.reload(reverb_tf.item_selectors) is reverb_tf.item_selectors
        # A table made through one name is the other's class.
        table = reverb.Table.queue("q", 3)
        assert isinstance(table, reverb_tf.Table)
        try:
            import reverb.no_such_module
        except ModuleNotFoundError as e:
            assert e.name == "reverb.no_such_module", e.name
        else:
            raise AssertionError("reverb.no_such_module imported")
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")


def test_install_refuses_when_another_reverb_is_loaded():
    result = _script(
        """
        import sys, types
        sys.modules["reverb"] = types.ModuleType("reverb")
        from reverb_tf import as_reverb
        try:
            as_reverb.install()
        except ImportError as e:
            print("refused:", e)
        assert not as_reverb.installed()
        """
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "refused: module 'reverb' is already imported" in result.stdout


def test_runs_a_program_and_a_module_with_their_arguments(tmp_path):
    program = tmp_path / "program.py"
    program.write_text("import sys, reverb\nprint(reverb.__name__, __name__, sys.argv)\n")
    package = tmp_path / "somepkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "tool.py").write_text(
        "import sys\nfrom reverb import Client\nprint(Client.__module__, __name__, sys.argv[1:])\n"
    )
    ran = _python("-m", "reverb_tf.as_reverb", str(program), "--flag", "x")
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.strip() == f"reverb_tf __main__ {[str(program), '--flag', 'x']}"
    env_path = f"{tmp_path}{os.pathsep}{ROOT}"
    module = subprocess.run(
        [sys.executable, "-m", "reverb_tf.as_reverb", "-m", "somepkg.tool", "a", "b"],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=env_path),
        check=False,
    )
    assert module.returncode == 0, module.stderr[-3000:]
    assert module.stdout.strip() == "reverb_tf.client __main__ ['a', 'b']"


def test_without_a_program_it_prints_usage():
    for args in ([], ["-m"], ["--help"]):
        result = _python("-m", "reverb_tf.as_reverb", *args)
        assert result.returncode == 1, (args, result.stderr)
        assert "usage: python -m reverb_tf.as_reverb program.py" in result.stderr
