# SPDX-License-Identifier: Apache-2.0
"""Every source file carries the SPDX licence header (CONTRIBUTING.md)."""

import importlib.util
import pathlib
import shutil
import subprocess
import sys
import types

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
pytestmark = [
    pytest.mark.checkout_only(reason="checks the sources of the checkout"),
    # An exported tree (the container build's context) has no history.
    pytest.mark.skipif(
        not (ROOT / ".git").exists() or shutil.which("git") is None,
        reason="lists the sources with git; this tree is not a git checkout",
    ),
]


@pytest.fixture(scope="module")
def spdx() -> types.ModuleType:
    """scripts/spdx_headers.py, imported from its path."""
    spec = importlib.util.spec_from_file_location(
        "spdx_headers", ROOT / "scripts" / "spdx_headers.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_source_file_has_the_header(spdx):
    files = spdx.source_files()
    # The listing itself works: it finds the kinds of files the policy covers.
    suffixes = {path.suffix or path.name for path in files}
    assert {".py", ".sh", ".cc", ".h", "BUILD"} <= suffixes, suffixes
    assert pathlib.Path("scripts/spdx_headers.py") in files
    missing = [
        str(path)
        for path in files
        if not spdx.has_header((ROOT / path).read_text(encoding="utf-8"))
    ]
    assert not missing, (
        f"{len(missing)} source files lack '{spdx.IDENTIFIER}' on their "
        f"first lines; run python3 scripts/spdx_headers.py: {missing}"
    )


@pytest.mark.parametrize(
    "name, text, expected",
    [
        ("a.py", '"""Doc."""\n', '# SPDX-License-Identifier: Apache-2.0\n"""Doc."""\n'),
        (
            "a.sh",
            "#!/usr/bin/env bash\nset -e\n",
            "#!/usr/bin/env bash\n# SPDX-License-Identifier: Apache-2.0\nset -e\n",
        ),
        ("a.cc", "#include <x>\n", "// SPDX-License-Identifier: Apache-2.0\n#include <x>\n"),
        (
            "a.proto",
            'syntax = "proto3";\n',
            '// SPDX-License-Identifier: Apache-2.0\nsyntax = "proto3";\n',
        ),
        ("BUILD", "cc_library()\n", "# SPDX-License-Identifier: Apache-2.0\ncc_library()\n"),
        ("probe.Dockerfile", "FROM x\n", "# SPDX-License-Identifier: Apache-2.0\nFROM x\n"),
        (
            "a.py",
            "#!/usr/bin/env python3\n# -*- coding: utf-8 -*-\nx = 1\n",
            "#!/usr/bin/env python3\n# -*- coding: utf-8 -*-\n"
            "# SPDX-License-Identifier: Apache-2.0\nx = 1\n",
        ),
        ("__init__.py", "", "# SPDX-License-Identifier: Apache-2.0\n"),
    ],
)
def test_header_goes_where_the_policy_says(spdx, name, text, expected):
    path = pathlib.PurePath("pkg") / name
    assert spdx.with_header(text, path) == expected
    assert spdx.has_header(expected)
    assert spdx.with_header(expected, path) == expected  # idempotent


def test_check_mode_lists_a_file_without_the_header(tmp_path):
    """The script's --check fails on a checkout with a source file lacking the header."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "spdx_headers.py", tmp_path / "scripts")
    (tmp_path / "scripts" / "bare.sh").write_text("#!/usr/bin/env bash\ntrue\n")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    script = tmp_path / "scripts" / "spdx_headers.py"
    check = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True)
    assert check.returncode == 1
    assert check.stdout.split() == ["scripts/bare.sh"], check.stdout  # the script has it
    subprocess.run([sys.executable, str(script)], check=True, capture_output=True)
    assert (tmp_path / "scripts" / "bare.sh").read_text() == (
        "#!/usr/bin/env bash\n# SPDX-License-Identifier: Apache-2.0\ntrue\n"
    )
    assert subprocess.run([sys.executable, str(script), "--check"]).returncode == 0
