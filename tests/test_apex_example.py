# SPDX-License-Identifier: Apache-2.0
"""The README's Ape-X example runs on a local Ray cluster and checks its updates."""

import pathlib
import subprocess
import sys

EXAMPLE = pathlib.Path(__file__).resolve().parent.parent / "examples" / "apex_ray.py"


def test_the_apex_example_runs_and_its_updates_land_on_the_owning_shards():
    result = subprocess.run(
        [
            sys.executable,
            str(EXAMPLE),
            "--shards",
            "3",
            "--actors",
            "3",
            "--steps",
            "1000",
            "--learner_steps",
            "20",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "3 shards:" in result.stdout
    assert "every update landed on the shard that holds its key" in result.stdout, result.stdout
