#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Keeps the container build (scripts/container_build.sh, docs/packaging.md)
# from rotting without paying for it: scripts/test.sh runs its first two
# steps on every run.
#   1. base: make (or find in the cache) the Debian base image;
#   2. probe: `container_build.sh --probe`, the same buildah build and `-o`
#      export as the wheel's, of pip_package/probe.Dockerfile, which installs
#      Debian's python3-venv in the base, makes a venv with pip, and exports
#      what the interpreter reports; the suite's Python version must come out;
#   3. context: the probe also lists the files its build context (HEAD
#      filtered by pip_package/Dockerfile.dockerignore, as for the wheel)
#      brought; every committed file must be there.
# Warm (base cached) 10 to 15 s; cold about 35 s (buildah and mmdebstrap
# from apt, the base from Debian's archive). Each step is bounded
# by a timeout. Prints one PASS/FAIL line per step and
# "container_check: N passed, N failed"; exits non-zero on a failure.
#
# Usage: bash scripts/container_check.sh [--suite bookworm|trixie|sid]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
suite="bookworm"
if [[ "${1:-}" == "--suite" ]]; then suite="$2"; fi
# The Python each suite ships: what the probe must report.
case "${suite}" in
  bookworm) want_python="3.11" ;;
  trixie) want_python="3.13" ;;
  sid) want_python="3.14" ;;
  *) echo "--suite must be bookworm, trixie or sid" >&2; exit 2 ;;
esac

passed=0; failed=0
result() {  # NAME STATUS SECONDS [DETAIL]
  if (( $2 == 0 )); then
    passed=$(( passed + 1 )); echo "container_check: PASS $1 ($3 s)"
  else
    failed=$(( failed + 1 )); echo "container_check: FAIL $1 ($3 s) ${4:-}"
  fi
}
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

# 1. The base image (cold on a fresh machine: apt, then mmdebstrap).
start=${SECONDS}; rc=0
timeout --kill-after=10 600 bash "${ROOT}/scripts/container_build.sh" --suite "${suite}" \
  --base-only > "${work}/base.txt" 2> "${work}/base.log" || rc=$?
image="$(tail -n 1 "${work}/base.txt")"
if (( rc == 0 )) && ! buildah inspect --type image "${image}" >/dev/null 2>&1; then
  rc=1; echo "no image ${image} after the base step" >> "${work}/base.log"
fi
result "base image ${image:-?}" "${rc}" $(( SECONDS - start ))
if (( rc != 0 )); then
  tail -n 20 "${work}/base.log" >&2
else
  # 2. The probe build on it.
  start=${SECONDS}; rc=0
  timeout --kill-after=10 300 bash "${ROOT}/scripts/container_build.sh" --suite "${suite}" \
    --probe "${work}/out" > "${work}/probe.log" 2>&1 || rc=$?
  reported="$(cat "${work}/out/python.txt" 2>/dev/null || true)"
  pip_reported="$(cat "${work}/out/pip.txt" 2>/dev/null || true)"
  detail=""
  if (( rc == 0 )) && [[ "${reported}" != "${want_python}."* \
                         || "${pip_reported}" != *"(python ${want_python})"* ]]; then
    rc=1
    detail="wanted Python ${want_python} and its pip, got '${reported}' / '${pip_reported}'"
  fi
  result "probe build (Python ${reported%% *})" "${rc}" $(( SECONDS - start )) "${detail}"
  if (( rc != 0 )); then tail -n 20 "${work}/probe.log" >&2; fi

  # 3. The build context: every committed file must reach it. The wheel
  # build needs most of them (a BUILD rule names a file the ignore file
  # dropped: "missing input file"), and the rest cost nothing to send.
  start=${SECONDS}; rc=0; detail=""
  git -C "${ROOT}" ls-tree -r --name-only HEAD | LC_ALL=C sort > "${work}/tracked.txt"
  if [[ ! -s "${work}/out/files.txt" ]]; then
    rc=1; detail="the probe reported no context files"
  else
    dropped="$(LC_ALL=C comm -23 "${work}/tracked.txt" "${work}/out/files.txt")"
    if [[ -n "${dropped}" ]]; then
      rc=1
      detail="pip_package/Dockerfile.dockerignore drops committed files: $(tr '\n' ' ' <<<"${dropped}")"
    fi
  fi
  result "context holds all $(wc -l < "${work}/tracked.txt") committed files" "${rc}" \
    $(( SECONDS - start )) "${detail}"
fi
echo "container_check: ${passed} passed, ${failed} failed"
(( failed == 0 ))
