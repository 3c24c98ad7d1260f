#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs a reverb_tf wheel into a brand-new venv that holds only
# TensorFlow, and tests it there, away from the checkout:
#
#   scripts/check_wheel.sh WHEEL TF_REQUIREMENT [--constraints FILE] [--pytest [--portable]]
#
#   1. a new venv $REVERB_TF_CACHE/wheel-check/<TF_REQUIREMENT> gets
#      TF_REQUIREMENT (e.g. tensorflow-cpu==2.21.0) from pip's cache;
#   2. the wheel is installed into it: that must neither remove nor change a
#      package (no second TensorFlow, no other version of it);
#   3. pip_package/smoke_test.py runs from a temporary directory, then
#      pip_package/smoke_test_no_tf.py in a second new venv into which only
#      the wheel was installed (no TensorFlow: it must not bring one);
#   4. with --pytest, pytest runs a copy of tests/ (and README.md, which a
#      test reads) there too, against the installed package; tests marked
#      checkout_only skip (tests/conftest.py). --portable also skips those
#      marked side_venv (their venvs need Python 3.11), for other Pythons.
# --constraints pins TensorFlow's own dependencies (CI passes requirements.txt).
# TF_REQUIREMENT `none`: only the venv without TensorFlow and its smoke test,
# and with --pytest the test files that do not import TensorFlow, there
# (the TF-free suite; the aarch64 wheel's emulated run, docs/packaging.md).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${REVERB_TF_CACHE:-${HOME}/.cache/reverb_tf}"
PYTHON="${REVERB_TF_BASE_PYTHON:-python3}"
log() { printf '[check_wheel %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

wheel="$(realpath "$1")"; tf_requirement="$2"; shift 2
pip_args=(-q --disable-pip-version-check)
run_pytest=0; portable=0
while (( $# )); do
  case "$1" in
    --constraints) pip_args+=(-c "$(realpath "$2")"); shift 2 ;;
    --pytest) run_pytest=1; shift ;;
    --portable) portable=1; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done

# Outside the checkout, so that nothing of it can be imported.
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
if [[ "${tf_requirement}" == none ]]; then
  bare="${CACHE}/wheel-check/no-tensorflow"
  log "a new venv with the wheel only (no TensorFlow): ${bare}"
  rm -rf "${bare}"
  "${PYTHON}" -m venv "${bare}"
  "${bare}/bin/pip" install "${pip_args[@]}" "${wheel}"
  cp "${ROOT}/pip_package/smoke_test_no_tf.py" "${work}/"
  cd "${work}"
  "${bare}/bin/python" smoke_test_no_tf.py
  if (( run_pytest )); then
    mapfile -t test_pins < <(bash "${ROOT}/scripts/pins.sh" "${bare}/bin/python" | grep -iE \
      '^(pytest|portpicker|grpcio-health-checking|grpcio-reflection|prometheus[-_]client|playwright|greenlet|ray)==')
    "${bare}/bin/pip" install "${pip_args[@]}" "${test_pins[@]}"
    cp -r "${ROOT}/tests" "${ROOT}/examples" "${ROOT}/README.md" "${work}/"
    # The TF-free suite: every test file that neither imports TensorFlow
    # nor runs an example that does. REVERB_TF_PYTEST_ARGS: more pytest
    # arguments (emulated_tests.sh deselects what emulation cannot run).
    tf='^\s*(import tensorflow|from tensorflow)'
    mapfile -t tf_examples < <(cd "${work}" && grep -lE "${tf}" examples/*.py | xargs -n 1 basename)
    files=()
    for file in "${work}"/tests/test_*.py "${work}"/tests/*/test_*.py; do
      grep -qE "${tf}" "${file}" && continue
      for example in "${tf_examples[@]}"; do
        grep -qF "\"${example}\"" "${file}" && continue 2
      done
      files+=("${file#"${work}/"}")
    done
    log "pytest without TensorFlow: ${#files[@]} test files (${files[*]})"
    portable_env=()
    (( portable )) && portable_env=(REVERB_TF_TEST_PORTABLE=1)
    read -r -a extra_args <<<"${REVERB_TF_PYTEST_ARGS:-}"
    env REVERB_TF_TEST_INSTALLED=1 "${portable_env[@]}" \
      "${bare}/bin/python" -m pytest -q -rfEs -p no:cacheprovider "${extra_args[@]}" "${files[@]}"
  fi
  exit 0
fi

venv="${CACHE}/wheel-check/${tf_requirement//[^A-Za-z0-9.]/-}"
log "a new venv with ${tf_requirement} only: ${venv}"
rm -rf "${venv}"
mkdir -p "$(dirname "${venv}")"
"${PYTHON}" -m venv "${venv}"
"${venv}/bin/pip" install "${pip_args[@]}" "${tf_requirement}"
"${venv}/bin/pip" freeze --all | sort > "${venv}/before-wheel.txt"

log "installing $(basename "${wheel}")"
"${venv}/bin/pip" install "${pip_args[@]}" "${wheel}"
"${venv}/bin/pip" freeze --all | sort > "${venv}/after-wheel.txt"
changed="$(comm -23 "${venv}/before-wheel.txt" "${venv}/after-wheel.txt")"
added="$(comm -13 "${venv}/before-wheel.txt" "${venv}/after-wheel.txt")"
if [[ -n "${changed}" ]] || grep -qi '^tensorflow' <<<"${added}"; then
  echo "installing the wheel changed the venv's TensorFlow or its dependencies:" >&2
  echo "removed or replaced: ${changed:-nothing}; added: ${added}" >&2
  exit 1
fi
log "the wheel added only: $(tr '\n' ' ' <<<"${added}")"

cp "${ROOT}/pip_package/smoke_test.py" "${work}/"
cd "${work}"
log "smoke test"
TF_CPP_MIN_LOG_LEVEL=2 "${venv}/bin/python" smoke_test.py

# The same wheel where TensorFlow is not installed: `pip install WHEEL` must
# bring no TensorFlow, and the core must serve, write and sample.
bare="${CACHE}/wheel-check/no-tensorflow"
log "a new venv with the wheel only (no TensorFlow): ${bare}"
rm -rf "${bare}"
"${PYTHON}" -m venv "${bare}"
"${bare}/bin/pip" install -q --disable-pip-version-check "${wheel}"
cp "${ROOT}/pip_package/smoke_test_no_tf.py" "${work}/"
"${bare}/bin/python" smoke_test_no_tf.py
site() { "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
log "installed size: without TensorFlow $(du -sh "$(site "${bare}")" | cut -f1)," \
    "with ${tf_requirement} $(du -sh "$(site "${venv}")" | cut -f1)"

if (( run_pytest )); then
  # What the tests import besides TensorFlow and reverb_tf, pinned as in CI
  # (requirements.txt, through scripts/pins.sh for this venv's Python).
  mapfile -t test_pins < <(bash "${ROOT}/scripts/pins.sh" "${venv}/bin/python" | grep -iE \
    '^(pytest|portpicker|grpcio-health-checking|grpcio-reflection|prometheus[-_]client|playwright|greenlet|ray)==')
  "${venv}/bin/pip" install "${pip_args[@]}" "${test_pins[@]}"
  # examples/: scenarios of the differential tests run them.
  cp -r "${ROOT}/tests" "${ROOT}/examples" "${ROOT}/README.md" "${work}/"
  # Where a test can run is a marker it carries (tests/conftest.py):
  # checkout_only tests skip here, and with --portable so do the side_venv
  # ones (their pinned packages exist for Python 3.11 only).
  portable_env=()
  if (( portable )); then
    portable_env=(REVERB_TF_TEST_PORTABLE=1)
    log "portable: without the side_venv tests"
  fi
  log "pytest on a copy of tests/, against the installed wheel"
  read -r -a extra_args <<<"${REVERB_TF_PYTEST_ARGS:-}"
  env REVERB_TF_TEST_INSTALLED=1 "${portable_env[@]}" TF_CPP_MIN_LOG_LEVEL=2 \
    "${venv}/bin/python" -m pytest -q -rfEs -p no:cacheprovider "${extra_args[@]}" \
    "${work}/tests"
fi
