# SPDX-License-Identifier: Apache-2.0
"""The README's quick start runs as written."""

import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_readme_quick_start_runs():
    readme = (ROOT / "README.md").read_text()
    code = re.search(r"## Quick start.*?```python\n(.*?)```", readme, re.S).group(1)
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.split("\n")
    assert lines[0].endswith("[(), (3, 4)]")
    assert lines[1] == "8"
