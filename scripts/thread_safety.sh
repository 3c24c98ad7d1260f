#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks the locking annotations of the C++ code (ABSL_GUARDED_BY,
# ABSL_EXCLUSIVE_LOCKS_REQUIRED, ABSL_LOCKS_EXCLUDED, ...) with clang's
# thread-safety analysis: every target under //reverb_tf/cc is compiled by
# clang with -Wthread-safety, whose findings fail the build (the
# `thread_safety` config of .bazelrc). gcc, which builds everything else,
# ignores the annotations; without this they would be comments.
#
# Installs clang and its sanitizer headers from Debian if missing
# (idempotent) and builds in an output base of its own
# ($REVERB_TF_CACHE/bazel-clang); the disk cache is shared, so a warm run
# recompiles only what changed. scripts/test.sh (CI) runs it
# with --no-setup.
#
# Usage: bash scripts/thread_safety.sh [--no-setup]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${REVERB_TF_CACHE:-${HOME}/.cache/reverb_tf}"
if [[ "${1:-}" != "--no-setup" ]]; then
  bash "${ROOT}/scripts/setup.sh"
fi
log() { echo "[thread_safety $(date +%H:%M:%S)] $*"; }
SUDO=""
[[ "$(id -u)" != 0 ]] && SUDO="sudo"
# libclang-rt-14-dev: the sanitizer headers, which the TSan annotation shim
# (cc/testing/tsan_absl_annotations.cc) includes; a fresh machine lacks them.
missing=()
for pkg in clang-14 libclang-rt-14-dev; do
  if [[ "$(dpkg-query -W -f='${db:Status-Status}' "${pkg}" 2>/dev/null)" != "installed" ]]; then
    missing+=("${pkg}")
  fi
done
if (( ${#missing[@]} )); then
  log "apt-get install ${missing[*]}"
  ${SUDO} apt-get update -qq
  DEBIAN_FRONTEND=noninteractive ${SUDO} apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi
cd "${ROOT}"
BAZEL=(bazel --output_base="${CACHE}/bazel-clang")
log "build //reverb_tf/cc/... with clang -Wthread-safety -Werror=thread-safety"
status=0
# --symlink_prefix=/: no bazel-* links into this output base in the checkout.
"${BAZEL[@]}" build --config=thread_safety --repo_env=CC=clang-14 --symlink_prefix=/ --keep_going \
  --noshow_progress --ui_event_filters=-info,-debug //reverb_tf/cc/... || status=$?
"${BAZEL[@]}" shutdown
if (( status == 0 )); then
  echo "thread-safety: 1 passed, 0 failed"
else
  echo "thread-safety: 0 passed, 1 failed"
fi
exit "${status}"
