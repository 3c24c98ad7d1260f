#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Line coverage of the C++ code (gcov, through gcovr) and of the Python
# package (coverage.py), for the figures quoted in issues and docs. Not part
# of the CI suite: run on demand (about 10 minutes on 2 cores).
#
# C++: every C++ test (not what pytest runs through the .so files: the
# binding, the TF facade and the server binary show 0% here), built with --coverage in an output base of its own
# ($REVERB_TF_CACHE/bazel-coverage), unsandboxed so that the counters land
# beside the objects. Python: the pytest suite (without the dm-reverb
# differential tests, which exercise the same code through child processes).
#
# Usage: bash scripts/coverage.sh [--no-setup]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${REVERB_TF_CACHE:-${HOME}/.cache/reverb_tf}"
if [[ "${1:-}" != "--no-setup" ]]; then
  bash "${ROOT}/scripts/setup.sh"
fi
cd "${ROOT}"
PY="${ROOT}/.venv/bin/python"
"${PY}" -m pip install -q "coverage==7.6.10" "gcovr==8.2"

BAZEL=(bazel --output_base="${CACHE}/bazel-coverage")
execroot="$("${BAZEL[@]}" info execution_root 2>/dev/null)"
find "${execroot}/bazel-out" -name '*.gcda' -delete 2>/dev/null || true
"${BAZEL[@]}" test --symlink_prefix=/ --spawn_strategy=standalone --nocache_test_results \
  --copt=--coverage --copt=-fprofile-abs-path --copt=-O0 --linkopt=--coverage \
  --noshow_progress --ui_event_filters=-info,-debug //reverb_tf/cc/... >/dev/null || true
# Each test wrote its counters under its own runfiles tree (the objects'
# relative paths): merge them all, then put them beside the .gcno files.
merged="$(mktemp -d)"
for tree in $(find "${execroot}/bazel-out" -path '*.runfiles/reverb_tf' -type d); do
  [[ -d "${tree}/bazel-out" ]] || continue
  # A test that no longer exists (moved or renamed) left a tree without
  # counters; gcov-tool cannot merge an empty tree.
  [[ -n "$(find "${tree}/bazel-out" -name '*.gcda' -print -quit)" ]] || continue
  if [[ -z "$(ls -A "${merged}")" ]]; then
    cp -r "${tree}/bazel-out" "${merged}/"
  else
    gcov-tool merge "${merged}/bazel-out" "${tree}/bazel-out" -o "${merged}/bazel-out" 2>/dev/null
  fi
done
(cd "${merged}" && find bazel-out -name '*.gcda' -exec cp {} "${execroot}/{}" \;)
rm -rf "${merged}"
echo "C++ line coverage (reverb_tf/cc, tests excluded):"
# gcov names sources through the execroot's symlinks; gcovr resolves them
# into the checkout, so the filter is the checkout's path.
(cd "${execroot}" && "${ROOT}/.venv/bin/gcovr" --root "${ROOT}" --filter "${ROOT}/reverb_tf/cc/" \
  --exclude '.*_test\.cc' --exclude '.*/testing/.*' --exclude '.*/fuzzing/.*' \
  --exclude '.*\.pb\.(h|cc)' --gcov-ignore-errors=no_working_dir_found \
  --gcov-ignore-parse-errors=all --sort uncovered-percent --txt-summary \
  --txt "${CACHE}/coverage-cc.txt" bazel-out 2>/dev/null | tail -4)
"${BAZEL[@]}" shutdown

echo "Python line coverage (reverb_tf/):"
"${PY}" -m coverage erase
"${PY}" -m coverage run --source="${ROOT}/reverb_tf" --omit='*/cc/*_pb2.py,*/cc/proto/*_pb2.py,*/cc/proto/tf_struct_descriptors.py' \
  -m pytest -q -p no:cacheprovider --ignore="${ROOT}/tests/compat" "${ROOT}/tests" >/dev/null || true
"${PY}" -m coverage report --sort=cover > "${CACHE}/coverage-py.txt" || true
tail -1 "${CACHE}/coverage-py.txt"
echo "details: ${CACHE}/coverage-cc.txt, ${CACHE}/coverage-py.txt"
