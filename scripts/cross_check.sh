#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# CI's short check of the Linux aarch64 target (docs/packaging.md): every
# C++ source of the core, the server and their tests compiles for aarch64,
# on every run (but for the few below). The full aarch64 wheel (container_build.sh --arch arm64:
# a cross build root with arm64 libraries, then tests under qemu-user) takes
# 12 minutes and stays a script; what rots between its runs is code that
# only builds on x86_64 (an intrinsic, an x86 header, an assumption about
# `char` or `long double`), and that a compile finds.
#   1. Debian's aarch64 cross compiler on this machine (g++-aarch64-linux-gnu:
#      an amd64 package with its own aarch64 glibc headers; it adds no
#      architecture to dpkg), installed if missing;
#   2. Bazel compiles, and does not link, every C++ target under reverb_tf/
#      with the cross toolchain (third_party/toolchains/aarch64) in an output
#      base of its own, objects only (--output_groups=compilation_outputs).
#      Library headers are the host's (absl, gRPC, protobuf and re2's are the
#      same for every architecture in Debian); linking would need the arm64
#      libraries, which only the cross build root has. The extension is left
#      out (Python's pyconfig.h is per architecture), as are TLS and tokens
#      (reverb_tf/cc/security: OpenSSL's opensslconf.h is per architecture,
#      and only libssl-dev:arm64 has aarch64's) and the TensorFlow ops
#      (aarch64 TensorFlow headers come from a 270 MB wheel).
# Warm (disk cache) about 10 s; cold about 3 min, plus the package download.
# Prints a PASS/FAIL line per step and "cross_check: N passed, N failed";
# exits non-zero on a failure.
#
# Usage: bash scripts/cross_check.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${REVERB_TF_CACHE:-${HOME}/.cache/reverb_tf}"
TRIPLET=aarch64-linux-gnu

passed=0; failed=0
result() {  # NAME STATUS SECONDS
  if (( $2 == 0 )); then
    passed=$(( passed + 1 )); echo "cross_check: PASS $1 ($3 s)"
  else
    failed=$(( failed + 1 )); echo "cross_check: FAIL $1 ($3 s)"
  fi
}
finish() {
  echo "cross_check: ${passed} passed, ${failed} failed"
  (( failed == 0 ))
  exit
}
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

# 1. The cross compiler.
start=${SECONDS}; rc=0
if ! command -v "${TRIPLET}-g++" >/dev/null; then
  { apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      "g++-${TRIPLET}"; } > "${work}/apt.log" 2>&1 || rc=$?
fi
result "$("${TRIPLET}-g++" --version 2>/dev/null | head -n 1 || echo "${TRIPLET}-g++ missing")" \
  "${rc}" $(( SECONDS - start ))
if (( rc != 0 )); then tail -n 20 "${work}/apt.log" >&2; finish; fi

# 2. Every C++ target under reverb_tf/ but the extension, compiled for aarch64.
start=${SECONDS}; rc=0
cd "${ROOT}"
targets="$(bazel query --noshow_progress \
  'kind("cc_(library|binary|test)", //reverb_tf/...) except //reverb_tf/cc/python/...
   except //reverb_tf/cc/security/...' \
  2> "${work}/query.log")" || rc=$?
if (( rc == 0 )); then
  # The host venv and Debian 12's packages, as for the native build
  # (.bazelrc.local); only the target toolchain differs.
  timeout --kill-after=10 1200 bazel --output_base="${CACHE}/cross-check/bazel" \
    --max_idle_secs=30 build --noshow_progress --ui_event_filters=-info,-debug \
    --symlink_prefix=/ --keep_going \
    --crosstool_top=//third_party/toolchains/aarch64:toolchain --cpu="${TRIPLET%%-*}" \
    --host_crosstool_top=@bazel_tools//tools/cpp:toolchain \
    --output_groups=compilation_outputs ${targets} > "${work}/bazel.log" 2>&1 || rc=$?
fi
count="$(wc -w <<<"${targets}")"
result "${count} C++ targets under reverb_tf/ (tests included) compile for ${TRIPLET}" "${rc}" $(( SECONDS - start ))
if (( rc != 0 )); then
  grep -E 'error|ERROR' "${work}/query.log" "${work}/bazel.log" | head -n 30 >&2 || true
  tail -n 20 "${work}/bazel.log" >&2
fi
finish
