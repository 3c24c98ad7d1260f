#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Adds the SPDX licence header line to every source file that lacks it.

    python3 scripts/spdx_headers.py           # add it where it is missing
    python3 scripts/spdx_headers.py --check   # only list those files; exit 1 if any

The policy (CONTRIBUTING.md): every source file under SOURCE_DIRS carries
`SPDX-License-Identifier: Apache-2.0` as a comment on its first line, or on
the line after a `#!` line (and after a Python coding cookie, which must
stay on line 1 or 2). tests/test_spdx_headers.py enforces it.
"""

import argparse
import pathlib
import subprocess
import sys
from typing import List, Optional

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOURCE_DIRS = [
    "reverb_tf",
    "ops",
    "kernels",
    "tests",
    "bench",
    "scripts",
    "pip_package",
    "examples",
]
IDENTIFIER = "SPDX-License-Identifier: Apache-2.0"
SLASH_COMMENT_SUFFIXES = {".cc", ".h", ".proto"}
HASH_COMMENT_SUFFIXES = {".py", ".sh", ".bzl"}
HASH_COMMENT_NAMES = {"BUILD", "Dockerfile"}
# How many leading lines may come before the header (shebang, coding cookie).
HEADER_WINDOW = 3


def comment_prefix(path: pathlib.PurePath) -> Optional[str]:
    """The line-comment marker of a source file, or None if it is not one."""
    if path.suffix in SLASH_COMMENT_SUFFIXES:
        return "//"
    if (
        path.suffix in HASH_COMMENT_SUFFIXES
        or path.name in HASH_COMMENT_NAMES
        or path.name.endswith(".Dockerfile")
    ):
        return "#"
    return None


def source_files(root: pathlib.Path = ROOT) -> List[pathlib.Path]:
    """Tracked and new (not ignored) source files under SOURCE_DIRS, relative to root."""
    listed = subprocess.run(
        [
            "git",
            "-C",
            str(root),
            "ls-files",
            "--cached",
            "--others",
            "--exclude-standard",
            "--",
            *SOURCE_DIRS,
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split("\n")
    return sorted(
        {
            pathlib.Path(name)
            for name in listed
            if name and comment_prefix(pathlib.Path(name)) is not None and (root / name).is_file()
        }
    )


def has_header(text: str) -> bool:
    """Whether the identifier is on one of the first lines."""
    return any(IDENTIFIER in line for line in text.splitlines()[:HEADER_WINDOW])


def with_header(text: str, path: pathlib.PurePath) -> str:
    """text with the header line inserted where the policy puts it (unchanged if present)."""
    if has_header(text):
        return text
    prefix = comment_prefix(path)
    if prefix is None:
        raise ValueError(f"{path} is not a source file")
    lines = text.splitlines(keepends=True)
    position = 0
    if lines and lines[0].startswith("#!"):
        position = 1
    # PEP 263: a coding cookie must stay on line 1 or 2.
    if (
        path.suffix == ".py"
        and len(lines) > position
        and position < 2
        and lines[position].startswith("#")
        and "coding" in lines[position]
    ):
        position += 1
    lines.insert(position, f"{prefix} {IDENTIFIER}\n")
    return "".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="list the files without the header; change nothing"
    )
    args = parser.parse_args()
    missing = [
        path for path in source_files() if not has_header((ROOT / path).read_text(encoding="utf-8"))
    ]
    for path in missing:
        if args.check:
            print(path)
        else:
            full = ROOT / path
            full.write_text(with_header(full.read_text(encoding="utf-8"), path), encoding="utf-8")
            print(f"added the header to {path}")
    if args.check and missing:
        sys.exit(1)


if __name__ == "__main__":
    main()
