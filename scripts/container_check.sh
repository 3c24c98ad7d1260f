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
#        bash scripts/container_check.sh --arch arm64
#
# --arch arm64 checks the aarch64 build's emulated side instead (the full
# cross build, container_build.sh --arch arm64, takes too long for every
# run): 1. the check image (container_build.sh --arch arm64 --check-image:
# qemu-user's binfmt_misc entry, the amd64 and arm64 bases, and the arm64
# base with python3-venv and a venv holding the wheel's pinned
# dependencies, made once: about 3 min cold); 2. in it, under emulation, the newest aarch64 wheel that container_build.sh --arch arm64
# built ($REVERB_TF_CACHE/cross-arm64/wheel/) is unpacked, `import
# reverb_tf` loads its aarch64 extension, a server serves one item written
# by a TrajectoryWriter, and the binary lists its flags. No such wheel yet
# (a fresh machine): step 2 says so and is skipped, not failed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${REVERB_TF_CACHE:-${HOME}/.cache/reverb_tf}"
suite="bookworm"; arch="amd64"
while (( $# )); do
  case "$1" in
    --suite) suite="$2"; shift 2 ;;
    --arch) arch="$2"; shift 2 ;;
    *) echo "usage: container_check.sh [--suite SUITE] [--arch arm64]" >&2; exit 2 ;;
  esac
done
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

if [[ "${arch}" == arm64 ]]; then
  # 1. The check image on the arm64 base (container_build.sh --check-image
  # makes what is missing: qemu-user's binfmt_misc entry, both bases, then
  # python3-venv and the pinned venv under emulation).
  start=${SECONDS}; rc=0
  timeout --kill-after=10 1200 bash "${ROOT}/scripts/container_build.sh" --arch arm64 \
    --check-image > "${work}/image.txt" 2> "${work}/image.log" || rc=$?
  check_image="$(tail -n 1 "${work}/image.txt")"
  result "check image ${check_image:-?} (arm64 base, qemu-user)" "${rc}" $(( SECONDS - start ))
  (( rc == 0 )) || tail -n 20 "${work}/image.log" >&2
  # 2. The cached wheel under emulation.
  wheel="$(ls "${CACHE}"/cross-arm64/wheel/reverb_tf-*aarch64.whl 2>/dev/null | head -n 1 || true)"
  if (( rc != 0 )); then
    :
  elif [[ -z "${wheel}" ]]; then
    echo "container_check: SKIP aarch64 wheel: none built on this machine yet" \
         "(bash scripts/container_build.sh --arch arm64 OUTDIR caches one)"
  else
    start=${SECONDS}; rc=0
    container="$(buildah from --pull-never "${check_image}")"
    timeout --kill-after=10 300 buildah run --isolation chroot \
      --volume "${wheel}:/wheel.whl:ro" --volume "${ROOT}/pip_package:/check:ro" "${container}" -- \
      /venv/bin/python /check/target_check.py /wheel.whl > "${work}/check.log" 2>&1 || rc=$?
    buildah rm "${container}" >/dev/null 2>&1 || true
    result "$(basename "${wheel}") serves one item under qemu-user ($(tail -n 1 "${work}/check.log"))" \
      "${rc}" $(( SECONDS - start ))
    (( rc == 0 )) || tail -n 20 "${work}/check.log" >&2
  fi
  echo "container_check: ${passed} passed, ${failed} failed"
  (( failed == 0 ))
  exit
fi

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
