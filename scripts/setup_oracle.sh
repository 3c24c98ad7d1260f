#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the dm-reverb 0.14 "oracle" venv the differential tests
# (tests/compat/) compare reverb_tf against, idempotently:
#   $REVERB_TF_CACHE/dm-reverb-venv  with dm-reverb 0.14.0, TF 2.14 CPU, numpy<2.
# A second run only checks the pins. Prints the venv's python.
set -euo pipefail

CACHE="${REVERB_TF_CACHE:-${HOME}/.cache/reverb_tf}"
PYTHON="${REVERB_TF_BASE_PYTHON:-python3}"
VENV="${CACHE}/dm-reverb-venv"
# psutil and portpicker: benchmarks and scenarios run under this venv need them.
PINS=(dm-reverb==0.14.0 tensorflow-cpu==2.14.0 "numpy<2" psutil portpicker)
log() { printf '[setup_oracle %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

want="${PINS[*]}"
if [[ "$(cat "${VENV}/.pins" 2>/dev/null)" != "${want}" ]]; then
  log "creating the dm-reverb 0.14 venv in ${VENV} (about 1 minute from pip's cache)"
  rm -rf "${VENV}"
  mkdir -p "${CACHE}"
  "${PYTHON}" -m venv "${VENV}"
  "${VENV}/bin/pip" install -q --disable-pip-version-check "${PINS[@]}"
  # Fail here, not in the tests, if the oracle cannot import.
  (cd / && "${VENV}/bin/python" -c "import reverb" 2>/dev/null)
  echo "${want}" > "${VENV}/.pins"
fi
echo "${VENV}/bin/python"
