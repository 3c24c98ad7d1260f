#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs pip_package/Dockerfile without a Docker engine: with buildah (chroot
# isolation, which needs no OCI runtime or cgroups) on a Debian base image
# that mmdebstrap makes from Debian's own archive (no container registry
# needed). What `docker build -f pip_package/Dockerfile -o wheels .` does, on
# machines where that cannot run. A cold build takes about 8 minutes on
# 2 cores (docs/packaging.md); the full build is not part of the test suite,
# but its first two steps are (scripts/container_check.sh runs --probe).
#
# Usage: bash scripts/container_build.sh [options] [OUTDIR]   (default: ./wheels)
#   --suite SUITE     Debian suite of the base: bookworm (Debian 12,
#                     Python 3.11; the default), trixie (Debian 13, Python
#                     3.13) or sid (Debian unstable, Python 3.14)
#   --tf VERSION      build for another TensorFlow (the Dockerfile's TF_VERSION)
#   --distribution D  its pip distribution (default tensorflow-cpu)
#   --tests T         portable | pytest | smoke | auto (the Dockerfile's TESTS;
#                     default auto, which is portable)
#   --base-only       make (or find) the base image, print its name, stop
#   --probe           build pip_package/probe.Dockerfile on the base instead of
#                     the wheel: the same buildah invocation and context, in
#                     seconds (it reports the files the context holds)
#   --check-image     make (or find) the check image of CI's short checks
#                     (container_check.sh --arch arm64, abi3_check.sh): the
#                     base (the arm64 one with --arch arm64) with Debian's
#                     python3-venv and python3-dev and a venv /venv holding
#                     the wheel's pinned dependencies, named by a hash of
#                     those pins; print its name, stop
#   --refresh-base    download the base again instead of using the cache
#   --arch arm64      a Linux aarch64 wheel, cross-compiled on this x86_64
#                     machine (pip_package/cross.Dockerfile,
#                     scripts/cross_build.sh) and tested under emulation
#                     (qemu-user through binfmt_misc) in an arm64 base
#                     localhost/reverb_tf-base:SUITE-arm64; --tf defaults
#                     to 2.20.0 there, the newest TensorFlow with aarch64
#                     wheels on PyPI. With --base-only, makes that base.
#   --abi3            the cp312-abi3 wheel (CPython 3.12 and later) built on
#                     Debian 12, so tagged manylinux_2_34 (glibc 2.34, as
#                     Ubuntu 22.04 and hosted notebooks have), against the
#                     Python headers of a Debian 13 base, and tested there
#                     in fresh Python 3.13 venvs (pip_package/abi3.Dockerfile);
#                     --tests portable (auto) or smoke
#
# The base is cached twice: mmdebstrap's tarball under
# ${REVERB_TF_CACHE:-~/.cache/reverb_tf}/container/ (survives a wiped
# container store) and the committed image localhost/reverb_tf-base:SUITE in
# buildah's store, so a second run downloads nothing for the base.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${REVERB_TF_CACHE:-${HOME}/.cache/reverb_tf}"
log() { printf '[container_build %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
usage() {
  sed -n 's/^# \{0,1\}//; /^Usage:/,/^$/p' "${BASH_SOURCE[0]}" >&2
  exit 2
}

suite="bookworm"; tf_version=""; distribution=""; tests="auto"
mode="wheel"; refresh=0; out=""; arch="amd64"; abi3=0
while (( $# )); do
  case "$1" in
    --suite) suite="$2"; shift 2 ;;
    --tf) tf_version="$2"; shift 2 ;;
    --distribution) distribution="$2"; shift 2 ;;
    --tests) tests="$2"; shift 2 ;;
    --base-only) mode="base"; shift ;;
    --probe) mode="probe"; shift ;;
    --check-image) mode="check-image"; shift ;;
    --refresh-base) refresh=1; shift ;;
    --arch) arch="$2"; shift 2 ;;
    --abi3) abi3=1; shift ;;
    -h|--help) usage ;;
    -*) echo "unknown option $1" >&2; usage ;;
    *) out="$1"; shift ;;
  esac
done
# Only suites whose archive keys the host's debian-archive-keyring holds and
# whose toolchain the build scripts know. sid's Release is signed with the
# Debian 12 and 13 archive keys, which Debian 12's keyring holds.
case "${suite}" in
  bookworm|trixie|sid) ;;
  *) echo "--suite must be bookworm, trixie or sid, not ${suite}" >&2; exit 2 ;;
esac
case "${arch}" in
  amd64|arm64) ;;
  *) echo "--arch must be amd64 (native) or arm64 (cross-built, tested under qemu), not ${arch}" >&2
     exit 2 ;;
esac
if [[ "${arch}" == arm64 && "${suite}" != bookworm ]]; then
  # The cross build's package set and toolchain are Debian 12's
  # (scripts/cross_build.sh); the other suites were not tried.
  echo "--arch arm64 is built on bookworm only" >&2; exit 2
fi
if (( abi3 )) && [[ "${arch}" != amd64 || "${suite}" != bookworm ]]; then
  # On trixie or sid the plain build is already abi3 (their Python is 3.13
  # or 3.14), only tagged for a newer glibc.
  echo "--abi3 builds on bookworm for amd64 (trixie and sid builds are abi3 already)" >&2
  exit 2
fi
if (( abi3 )) && [[ "${tests}" == pytest ]]; then
  echo "--abi3 tests with --tests portable or smoke (the side venvs are Python 3.11's)" >&2
  exit 2
fi
if [[ "${arch}" == arm64 ]]; then
  # PyPI's aarch64 TensorFlow: `tensorflow` (no tensorflow-cpu), up to 2.20.
  tf_version="${tf_version:-2.20.0}"; distribution="${distribution:-tensorflow}"
fi
distribution="${distribution:-tensorflow-cpu}"
OUT="$(realpath -m "${out:-${ROOT}/wheels}")"
image="localhost/reverb_tf-base:${suite}"

missing=()
for tool in buildah mmdebstrap; do
  command -v "${tool}" >/dev/null || missing+=("${tool}")
done
if (( ${#missing[@]} )); then
  log "installing ${missing[*]}"
  # A fresh machine may have no package lists yet.
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" uidmap >/dev/null
fi

# make_base IMAGE ARCH [SUITE]: makes (or finds) a minbase Debian SUITE
# (default --suite's) image for ARCH (amd64 or arm64). Debian 12's buildah (1.28) has no `buildah import`,
# so the tarball goes in through an empty working container instead.
make_base() {
  local image="$1" arch="$2" suite="${3:-${suite}}" tarball container partial sources aptopts
  local valid_until
  tarball="${CACHE}/container/debian-${suite}-minbase.tar"
  [[ "${arch}" == amd64 ]] || tarball="${CACHE}/container/debian-${suite}-${arch}-minbase.tar"
  if (( refresh )); then
    rm -f "${tarball}"
    buildah rmi --force "${image}" >/dev/null 2>&1 || true
  fi
  buildah inspect --type image "${image}" >/dev/null 2>&1 && return 0
  if [[ ! -s "${tarball}" ]]; then
    log "downloading a minimal Debian ${suite} (${arch}) with mmdebstrap"
    mkdir -p "$(dirname "${tarball}")"
    # Written beside the cache entry and renamed, so an interrupted run never
    # leaves a truncated tarball that later runs would trust.
    partial="${tarball}.partial.$$"
    trap "rm -f '${partial}'" EXIT
    # The same sources as the official debian:SUITE images; sid has no
    # -updates or -security suite.
    sources=("deb http://deb.debian.org/debian ${suite} main")
    if [[ "${suite}" != sid ]]; then
      sources+=("deb http://deb.debian.org/debian ${suite}-updates main"
                "deb http://deb.debian.org/debian-security ${suite}-security main")
    fi
    # A Release file is signed with a date after which apt refuses it
    # (Valid-Until, a week for sid). A mirror that has stopped syncing sid
    # serves an expired one (the one reachable here: dated 2026-10-30, valid
    # until 11-06); then, and only then, apt is told to accept it, in the
    # base and so also inside the build (mmdebstrap keeps --aptopt in
    # /etc/apt/apt.conf.d/99mmdebstrap). The signature is still checked.
    aptopts=()
    valid_until="$(curl -fsS "http://deb.debian.org/debian/dists/${suite}/InRelease" 2>/dev/null \
                   | sed -n 's/^Valid-Until: //p' | head -n 1)" || true
    if [[ -n "${valid_until}" ]] && (( $(date -d "${valid_until}" +%s) < $(date +%s) )); then
      log "the mirror's ${suite} Release expired on ${valid_until}: accepting it (Acquire::Check-Valid-Until false)"
      aptopts+=(--aptopt='Acquire::Check-Valid-Until "false"')
    fi
    # A foreign architecture's maintainer scripts run under qemu-user
    # (ensure_binfmt): about 2.5 min for arm64 on 2 cores.
    mmdebstrap --variant=minbase --format=tar --quiet --architectures="${arch}" \
      "${aptopts[@]}" "${suite}" "${partial}" "${sources[@]}"
    mv "${partial}" "${tarball}"
    trap - EXIT
  fi
  log "committing ${image} from ${tarball}"
  container="$(buildah from scratch)"
  trap "buildah rm '${container}' >/dev/null 2>&1 || true" EXIT
  buildah add --quiet "${container}" "${tarball}" / >/dev/null
  # A scratch image has no configuration: give it what debian:SUITE has,
  # and its architecture (a stage FROM it runs under emulation).
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --cmd bash --arch "${arch}" --os linux "${container}"
  buildah commit --quiet "${container}" "${image}" >/dev/null
  buildah rm "${container}" >/dev/null
  trap - EXIT
}

# ensure_binfmt: aarch64 programs run here through qemu-user, which the
# kernel starts for them (binfmt_misc). Debian's qemu-user-static registers
# its interpreters with the F flag (opened once, at registration), so they
# also run inside chroots and buildah's chroot-isolated containers.
ensure_binfmt() {
  local entry=/proc/sys/fs/binfmt_misc/qemu-aarch64
  # mmdebstrap refuses a foreign architecture without arch-test (only a
  # recommendation of its package): "install arch-test for foreign
  # architecture support".
  if ! command -v update-binfmts >/dev/null || [[ ! -x /usr/bin/qemu-aarch64-static ]] \
     || ! command -v arch-test >/dev/null; then
    log "installing qemu-user-static, binfmt-support and arch-test"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      qemu-user-static binfmt-support arch-test >/dev/null
  fi
  if [[ ! -e /proc/sys/fs/binfmt_misc/status ]]; then
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
  fi
  [[ -e "${entry}" ]] || update-binfmts --enable qemu-aarch64
  if ! grep -qx enabled "${entry}" 2>/dev/null || ! grep -q '^flags: .*F' "${entry}"; then
    echo "cannot run aarch64 programs: ${entry} is not enabled with the F flag" >&2
    cat "${entry}" >&2 2>/dev/null || true
    exit 1
  fi
}

make_base "${image}" amd64
test_image=""
if [[ "${arch}" == arm64 ]]; then
  ensure_binfmt
  test_image="localhost/reverb_tf-base:${suite}-arm64"
  make_base "${test_image}" arm64
elif (( abi3 )); then
  test_image="localhost/reverb_tf-base:trixie"
  make_base "${test_image}" amd64 trixie
fi
if [[ "${mode}" == "base" ]]; then
  echo "${test_image:-${image}}"
  exit 0
fi

# pip_mounts DIR: on a network that intercepts TLS, the host trusts an extra
# CA (pip's `cert` setting); sets `mounts` to hand a container the same
# trust for pip (a pip.conf written into DIR).
pip_mounts() {
  local pip_cert
  mounts=()
  pip_cert="${PIP_CERT:-$(sed -n 's/^cert *= *//p' /etc/pip.conf 2>/dev/null | head -n 1)}"
  if [[ -n "${pip_cert}" && -f "${pip_cert}" ]]; then
    printf '[global]\ncert = /run/host-ca.crt\n' > "$1/.host-pip.conf"
    mounts+=(--volume "${pip_cert}:/run/host-ca.crt:ro"
             --volume "$1/.host-pip.conf:/etc/pip.conf:ro")
  fi
}

if [[ "${mode}" == "check-image" ]]; then
  pins="$(grep -iE '^(numpy|absl-py|dm-tree|protobuf)==' "${ROOT}/requirements.txt" | sort)"
  packages="python3-venv python3-dev ca-certificates"
  check_image="localhost/reverb_tf-check:${suite}-${arch}-$(sha256sum <<<"${pins} ${packages}" \
                 | cut -c1-12)"
  if ! buildah inspect --type image "${check_image}" >/dev/null 2>&1; then
    log "making ${check_image}"
    work="$(mktemp -d)"
    pip_mounts "${work}"
    container="$(buildah from --pull-never "${test_image:-${image}}")"
    trap "buildah rm '${container}' >/dev/null 2>&1 || true; rm -rf '${work}'" EXIT
    buildah run --isolation chroot --network host "${mounts[@]}" "${container}" -- \
      bash -c "set -e; apt-get update -qq
               DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
                 ${packages} >/dev/null
               python3 -m venv /venv
               /venv/bin/pip install -q --disable-pip-version-check $(tr '\n' ' ' <<<"${pins}")" >&2
    buildah commit --quiet "${container}" "${check_image}" >/dev/null
  fi
  echo "${check_image}"
  exit 0
fi

context="$(mktemp -d)"
trap 'rm -rf "${context}"' EXIT
# The context is a clean export of HEAD: exactly what is committed, filtered
# by the ignore file as `docker build .` would filter a working tree. The
# probe gets the same context, so that it sees what the wheel build sees.
git -C "${ROOT}" archive HEAD | tar -x -C "${context}"
ignorefile=(--ignorefile "${context}/pip_package/Dockerfile.dockerignore")
if [[ "${mode}" == "probe" ]]; then
  dockerfile="${context}/pip_package/probe.Dockerfile"
elif [[ "${arch}" == arm64 ]]; then
  dockerfile="${context}/pip_package/cross.Dockerfile"
elif (( abi3 )); then
  dockerfile="${context}/pip_package/abi3.Dockerfile"
else
  dockerfile="${context}/pip_package/Dockerfile"
fi
pip_mounts "${context}"
if [[ "${mode}" == "probe" ]]; then
  log "building the probe on ${image}"
else
  log "building the wheel on ${image} (cold: about 8 minutes on 2 cores)"
fi
arch_args=()
if [[ "${arch}" == arm64 && "${mode}" != probe ]]; then
  log "cross-compiling for aarch64 on ${image}, then testing on ${test_image} under qemu-user"
  arch_args=(--build-arg TEST_BASE="${test_image}")
elif (( abi3 )) && [[ "${mode}" != probe ]]; then
  log "the abi3 wheel on ${image} against ${test_image}'s Python headers, tested there"
  arch_args=(--build-arg TEST_BASE="${test_image}")
fi
started=$(date +%s)
# -o exports the last stage; the image buildah also commits for it is
# removed afterwards, so repeated runs leave nothing behind in the store.
iidfile="${context}/.iid"
buildah bud --iidfile "${iidfile}" --isolation chroot --pull-never --network host "${mounts[@]}" \
  "${ignorefile[@]}" --build-arg BASE="${image}" \
  --build-arg TF_VERSION="${tf_version}" --build-arg TF_DISTRIBUTION="${distribution}" \
  --build-arg TESTS="${tests}" "${arch_args[@]}" \
  -f "${dockerfile}" -o "type=local,dest=${OUT}" "${context}"
buildah rmi "$(cat "${iidfile}")" >/dev/null 2>&1 || true
log "done in $(( $(date +%s) - started )) s: $(ls "${OUT}" | tr '\n' ' ')"
if [[ "${arch}" == arm64 && "${mode}" != probe ]]; then
  cat "${OUT}/build_info.txt" "${OUT}/tests.txt" >&2
  # The short check of CI (container_check.sh --arch arm64) imports this
  # wheel's extension in the arm64 base.
  mkdir -p "${CACHE}/cross-arm64/wheel"
  rm -f "${CACHE}/cross-arm64/wheel/"*.whl
  cp "${OUT}"/reverb_tf-*aarch64.whl "${CACHE}/cross-arm64/wheel/"
  if [[ "$(cat "${OUT}/tests.rc")" != 0 ]]; then
    echo "the tests under emulation failed: ${OUT}/tests.log" >&2
    exit 1
  fi
fi
