#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the venv without TensorFlow that tests/test_without_tensorflow.py
# runs reverb_tf in, idempotently: $REVERB_TF_CACHE/interop-venv with the
# pins of tests/interop_requirements.txt (numpy, dm-tree, protobuf, absl-py,
# JAX on the CPU and PyTorch's CPU build; never TensorFlow). The checkout is
# put on its path by the tests, not installed. A second run only checks the
# pins. Prints the venv's python.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${REVERB_TF_CACHE:-${HOME}/.cache/reverb_tf}"
PYTHON="${REVERB_TF_BASE_PYTHON:-python3}"
VENV="${CACHE}/interop-venv"
REQUIREMENTS="${ROOT}/tests/interop_requirements.txt"
log() { printf '[setup_interop %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

want="$(sha256sum "${REQUIREMENTS}" | cut -d' ' -f1)"
if [[ "$(cat "${VENV}/.requirements.sha256" 2>/dev/null)" != "${want}" ]]; then
  log "creating the TF-free venv ${VENV} (JAX, PyTorch CPU; about 1 GB, a few minutes cold)"
  rm -rf "${VENV}"
  mkdir -p "${CACHE}"
  "${PYTHON}" -m venv "${VENV}"
  "${VENV}/bin/pip" install -q --disable-pip-version-check -r "${REQUIREMENTS}"
  if "${VENV}/bin/python" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("tensorflow") is None)'; then
    log "TensorFlow got into ${VENV}; it must not"
    exit 1
  fi
  echo "${want}" > "${VENV}/.requirements.sha256"
fi
echo "${VENV}/bin/python"
