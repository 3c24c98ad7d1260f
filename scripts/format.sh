#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The house rules a tool enforces: C++ in Google style (clang-format 14,
# .clang-format) and Python formatted and linted by ruff (ruff.toml).
#
#   bash scripts/format.sh           # formats the tree in place
#   bash scripts/format.sh --check   # changes nothing; fails, listing the
#                                    # files, if anything is not as the
#                                    # tools would write it (scripts/test.sh)
#
# Installs clang-format-14 from Debian if missing (idempotent); ruff comes
# with the venv (requirements.txt pins it), so run scripts/setup.sh first.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
check=0
[[ "${1:-}" == "--check" ]] && check=1
log() { echo "[format $(date +%H:%M:%S)] $*"; }
SUDO=""
[[ "$(id -u)" != 0 ]] && SUDO="sudo"
if [[ "$(dpkg-query -W -f='${db:Status-Status}' clang-format-14 2>/dev/null)" != "installed" ]]; then
  log "apt-get install clang-format-14"
  ${SUDO} apt-get update -qq
  DEBIAN_FRONTEND=noninteractive ${SUDO} apt-get install -y -qq --no-install-recommends \
    clang-format-14 >/dev/null
fi
RUFF="${ROOT}/.venv/bin/ruff"
mapfile -t cc_files < <(git ls-files '*.cc' '*.h')
status=0
if (( check )); then
  # --dry-run --Werror: a diagnostic per line that would change.
  if ! clang-format-14 --dry-run --Werror "${cc_files[@]}" 2>/tmp/clang-format.$$; then
    # Only the diagnostics' "file:line:column:" heads, not the quoted code.
    grep -oE '^[^: ]+:[0-9]+:[0-9]+:' /tmp/clang-format.$$ | cut -d: -f1 | sort -u |
      sed 's/^/  not clang-formatted: /'
    status=1
  fi
  rm -f /tmp/clang-format.$$
  "${RUFF}" format --check --quiet . || status=1
  "${RUFF}" check --quiet . || status=1
  if (( status == 0 )); then
    echo "format: 1 passed, 0 failed"
  else
    echo "format: 0 passed, 1 failed (bash scripts/format.sh fixes the formatting)"
  fi
else
  clang-format-14 -i "${cc_files[@]}"
  "${RUFF}" format --quiet .
  "${RUFF}" check --quiet --fix . || status=1
fi
exit "${status}"
