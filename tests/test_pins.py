# SPDX-License-Identifier: Apache-2.0
"""scripts/pins.sh: requirements.txt with a Python's overlay (requirements-pyX.Y.txt).

The interpreter pins.sh asks for its version is a stub that prints one, so
these run without that Python installed.
"""

import pathlib
import re
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.checkout_only(reason="runs scripts/pins.sh on requirements.txt")


def name(line: str) -> str:
    return re.sub(r"[-_.]+", "-", re.split(r"[=<>!~; \[]", line, maxsplit=1)[0]).lower()


def pins(root: pathlib.Path, version: str, tmp_path: pathlib.Path) -> subprocess.CompletedProcess:
    python = tmp_path / f"python{version}"
    python.write_text(f"#!/bin/sh\necho {version}\n")
    python.chmod(0o755)
    return subprocess.run(
        ["bash", str(root / "scripts" / "pins.sh"), str(python)],
        capture_output=True,
        text=True,
    )


def test_without_an_overlay_the_pins_are_requirements_txt(tmp_path):
    result = pins(ROOT, "3.11", tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == (ROOT / "requirements.txt").read_text()


def test_each_overlay_replaces_only_the_lines_it_names(tmp_path):
    for overlay in sorted(ROOT.glob("requirements-py*.txt")):
        check_overlay(overlay, tmp_path)


def check_overlay(overlay: pathlib.Path, tmp_path: pathlib.Path):
    version = overlay.name[len("requirements-py") : -len(".txt")]
    replacing = {
        name(line): line
        for line in overlay.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert replacing, overlay
    result = pins(ROOT, version, tmp_path)
    assert result.returncode == 0, result.stderr
    base = (ROOT / "requirements.txt").read_text().splitlines()
    got = result.stdout.splitlines()
    assert len(got) == len(base)
    for before, after in zip(base, got):
        if before.startswith("#") or not before.strip():
            assert after == before
        else:
            assert after == replacing.get(name(before), before)
    assert {name(line) for line in got} >= set(replacing)


def test_an_overlay_naming_a_package_requirements_txt_lacks_fails(tmp_path):
    root = tmp_path / "root"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "pins.sh", root / "scripts")
    shutil.copy(ROOT / "requirements.txt", root)
    (root / "requirements-py3.99.txt").write_text("# stale\nnot-a-pinned-package==1.0\n")
    result = pins(root, "3.99", tmp_path)
    assert result.returncode != 0
    assert "not-a-pinned-package is not in requirements.txt" in result.stderr
