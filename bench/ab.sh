#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# An A/B of this checkout against an earlier commit in one sitting, to tell
# a regression from the machine's mood (figures of round-trip-bound paths
# moved by a third between two days here with no change to their code).
#
# Builds REV in a worktree under $REVERB_TF_CACHE/ab/ (Bazel's disk cache
# makes that seconds when most of REV was built before), then runs COMMAND
# ROUNDS times for each side, alternating: side "a" with REV's package first
# on PYTHONPATH (child processes inherit it, so servers the command starts
# are REV's too), side "b" with this checkout. The command runs under bash
# in AB_OUT, a directory for its results (not in the checkout, whose own
# package `python -c` and `python -m` would put first), with AB_ROOT (this
# checkout), AB_SIDE (a or b) and AB_ROUND (1..ROUNDS) set; its output goes
# to AB_OUT/SIDE_ROUND.log.
#
# Usage: bash bench/ab.sh REV ROUNDS 'COMMAND'
# e.g.   bash bench/ab.sh HEAD~3 4 \
#          '$AB_ROOT/.venv/bin/python $AB_ROOT/bench/mutation_bench.py'
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${REVERB_TF_CACHE:-${HOME}/.cache/reverb_tf}"
if (( $# != 3 )); then
  sed -n '/^# Usage/,/^set/p' "$0" | sed '$d' >&2
  exit 2
fi
rev="$(git -C "${ROOT}" rev-parse --verify "$1^{commit}")"
rounds="$2"
command="$3"
log() { printf '[ab %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

worktree="${CACHE}/ab/${rev:0:12}"
if [[ ! -d "${worktree}" ]]; then
  log "worktree of ${rev:0:12} in ${worktree}"
  git -C "${ROOT}" worktree add --detach -q "${worktree}" "${rev}"
fi
cp "${ROOT}/.bazelrc.local" "${worktree}/.bazelrc.local"
log "build ${rev:0:12}"
(cd "${worktree}" && bash scripts/sync_native.sh >/dev/null)
log "build this checkout"
bash "${ROOT}/scripts/sync_native.sh" >/dev/null

export AB_OUT="${AB_OUT:-$(mktemp -d)}"
export AB_ROOT="${ROOT}"
cd "${AB_OUT}"
for (( round = 1; round <= rounds; ++round )); do
  for side in a b; do
    log "round ${round}, side ${side}"
    if [[ "${side}" == a ]]; then
      AB_SIDE=a AB_ROUND="${round}" PYTHONPATH="${worktree}${PYTHONPATH:+:${PYTHONPATH}}" \
        bash -c "${command}" >"${AB_OUT}/a_${round}.log" 2>&1
    else
      AB_SIDE=b AB_ROUND="${round}" bash -c "${command}" >"${AB_OUT}/b_${round}.log" 2>&1
    fi
  done
done
log "results in ${AB_OUT} (a: ${rev:0:12}, b: this checkout)"
echo "${AB_OUT}"
