#!/usr/bin/env bash
# Builds the reverb_tf wheel against another TensorFlow than the project's
# venv has, and tests it:
#
#   bash scripts/build_for_tf.sh 2.20.0 [DISTRIBUTION]   # default tensorflow-cpu
#
#   1. scripts/setup.sh (Debian packages, PIC protobuf, .bazelrc.local);
#   2. a build venv $REVERB_TF_CACHE/tf-<DISTRIBUTION>-<VERSION>/venv with that
#      TensorFlow and requirements.txt's pybind11 (kept between runs);
#   3. Bazel pointed at that venv's python (REVERB_TF_PYTHON), with an output
#      base of its own next to the venv, so that the main build's outputs stay
#      as they are; the shared --disk_cache of .bazelrc.local still serves
#      every action that does not depend on TensorFlow. The TF-dependent
#      native test (//tests/native) runs; then the wheel goes to
#      dist/tf-<VERSION>/;
#   4. scripts/check_wheel.sh installs it into a brand-new venv with the same
#      TensorFlow and runs the smoke test and the pytest suite there.
# Prints the time of each step.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${REVERB_TF_CACHE:-${HOME}/.cache/reverb_tf}"
PYTHON="${REVERB_TF_BASE_PYTHON:-python3}"
log() { printf '[build_for_tf %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

version="${1:?usage: build_for_tf.sh TF_VERSION [DISTRIBUTION]}"
distribution="${2:-tensorflow-cpu}"
requirement="${distribution}==${version}"
work="${CACHE}/tf-${distribution}-${version}"
timings=()
step() { timings+=("$1: $(( SECONDS - step_start )) s"); step_start=${SECONDS}; }
step_start=${SECONDS}

bash "${ROOT}/scripts/setup.sh"
step "setup.sh"

venv="${work}/venv"
pybind11_pin="$(grep -i '^pybind11==' "${ROOT}/requirements.txt")"
if [[ "$(cat "${venv}/.installed" 2>/dev/null)" != "${requirement} ${pybind11_pin}" ]]; then
  log "build venv ${venv}: ${requirement} ${pybind11_pin}"
  rm -rf "${venv}"
  mkdir -p "${work}"
  "${PYTHON}" -m venv "${venv}"
  "${venv}/bin/pip" install -q --disable-pip-version-check "${requirement}" "${pybind11_pin}"
  echo "${requirement} ${pybind11_pin}" > "${venv}/.installed"
fi
step "build venv"

cd "${ROOT}"
# No bazel-* symlinks: they would point the checkout's bazel-bin here.
bazel_startup=(--output_base="${work}/bazel")
bazel_flags=(--noshow_progress --ui_event_filters=-info,-debug --symlink_prefix=/
             --repo_env=REVERB_TF_PYTHON="${venv}/bin/python")
trap 'bazel "${bazel_startup[@]}" shutdown 2>/dev/null || true' EXIT
log "bazel test //tests/native/... for ${requirement}"
bazel "${bazel_startup[@]}" test "${bazel_flags[@]}" //tests/native/...
step "bazel build and native test"

wheel="$(bazel "${bazel_startup[@]}" run "${bazel_flags[@]}" \
           //pip_package:build_pip_package -- "dist/tf-${version}" | tail -n 1)"
log "built ${wheel}: $(du -h "${wheel}" | cut -f1)"
step "wheel"

bash "${ROOT}/scripts/check_wheel.sh" "${wheel}" "${requirement}" --pytest
step "fresh venv, smoke test and pytest"

log "done for ${requirement}:"
printf '  %s\n' "${timings[@]}" >&2
