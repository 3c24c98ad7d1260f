"""Shared pytest fixtures for reverb_tf's Python tests."""
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def bazel_bin() -> pathlib.Path:
    """The Bazel output tree of this workspace (scripts/setup.sh builds it)."""
    path = pathlib.Path(os.environ.get("REVERB_TF_BAZEL_BIN", ROOT / "bazel-bin"))
    if not path.is_dir():
        pytest.fail(f"{path} does not exist: run scripts/setup.sh first")
    return path
