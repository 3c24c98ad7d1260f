#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the reverb_tf wheel and tests it in a brand-new venv:
#
#   bash scripts/build_wheel.sh                 # for requirements.txt's TensorFlow -> dist/
#   bash scripts/build_wheel.sh --tf 2.20.0     # for another one -> dist/tf-2.20.0/
#
# Options: --tf VERSION (empty: the project venv's), --distribution NAME
# (with --tf; default tensorflow-cpu), --pytest (also run tests/ against the
# installed wheel; implied by --tf), --pytest-portable (the same without the
# two test files that need Python 3.11 side venvs: check_wheel.sh
# --portable), --no-setup (setup.sh has just run), --no-check (build only:
# pip_package/abi3.Dockerfile tests the wheel in another build root).
#
#   1. scripts/setup.sh (Debian packages, PIC protobuf, .venv, main build);
#   2. with --tf, a build venv $REVERB_TF_CACHE/tf-<NAME>-<VERSION>/venv with
#      that TensorFlow and requirements.txt's nanobind (kept between runs),
#      and Bazel pointed at it (REVERB_TF_PYTHON) with an output base of its
#      own next to it, so the main build's outputs stay as they are (the
#      shared --disk_cache still serves every action that does not depend on
#      TensorFlow); the TF-dependent native test (//tests/native) runs;
#   3. bazel run //pip_package:build_pip_package (docs/packaging.md);
#   4. scripts/check_wheel.sh: a brand-new venv with only that TensorFlow,
#      the wheel, the smoke test (and the pytest suite).
# scripts/test.sh (CI) runs it with --no-setup; pip_package/Dockerfile with
# --pytest.
# A Python of 3.12 or newer builds the extension on the stable ABI
# (--config=abi3): one cp312-abi3 wheel for CPython 3.12 and every later
# one; 3.11 builds a cp311 wheel. REVERB_TF_ABI3=0 or 1 overrides that.
# REVERB_TF_PYTHON_HEADERS=DIR (another CPython's headers, 3.12 or newer)
# compiles the extension against those on the stable ABI whatever the
# build venv's Python: how Debian 12 (glibc 2.36, manylinux_2_34) makes the
# cp312-abi3 wheel (pip_package/abi3.Dockerfile); this venv cannot install
# that wheel, so use it with --no-check.
# Prints the wheel's size and the time of each step.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${REVERB_TF_CACHE:-${HOME}/.cache/reverb_tf}"
PYTHON="${REVERB_TF_BASE_PYTHON:-python3}"
log() { printf '[build_wheel %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

tf_version=""; distribution="tensorflow-cpu"; pytest=(); setup=1; check=1
while (( $# )); do
  case "$1" in
    --tf) tf_version="$2"; shift 2 ;;
    --distribution) distribution="$2"; shift 2 ;;
    --pytest) pytest=(--pytest); shift ;;
    --pytest-portable) pytest=(--pytest --portable); shift ;;
    --no-setup) setup=0; shift ;;
    --no-check) check=0; shift ;;
    *) echo "usage: build_wheel.sh [--tf VERSION [--distribution NAME]]" \
            "[--pytest | --pytest-portable] [--no-setup] [--no-check]" >&2
       exit 2 ;;
  esac
done

timings=()
step_start=${SECONDS}
step() { timings+=("$1: $(( SECONDS - step_start )) s"); step_start=${SECONDS}; }

if (( setup )); then
  bash "${ROOT}/scripts/setup.sh"
  step "setup.sh"
fi
cd "${ROOT}"

bazel_startup=()
bazel_flags=(--noshow_progress --ui_event_filters=-info,-debug)
abi3="${REVERB_TF_ABI3:-auto}"
if [[ -n "${REVERB_TF_PYTHON_HEADERS:-}" ]]; then
  log "the extension against the Python headers in ${REVERB_TF_PYTHON_HEADERS}"
  bazel_flags+=(--repo_env=REVERB_TF_PYTHON_HEADERS="$(realpath "${REVERB_TF_PYTHON_HEADERS}")")
  [[ "${abi3}" != auto ]] || abi3=1
elif [[ "${abi3}" == auto ]]; then
  abi3=0
  if "${PYTHON}" -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then abi3=1; fi
fi
if [[ "${abi3}" == 1 ]]; then
  log "the extension on the stable ABI (--config=abi3): a cp312-abi3 wheel"
  bazel_flags+=(--config=abi3)
fi
# requirements.txt's pins, or for a Python with an overlay
# (requirements-pyX.Y.txt) its changes of them: scripts/pins.sh.
pins="$(mktemp)"
trap 'rm -f "${pins}"' EXIT
bash scripts/pins.sh "${PYTHON}" > "${pins}"
if [[ -z "${tf_version}" ]]; then
  outdir="dist"
  tf_requirement="$(grep -iE '^tensorflow([-_]cpu)?==' "${pins}")"
  check_args=(--constraints "${pins}" "${pytest[@]}")
else
  tf_requirement="${distribution}==${tf_version}"
  work="${CACHE}/tf-${distribution}-${tf_version}"
  venv="${work}/venv"
  nanobind_pin="$(grep -i '^nanobind==' "${pins}")"
  if [[ "$(cat "${venv}/.installed" 2>/dev/null)" != "${tf_requirement} ${nanobind_pin}" ]]; then
    log "build venv ${venv}: ${tf_requirement} ${nanobind_pin}"
    rm -rf "${venv}"
    mkdir -p "${work}"
    "${PYTHON}" -m venv "${venv}"
    "${venv}/bin/pip" install -q --disable-pip-version-check "${tf_requirement}" "${nanobind_pin}"
    echo "${tf_requirement} ${nanobind_pin}" > "${venv}/.installed"
  fi
  step "build venv"
  outdir="dist/tf-${tf_version}"
  check_args=("${pytest[@]:---pytest}")
  bazel_startup=(--output_base="${work}/bazel")
  # No bazel-* symlinks: they would point the checkout's bazel-bin here.
  bazel_flags+=(--symlink_prefix=/ --repo_env=REVERB_TF_PYTHON="${venv}/bin/python")
  trap 'rm -f "${pins}"; bazel "${bazel_startup[@]}" shutdown 2>/dev/null || true' EXIT
  log "bazel test //tests/native/... against ${tf_requirement}"
  bazel "${bazel_startup[@]}" test "${bazel_flags[@]}" //tests/native/...
  step "bazel build and native test"
fi

wheel="$(bazel "${bazel_startup[@]}" run "${bazel_flags[@]}" \
           //pip_package:build_pip_package -- "${outdir}" | tail -n 1)"
log "built ${wheel}: $(du -h "${wheel}" | cut -f1)"
step "wheel"

if (( ! check )); then
  log "not tested here (--no-check): ${wheel}"
  log "done: $(printf '%s; ' "${timings[@]}")"
  exit 0
fi
if [[ " ${check_args[*]} " == *" --pytest "* && " ${check_args[*]} " != *" --portable "* ]]; then
  # The differential tests of tests/compat compare with dm-reverb 0.14;
  # tests/test_without_tensorflow.py runs JAX and PyTorch in a venv without TF.
  if [[ -z "${REVERB_TF_ORACLE_PYTHON:-}" ]]; then
    REVERB_TF_ORACLE_PYTHON="$(bash scripts/setup_oracle.sh)"
    export REVERB_TF_ORACLE_PYTHON
    step "dm-reverb oracle venv"
  fi
  if [[ -z "${REVERB_TF_INTEROP_PYTHON:-}" ]]; then
    REVERB_TF_INTEROP_PYTHON="$(bash scripts/setup_interop.sh)"
    export REVERB_TF_INTEROP_PYTHON
    step "JAX and PyTorch venv"
  fi
fi
bash scripts/check_wheel.sh "${wheel}" "${tf_requirement}" "${check_args[@]}"
step "fresh venv and tests"

log "done for ${tf_requirement}: $(printf '%s; ' "${timings[@]}")"
