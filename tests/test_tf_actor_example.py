# SPDX-License-Identifier: Apache-2.0
"""The TF actor example: CartPole in one tf.function writes through graph ops."""

import pathlib
import re
import subprocess
import sys

EXAMPLE = pathlib.Path(__file__).resolve().parent.parent / "examples" / "tf_actor_cartpole.py"


def test_the_tf_actor_example_writes_n_step_items_and_the_learner_updates_them():
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), "--rounds", "4", "--learner_steps", "5"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    actor = re.search(
        r"actor: 4 episodes, (\d+) steps, (\d+) items \((\d+) episodes", result.stdout
    )
    assert actor, result.stdout
    steps, items, episodes = map(int, actor.groups())
    assert items == steps - 4 * 2 and episodes == 4
    learner = re.search(r"learner: 20 steps; (\d+) of (\d+) sampled items", result.stdout)
    assert learner and int(learner.group(1)) > 0, result.stdout
