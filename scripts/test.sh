#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the whole test suite: sets up (idempotently), checks the formatting
# (scripts/format.sh --check), builds everything with Bazel offline, runs
# every C++ test (also under ASan + UBSan), checks the
# locking annotations with clang's thread-safety analysis, fuzzes the
# wire decoding paths for 45 s, then the Python tests (including the
# differential tests against dm-reverb 0.14 in its own venv, made by
# scripts/setup_oracle.sh), checks the container build's base images, the
# stable-ABI extension under Python 3.14 and an aarch64 compile of the C++
# (container_check.sh, abi3_check.sh, cross_check.sh), then builds the wheel
# and smoke-tests it in a brand-new venv (scripts/build_wheel.sh).
# Prints one "N passed, N failed" line per runner; exits non-zero on failure.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Seconds per stage, printed at the end: where CI's time goes.
timings=()
stage_start=${SECONDS}
stage() { timings+=("$1 $(( SECONDS - stage_start ))s"); stage_start=${SECONDS}; }
trap 'echo "stage times: ${timings[*]:-none} (total ${SECONDS}s)"' EXIT
bash "${ROOT}/scripts/setup.sh"
# dm-reverb 0.14 in a side venv: the oracle of the differential tests.
REVERB_TF_ORACLE_PYTHON="$(bash "${ROOT}/scripts/setup_oracle.sh")"
export REVERB_TF_ORACLE_PYTHON
# A venv without TensorFlow, with JAX and PyTorch (CPU): tests/test_without_tensorflow.py.
REVERB_TF_INTEROP_PYTHON="$(bash "${ROOT}/scripts/setup_interop.sh")"
export REVERB_TF_INTEROP_PYTHON
# TF-Agents and RLDS over the main venv, without dm-reverb: tests/test_tf_agents.py.
REVERB_TF_TF_AGENTS_PYTHON="$(bash "${ROOT}/scripts/setup_tf_agents.sh")"
export REVERB_TF_TF_AGENTS_PYTHON
cd "${ROOT}"
stage setup

status=0
# The house rules: clang-format and ruff would change nothing (seconds).
bash "${ROOT}/scripts/format.sh" --check || status=$?
stage format

bazel test --noshow_progress --ui_event_filters=-info,-debug //... || status=$?
"${ROOT}/.venv/bin/python" "${ROOT}/scripts/summarize_test_xml.py" \
  "$(bazel info bazel-testlogs 2>/dev/null)" $(bazel query 'tests(//...)' 2>/dev/null)
stage gtest

# The same C++ tests under ASan + UBSan (their own Bazel output base).
bash "${ROOT}/scripts/sanitizers.sh" --no-setup || status=$?
stage sanitizers
# clang's thread-safety analysis of the locking annotations, as errors.
bash "${ROOT}/scripts/thread_safety.sh" --no-setup || status=$?
stage thread_safety
# Coverage-guided fuzzing of the wire decoding paths, 45 s (libFuzzer).
bash "${ROOT}/scripts/fuzz.sh" --no-setup || status=$?
stage fuzz

# Test artifacts (the dashboard screenshot) go beside the caches, not into
# the checkout.
export REVERB_TF_ARTIFACTS="${REVERB_TF_ARTIFACTS:-${REVERB_TF_CACHE:-${HOME}/.cache/reverb_tf}/artifacts}"
# Each test is bounded by the watchdog of tests/conftest.py; this bounds
# what lies outside tests (collection, interpreter exit). The suite takes
# 4-7 minutes.
if compgen -G "${ROOT}/tests/test_*.py" >/dev/null; then
  timeout --kill-after=30 1800 "${ROOT}/.venv/bin/python" -m pytest -q -rs --durations=8 \
    "${ROOT}/tests" || status=$?
else
  # Without this, moving the tests would leave CI green with none run.
  echo "no Python tests: nothing matches ${ROOT}/tests/test_*.py" >&2
  status=1
fi
stage pytest

# The container build's base image and a probe build in it, 10 to 15 s warm,
# for Debian 12 (Python 3.11) and sid (Python 3.14, the newest wheel's root;
# about a minute cold, for its base).
bash "${ROOT}/scripts/container_check.sh" || status=$?
bash "${ROOT}/scripts/container_check.sh" --suite sid || status=$?
stage container_check

# The wheel targets this machine cannot run natively, kept compiling: the
# extension on the stable ABI (cp312-abi3) built against Python 3.14's
# headers and serving under 3.14 in the sid base, and every C++ source of
# the core compiled for aarch64. About 20 s warm, 6 to 7 min cold.
bash "${ROOT}/scripts/abi3_check.sh" || status=$?
bash "${ROOT}/scripts/cross_check.sh" || status=$?
stage targets

# The wheel, built and smoke-tested in a brand-new venv.
bash "${ROOT}/scripts/build_wheel.sh" --no-setup || status=$?
stage wheel
exit "${status}"
