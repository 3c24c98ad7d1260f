# SPDX-License-Identifier: Apache-2.0
"""TF-Agents' and RLDS's Reverb code paths, unchanged, over reverb_tf.

Both libraries say `import reverb`. In a side venv without dm-reverb
(scripts/setup_tf_agents.sh) they run under `python -m reverb_tf.as_reverb`,
so every `reverb` they import is reverb_tf. What runs is their own code:

* the test modules TF-Agents and RLDS ship for their Reverb paths (replay
  buffer, observers, `ReverbVariableContainer`, RLDS to Reverb, RLDS's
  `pattern_map` over `PatternDataset`): 124 tests written against dm-reverb,
  and one more module run as a program (parallel environments);
* TF-Agents' DQN example (`tf_agents/examples/dqn/dqn_train_eval.py`): a
  Reverb server, the trajectory observer, a prioritized replay dataset and a
  learner, for 300 training steps on CartPole.

Run under dm-reverb 0.14 (TF 2.14) with the same files, those test modules
give the same outcome for every test but three: RLDS's `pattern_map` tests
fail there (its PatternDataset yields no element) and pass here
(docs/compatibility.md).
"""

import os
import pathlib
import subprocess
import textwrap
import xml.etree.ElementTree as ElementTree

import pytest
from integration import side_venv_python

pytestmark = pytest.mark.side_venv(
    reason="TF-Agents 0.19 and RLDS in scripts/setup_tf_agents.sh's venv (Python 3.11)"
)

# The library test modules that exercise Reverb, relative to site-packages.
LIBRARY_TESTS = (
    "tf_agents/replay_buffers/reverb_utils_test.py",
    "tf_agents/replay_buffers/reverb_replay_buffer_test.py",
    "tf_agents/replay_buffers/rlds_to_reverb_test.py",
    "tf_agents/experimental/distributed/reverb_variable_container_test.py",
    "tf_agents/train/utils/replay_buffer_utils_test.py",
    "tf_agents/train/utils/train_utils_test.py",
    "rlds/transformations/pattern_test.py",
)
# Needs TF-Agents' multiprocessing set up by its own test main (it fails
# under pytest with dm-reverb too), so it runs as a program.
PARALLEL_ENV_TEST = "tf_agents/utils/batched_observer_unbatching_test.py"


@pytest.fixture(scope="module")
def tf_agents_python() -> str:
    """The side venv's interpreter (made, or checked, by scripts/setup_tf_agents.sh)."""
    return side_venv_python("REVERB_TF_TF_AGENTS_PYTHON", "setup_tf_agents.sh")


@pytest.fixture(scope="module")
def site_packages(tf_agents_python, package_path) -> pathlib.Path:
    """Where the side venv keeps TF-Agents and RLDS."""
    out = subprocess.run(
        [
            tf_agents_python,
            "-c",
            "import tf_agents, pathlib; print(pathlib.Path(tf_agents.__file__).parent.parent)",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env=_env(package_path),
    )
    return pathlib.Path(out.stdout.strip().splitlines()[-1])


def _env(package_path: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    # The package under test before the main venv's own path entries.
    env["PYTHONPATH"] = package_path
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    # TF-Agents 0.19 builds its networks with Keras 2 (tf_keras).
    env["TF_USE_LEGACY_KERAS"] = "1"
    return env


def _run(python: str, package_path: str, args, cwd, timeout: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        [python, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=cwd,
        env=_env(package_path),
    )


def test_reverb_is_reverb_tf_only_through_the_alias(tf_agents_python, package_path, tmp_path):
    script = textwrap.dedent(
        """
        import importlib.util, sys
        if sys.argv[1] == "plain":
            assert importlib.util.find_spec("reverb") is None, "a module named reverb is installed"
        else:
            import reverb, reverb_tf
            from reverb import structured_writer
            from reverb.cc.checkpointing import checkpoint_pb2
            assert reverb is reverb_tf, reverb
            assert structured_writer is reverb_tf.structured_writer
            assert checkpoint_pb2.__name__ == "reverb_tf.cc.checkpointing.checkpoint_pb2"
            assert reverb_tf.__file__.startswith(sys.argv[2]), (reverb_tf.__file__, sys.argv[2])
        print("checked", sys.argv[1])
        """
    )
    path = tmp_path / "check.py"
    path.write_text(script)
    plain = _run(tf_agents_python, package_path, [str(path), "plain"], tmp_path, 120)
    assert plain.returncode == 0, plain.stderr[-3000:]
    aliased = _run(
        tf_agents_python,
        package_path,
        ["-m", "reverb_tf.as_reverb", str(path), "alias", package_path],
        tmp_path,
        120,
    )
    assert aliased.returncode == 0, aliased.stderr[-3000:]
    assert "checked alias" in aliased.stdout


def test_library_reverb_tests_pass(tf_agents_python, package_path, site_packages, tmp_path):
    report = tmp_path / "report.xml"
    result = _run(
        tf_agents_python,
        package_path,
        [
            "-m",
            "reverb_tf.as_reverb",
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-W",
            "ignore",
            f"--junitxml={report}",
            *LIBRARY_TESTS,
        ],
        site_packages,
        280,
    )
    assert report.exists(), (
        f"no report; pytest said:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    cases = ElementTree.parse(report).getroot().iter("testcase")
    outcomes = {}
    for case in cases:
        name = f"{case.get('classname')}.{case.get('name')}"
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        if "skipped" in kinds:
            message = case.find("skipped").get("message", "")
            # tf.test.TestCase.test_session is collected by pytest and skips itself.
            assert "Not a test" in message, f"{name} skipped: {message}"
        outcomes[name] = kinds[0] if kinds else "passed"
    broken = {name: kind for name, kind in outcomes.items() if kind in ("failure", "error")}
    assert not broken, f"{broken}\n{result.stdout[-6000:]}"
    passed = [name for name, kind in outcomes.items() if kind == "passed"]
    assert len(passed) >= 120, f"only {len(passed)} tests ran:\n{result.stdout[-3000:]}"
    for module in LIBRARY_TESTS:
        dotted = module[: -len(".py")].replace("/", ".")
        assert any(name.startswith(dotted) for name in passed), f"no test of {module} passed"
    assert result.returncode == 0, result.stdout[-3000:]


def test_parallel_environment_observer_test_passes(
    tf_agents_python, package_path, site_packages, tmp_path
):
    module = PARALLEL_ENV_TEST[: -len(".py")].replace("/", ".")
    main = tmp_path / "parallel_env_test_main.py"
    main.write_text(
        textwrap.dedent(
            f"""
            import tensorflow as tf
            from tf_agents.system import system_multiprocessing as multiprocessing
            from {module} import *  # the test case, for tf.test.main to find
            if __name__ == "__main__":
                multiprocessing.handle_test_main(tf.test.main)
            """
        )
    )
    result = _run(
        tf_agents_python, package_path, ["-m", "reverb_tf.as_reverb", str(main)], tmp_path, 240
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "Ran 3 tests" in result.stderr and "\nOK" in result.stderr, result.stderr[-4000:]


def test_dqn_example_trains_from_reverb(tf_agents_python, package_path, site_packages, tmp_path):
    example = site_packages / "tf_agents" / "examples" / "dqn" / "dqn_train_eval.py"
    root = tmp_path / "dqn"
    result = _run(
        tf_agents_python,
        package_path,
        [
            "-m",
            "reverb_tf.as_reverb",
            str(example),
            f"--root_dir={root}",
            "--num_iterations=300",
            "--eval_interval=150",
            "--gin_bindings=train_eval.initial_collect_steps=200",
            "--gin_bindings=train_eval.eval_episodes=2",
            "--gin_bindings=train_eval.policy_save_interval=150",
        ],
        tmp_path,
        280,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    log = result.stdout + result.stderr
    # The learner reached its last step: each one sampled a batch from the
    # example's Reverb table, which the observer filled.
    assert "Step: 300" in log, log[-4000:]
    assert (root / "policies" / "checkpoints" / "policy_checkpoint_0000000300").is_dir()
