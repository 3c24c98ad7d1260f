#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Coverage-guided fuzzing of the wire decoding and validation paths
# (reverb_tf/cc/fuzzing/wire_fuzzer.cc) with libFuzzer, ASan and UBSan.
#
# Installs clang and libFuzzer from Debian if missing (idempotent), builds the
# fuzzer with Bazel in an output base of its own ($REVERB_TF_CACHE/bazel-fuzz),
# seeds a corpus with valid requests, and fuzzes for FUZZ_SECONDS (default
# 45: the corpus carries over between runs, so each CI run goes deeper from
# where the last stopped; run longer on demand: FUZZ_SECONDS=3600). The
# corpus grows across runs in $REVERB_TF_CACHE/fuzz-corpus; a crashing input
# is kept in $REVERB_TF_CACHE/fuzz-artifacts and fails the run.
#
# Usage: bash scripts/fuzz.sh [--no-setup]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${REVERB_TF_CACHE:-${HOME}/.cache/reverb_tf}"
SECONDS_TO_FUZZ="${FUZZ_SECONDS:-45}"
if [[ "${1:-}" != "--no-setup" ]]; then
  bash "${ROOT}/scripts/setup.sh"
fi
log() { echo "[fuzz $(date +%H:%M:%S)] $*"; }

SUDO=""
[[ "$(id -u)" != 0 ]] && SUDO="sudo"
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
BAZEL=(bazel --output_base="${CACHE}/bazel-fuzz")
log "build //reverb_tf/cc/fuzzing:wire_fuzzer (clang, --config=fuzz)"
# --symlink_prefix=/: no bazel-* links into this output base in the checkout.
"${BAZEL[@]}" build --config=fuzz --repo_env=CC=clang-14 --symlink_prefix=/ \
  --noshow_progress --ui_event_filters=-info,-debug //reverb_tf/cc/fuzzing:wire_fuzzer
fuzzer="$("${BAZEL[@]}" info --config=fuzz --repo_env=CC=clang-14 bazel-bin 2>/dev/null)/reverb_tf/cc/fuzzing/wire_fuzzer"

corpus="${CACHE}/fuzz-corpus"
seeds="$(mktemp -d)"
artifacts="${CACHE}/fuzz-artifacts"
mkdir -p "${corpus}" "${artifacts}"
trap 'rm -rf "${seeds}"' EXIT
"${ROOT}/.venv/bin/python" "${ROOT}/reverb_tf/cc/fuzzing/make_seed_corpus.py" "${seeds}"

# Keep the corpus small: above 4,000 inputs, keep only those that add coverage.
if (( $(ls "${corpus}" | wc -l) > 4000 )); then
  log "minimize the corpus"
  merged="$(mktemp -d "${CACHE}/fuzz-corpus-merge.XXXXXX")"
  "${fuzzer}" -merge=1 -timeout=30 -rss_limit_mb=6144 "${merged}" "${corpus}" \
    > "${CACHE}/fuzz-merge.log" 2>&1
  rm -rf "${corpus}" && mv "${merged}" "${corpus}"
fi

log "fuzz for ${SECONDS_TO_FUZZ} s (corpus: $(ls "${corpus}" | wc -l) inputs)"
status=0
"${fuzzer}" -max_total_time="${SECONDS_TO_FUZZ}" -timeout=30 -rss_limit_mb=6144 \
  -max_len=65536 -print_final_stats=1 -artifact_prefix="${artifacts}/" \
  "${corpus}" "${seeds}" > "${CACHE}/fuzz.log" 2>&1 || status=$?
grep -E "^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)|^#[0-9]+ *DONE" \
  "${CACHE}/fuzz.log" || true
executions="$(sed -n 's/^stat::number_of_executed_units: *//p' "${CACHE}/fuzz.log")"
if (( status != 0 )); then
  tail -60 "${CACHE}/fuzz.log"
  log "FAILED: a finding is in ${artifacts}"
  echo "fuzz: 0 passed, 1 failed"
  exit 1
fi
echo "fuzz: 1 passed, 0 failed (${executions:-?} executions in ${SECONDS_TO_FUZZ} s, corpus $(ls "${corpus}" | wc -l) inputs)"
