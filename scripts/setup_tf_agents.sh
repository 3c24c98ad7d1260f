#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the venv in which tests/test_tf_agents.py runs TF-Agents' and RLDS's
# Reverb code paths against reverb_tf, idempotently:
# $REVERB_TF_CACHE/tf-agents-venv. It layers tests/tf_agents_requirements.txt
# (installed with --no-deps, see there) over the main venv, so TensorFlow and
# the build of reverb_tf are the main venv's and are not downloaded twice;
# only numpy and ml-dtypes are its own older copies. dm-reverb is never in
# it: `import reverb` there can only be reverb_tf's alias
# (reverb_tf/as_reverb.py). A second run only checks the pins. Prints the
# venv's python.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${REVERB_TF_CACHE:-${HOME}/.cache/reverb_tf}"
MAIN_PYTHON="${REVERB_TF_MAIN_PYTHON:-${ROOT}/.venv/bin/python}"
VENV="${CACHE}/tf-agents-venv"
REQUIREMENTS="${ROOT}/tests/tf_agents_requirements.txt"
log() { printf '[setup_tf_agents %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

main_site="$("${MAIN_PYTHON}" -c 'import site; print(site.getsitepackages()[0])')"
want="$(cat "${REQUIREMENTS}" <(echo "${main_site}") | sha256sum | cut -d' ' -f1)"
if [[ "$(cat "${VENV}/.requirements.sha256" 2>/dev/null)" != "${want}" ]]; then
  log "creating ${VENV} (TF-Agents, RLDS; about 60 MB over the main venv, a minute cold)"
  rm -rf "${VENV}"
  mkdir -p "${CACHE}"
  "${MAIN_PYTHON}" -m venv "${VENV}"
  own_site="$("${VENV}/bin/python" -c 'import site; print(site.getsitepackages()[0])')"
  # After the venv's own packages, so its numpy wins over the main venv's.
  echo "import site; site.addsitedir('${main_site}')" > "${own_site}/zz_main_venv.pth"
  "${VENV}/bin/pip" install -q --disable-pip-version-check --no-deps -r "${REQUIREMENTS}"
  if "${VENV}/bin/python" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("reverb") is None)'; then
    log "a module named reverb got into ${VENV}; it must not (dm-reverb would shadow the alias)"
    exit 1
  fi
  echo "${want}" > "${VENV}/.requirements.sha256"
fi
echo "${VENV}/bin/python"
