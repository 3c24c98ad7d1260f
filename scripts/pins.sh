#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Prints the pinned Python packages for one interpreter: requirements.txt,
# where requirements-pyX.Y.txt (X.Y: that interpreter's version, if the file
# exists) replaces the lines of the packages it names. requirements.txt stays
# the one list of what the project installs; an overlay holds only the pins
# that have no wheel for its Python (requirements-py3.14.txt: TensorFlow and
# h5py). A package in an overlay but not in requirements.txt is an error,
# so a stale overlay cannot add packages.
#
# Usage: bash scripts/pins.sh [PYTHON]   (default: $REVERB_TF_BASE_PYTHON or python3)
# scripts/setup.sh installs its output into .venv; build_wheel.sh takes the
# TensorFlow and nanobind pins from it, check_wheel.sh the tests' pins.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${1:-${REVERB_TF_BASE_PYTHON:-python3}}"
version="$("${PYTHON}" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
overlay="${ROOT}/requirements-py${version}.txt"
if [[ ! -f "${overlay}" ]]; then
  cat "${ROOT}/requirements.txt"
  exit 0
fi
# Names compare as pip compares them (PEP 503: case and -_. runs ignored).
awk -v overlay="$(basename "${overlay}")" '
  function name(line) { sub(/[=<>!~;\[ ].*/, "", line); line = tolower(line);
                        gsub(/[-_.]+/, "-", line); return line }
  NR == FNR { if ($0 !~ /^#/ && NF) pin[name($0)] = $0; next }
  $0 ~ /^#/ || !NF { print; next }
  { n = name($0); if (n in pin) { print pin[n]; used[n] = 1 } else print }
  END { for (n in pin) if (!(n in used)) {
          print overlay ": " n " is not in requirements.txt" > "/dev/stderr"; bad = 1 }
        exit bad }' "${overlay}" "${ROOT}/requirements.txt"
