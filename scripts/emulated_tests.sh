#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Tests the aarch64 wheel in an arm64 Debian root, under qemu-user
# (pip_package/cross.Dockerfile's test stage; scripts/container_build.sh
# --arch arm64). Every program here is an aarch64 one, run by the kernel
# through binfmt_misc.
#
#   bash scripts/emulated_tests.sh DIST TESTS TF_REQUIREMENT
#
# DIST holds the wheel and cross_build.sh's build_info.txt. TESTS:
#   smoke     both smoke tests (without TensorFlow; with TF_REQUIREMENT);
#   tf-free   the smoke test without TensorFlow and the TF-free suite (every
#             test file that does not import TensorFlow) in a venv without it;
#   portable  (auto) tf-free, then TF_REQUIREMENT's venv: its compile flags
#             compared with the ones the op library was built with, the
#             smoke test and the portable pytest suite (check_wheel.sh
#             --pytest --portable).
# Writes DIST/tests.log (everything), DIST/tests.txt (one line per step:
# status and wall time) and DIST/tests.rc; exits 0 so that the wheel and
# the logs are exported even when a test failed (container_build.sh reads
# tests.rc and fails then).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dist="$(realpath "$1")"; tests="$2"; tf_requirement="$3"
log() { printf '[emulated_tests %s] %s\n' "$(date +%H:%M:%S)" "$*" | tee -a "${dist}/tests.log" >&2; }
: > "${dist}/tests.txt"
: > "${dist}/tests.log"
status=0
run_step() {  # NAME COMMAND...
  local name="$1" started=${SECONDS} rc=0
  shift
  log "${name}"
  "$@" >> "${dist}/tests.log" 2>&1 || rc=$?
  printf '%s: %s in %d s\n' "${name}" "$([[ ${rc} == 0 ]] && echo passed || echo "FAILED (${rc})")" \
    $(( SECONDS - started )) | tee -a "${dist}/tests.txt" >&2
  (( rc == 0 )) || status=1
  return 0
}

wheel="$(ls "${dist}"/reverb_tf-*aarch64.whl)"
log "$(uname -m), wheel $(basename "${wheel}")"
# binutils: tests/test_native_linking.py reads the libraries with readelf.
if ! command -v python3 >/dev/null || ! python3 -c 'import ensurepip, venv' 2>/dev/null \
   || ! command -v readelf >/dev/null; then
  run_step "apt-get install python3-venv binutils" bash -c \
    'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv ca-certificates binutils'
fi
echo "interpreter: $(python3 -c 'import platform, sys; print(platform.machine(), sys.version.replace(chr(10), " "))')" \
  | tee -a "${dist}/tests.txt" >&2

check_tf_flags() {
  local venv="${REVERB_TF_CACHE:-${HOME}/.cache/reverb_tf}/wheel-check/${tf_requirement//[^A-Za-z0-9.]/-}"
  local built installed
  built="$(sed -n 's/^tf_cflags: //p' "${dist}/build_info.txt")"
  installed="$(TF_CPP_MIN_LOG_LEVEL=3 "${venv}/bin/python" -c \
    'import tensorflow as tf; print(" ".join(f for f in tf.sysconfig.get_compile_flags() if not f.startswith("-I")))')"
  echo "built with: ${built}; ${tf_requirement} says: ${installed}"
  [[ "${built}" == "${installed}" ]]
}

# What emulation cannot run, each with its reason (printed in tests.txt).
# The wheel is not at fault in any: the first two measure the process's
# memory, and under qemu-user that process is the emulator.
deselect=(
  "tests/test_memory_budget.py::test_the_server_binary_keeps_to_one_malloc_arena_per_core[None]"
  "counts malloc heaps in /proc/PID/maps, which under qemu-user are the emulator's mappings (16 here)"
  "tests/test_out_of_memory.py::test_running_out_of_memory_ends_the_call_with_resource_exhausted_and_the_server_serves_on"
  "sets RLIMIT_AS on the server; qemu-user reserves the guest's address space up front, so the server's own 1 GiB budget refuses first"
  "tests/test_dashboard.py"
  "every test drives Debian's chromium, which the arm64 root does not install"
  "tests/test_package.py::test_datasets_load_lazily_and_are_one_class"
  "loads ReverbDataset, which needs TensorFlow (the TF-free venv has none)"
)
# The last one runs with TensorFlow installed; the others are deselected in
# both runs.
tf_free_args=""; tf_args=""
for (( i = 0; i < ${#deselect[@]}; i += 2 )); do
  tf_free_args+=" --deselect ${deselect[i]}"
  runs="the TF-free run"
  if [[ "${deselect[i]}" != tests/test_package.py::* ]]; then
    tf_args+=" --deselect ${deselect[i]}"; runs="both runs"
  fi
  echo "deselected in ${runs}: ${deselect[i]}: ${deselect[i + 1]}" | tee -a "${dist}/tests.txt" >&2
done

case "${tests}" in
  smoke)
    run_step "smoke without TensorFlow" bash "${ROOT}/scripts/check_wheel.sh" "${wheel}" none
    run_step "smoke with ${tf_requirement}" bash "${ROOT}/scripts/check_wheel.sh" "${wheel}" \
      "${tf_requirement}"
    ;;
  tf-free|portable|auto)
    run_step "TF-free: smoke and pytest without TensorFlow" env REVERB_TF_PYTEST_ARGS="${tf_free_args}" \
      bash "${ROOT}/scripts/check_wheel.sh" "${wheel}" none --pytest --portable
    if [[ "${tests}" != tf-free ]]; then
      run_step "with ${tf_requirement}: smoke and portable pytest" \
        env REVERB_TF_PYTEST_ARGS="${tf_args}" bash "${ROOT}/scripts/check_wheel.sh" "${wheel}" "${tf_requirement}" --pytest --portable
      run_step "TensorFlow compile flags" check_tf_flags
    fi
    ;;
  *) echo "TESTS must be smoke, tf-free, portable or auto, not ${tests}" >&2; status=2 ;;
esac
# The smoke tests' and pytest's closing lines (pytest -q prints no rule).
grep -E '^((no-tensorflow )?smoke: |=* ?[0-9]+ (passed|failed|skipped|deselected|error).* in [0-9.]+s)' \
  "${dist}/tests.log" | tee -a "${dist}/tests.txt" >&2
echo "${status}" > "${dist}/tests.rc"
exit 0
