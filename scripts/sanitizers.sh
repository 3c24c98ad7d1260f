#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs every C++ test under AddressSanitizer + UndefinedBehaviorSanitizer
# (the `sanitize` config of .bazelrc), leak checking included, with the
# suppressions in reverb_tf/cc/testing/lsan_suppressions.txt (system
# libraries only). Tests tagged `nosan` measure glibc's heap and are skipped.
# Then the tests tagged `tsan` (the table and cancellation concurrency tests)
# under ThreadSanitizer (the `tsan` config; Debian's absl synchronization is
# annotated for it by reverb_tf/cc/testing/tsan_absl_annotations.cc). Tests
# that run gRPC are not among them: its statically linked, uninstrumented
# internals use absl locks in ways the annotations cannot model.
#
# A Bazel output base of its own ($REVERB_TF_CACHE/bazel-sanitize) keeps the
# instrumented objects apart from the normal build's; the disk cache is
# shared. scripts/test.sh (CI) runs it with --no-setup.
#
# Usage: bash scripts/sanitizers.sh [--no-setup]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${REVERB_TF_CACHE:-${HOME}/.cache/reverb_tf}"
if [[ "${1:-}" != "--no-setup" ]]; then
  bash "${ROOT}/scripts/setup.sh"
fi
cd "${ROOT}"
status=0
# --symlink_prefix=/: no bazel-* links in the checkout; they would point into
# this output base, and the normal build would then walk them as packages.
bazel --output_base="${CACHE}/bazel-sanitize" test --config=sanitize --build_tests_only \
  --symlink_prefix=/ \
  --test_tag_filters=-nosan \
  --test_env=LSAN_OPTIONS="suppressions=${ROOT}/reverb_tf/cc/testing/lsan_suppressions.txt" \
  --noshow_progress --ui_event_filters=-info,-debug //reverb_tf/cc/... || status=$?
testlogs="$(bazel --output_base="${CACHE}/bazel-sanitize" info bazel-testlogs 2>/dev/null)"
"${ROOT}/.venv/bin/python" "${ROOT}/scripts/summarize_test_xml.py" "${testlogs}" \
  $(bazel --output_base="${CACHE}/bazel-sanitize" query \
      'tests(//reverb_tf/cc/...) except attr(tags, nosan, tests(//reverb_tf/cc/...))' \
      2>/dev/null) | sed 's/^gtest:/gtest-asan-ubsan:/'
bazel --output_base="${CACHE}/bazel-sanitize" shutdown

TSAN=(bazel --output_base="${CACHE}/bazel-tsan")
"${TSAN[@]}" test --config=tsan --build_tests_only --symlink_prefix=/ \
  --test_tag_filters=tsan \
  --noshow_progress --ui_event_filters=-info,-debug //reverb_tf/cc/... || status=$?
"${ROOT}/.venv/bin/python" "${ROOT}/scripts/summarize_test_xml.py" \
  "$("${TSAN[@]}" info --config=tsan bazel-testlogs 2>/dev/null)" \
  $("${TSAN[@]}" query 'attr(tags, "\btsan\b", tests(//reverb_tf/cc/...))' 2>/dev/null) \
  | sed 's/^gtest:/gtest-tsan:/'
"${TSAN[@]}" shutdown
exit "${status}"
