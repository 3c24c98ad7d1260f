#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Sets up everything reverb_tf needs on a Debian 12 machine, idempotently:
#   1. Debian packages (Bazel 4.2.3 bootstrap, gRPC/OpenSSL/protobuf/absl/zstd/gtest;
#      Debian 13 has the same Bazel, sid Bazel 7);
#   2. a PIC static protobuf and a static libmicrohttpd without HTTPS, built
#      from Debian's source (build_protobuf_pic.sh, build_microhttpd.sh);
#   3. the venv .venv with the pinned packages of requirements.txt (with
#      requirements-pyX.Y.txt's for a Python that has one: scripts/pins.sh);
#   4. .bazelrc.local pointing Bazel at them, and the Bazel build.
# A second run only checks, then lets Bazel find nothing to rebuild.
#
# Environment: REVERB_TF_CACHE (default ~/.cache/reverb_tf) holds the PIC
# protobuf and Bazel's disk cache, shared by every clone on the machine.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${REVERB_TF_CACHE:-${HOME}/.cache/reverb_tf}"
PYTHON="${REVERB_TF_BASE_PYTHON:-python3}"
log() { printf '[setup %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

APT_PACKAGES=(
  bazel-bootstrap bazel-bootstrap-source
  g++ pkg-config cmake dpkg-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libssl-dev openssl
  libabsl-dev libre2-dev libc-ares-dev zlib1g-dev libzstd-dev
  libgtest-dev libgmock-dev
  python3-venv python3-dev
  chromium
)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  if [[ "$(dpkg-query -W -f='${db:Status-Status}' "${pkg}" 2>/dev/null)" != "installed" ]]; then
    missing+=("${pkg}")
  fi
done
if (( ${#missing[@]} )); then
  log "installing Debian packages: ${missing[*]}"
  SUDO=""; [[ "$(id -u)" != 0 ]] && SUDO="sudo"
  ${SUDO} apt-get update -qq
  DEBIAN_FRONTEND=noninteractive ${SUDO} apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PROTOBUF_PIC="${CACHE}/protobuf-pic"
if [[ ! -f "${PROTOBUF_PIC}/.complete" ]]; then
  log "building a PIC libprotobuf (about 2 minutes on 2 cores)"
  bash "${ROOT}/scripts/build_protobuf_pic.sh" "${PROTOBUF_PIC}"
fi

MICROHTTPD="${CACHE}/microhttpd"
if [[ ! -f "${MICROHTTPD}/.complete" ]]; then
  log "building a static libmicrohttpd without HTTPS (about 15 s)"
  bash "${ROOT}/scripts/build_microhttpd.sh" "${MICROHTTPD}"
fi

VENV="${ROOT}/.venv"
if [[ ! -x "${VENV}/bin/python" ]]; then
  log "creating ${VENV}"
  "${PYTHON}" -m venv "${VENV}"
fi
# requirements.txt, with the pins of requirements-pyX.Y.txt for the venv's
# Python where there is one (scripts/pins.sh): Python 3.14 needs another
# TensorFlow and h5py.
bash "${ROOT}/scripts/pins.sh" "${VENV}/bin/python" > "${VENV}/pins.txt"
want="$(sha256sum "${VENV}/pins.txt" | cut -d' ' -f1)"
if [[ "$(cat "${VENV}/.requirements.sha256" 2>/dev/null)" != "${want}" ]]; then
  log "installing pinned Python packages (requirements.txt$(
    cmp -s "${VENV}/pins.txt" "${ROOT}/requirements.txt" || echo ", with scripts/pins.sh's changes"))"
  "${VENV}/bin/pip" install -q --disable-pip-version-check -r "${VENV}/pins.txt"
  echo "${want}" > "${VENV}/.requirements.sha256"
fi

# The checkout itself is the package during development: a .pth file puts it
# on the venv's path (the wheel in pip_package/ installs it for real).
site_packages="$("${VENV}/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
if [[ "$(cat "${site_packages}/reverb_tf_checkout.pth" 2>/dev/null)" != "${ROOT}" ]]; then
  echo "${ROOT}" > "${site_packages}/reverb_tf_checkout.pth"
fi

mkdir -p "${CACHE}/bazel-disk"
rc_local="$(cat <<RC
# Written by scripts/setup.sh; machine-specific, not committed.
build --repo_env=REVERB_TF_PYTHON=${VENV}/bin/python
build --repo_env=REVERB_TF_PROTOBUF_PIC=${PROTOBUF_PIC}
build --repo_env=REVERB_TF_MICROHTTPD=${MICROHTTPD}
build --disk_cache=${CACHE}/bazel-disk
RC
)"
# .bazelrc points Bazel at the offline rules of Debian 12's and 13's
# bazel-bootstrap 4.2.3. Debian sid's is Bazel 7, with its rules elsewhere;
# it resolves our WORKSPACE offline only with Bzlmod off (Bzlmod would ask
# the Bazel Central Registry for the modules Bazel's own tools depend on).
# A later --override_repository of a name replaces .bazelrc's.
if [[ ! -d /usr/src/bazel-bootstrap/mock_repos/rules_java && -d /usr/share/bazel/rules/java ]]; then
  rc_local+="$(cat <<RC

# Debian's Bazel 7 (sid): its rules, and the WORKSPACE without Bzlmod.
common --noenable_bzlmod
build --override_repository=rules_java=/usr/share/bazel/rules/java
build --override_repository=platforms=/usr/share/bazel/tools/platforms
build --override_repository=bazel_skylib=/usr/share/bazel/tools/skylib
build --override_repository=rules_python=/usr/share/bazel/rules/python
RC
)"
fi
if [[ "$(cat "${ROOT}/.bazelrc.local" 2>/dev/null)" != "${rc_local}" ]]; then
  printf '%s\n' "${rc_local}" > "${ROOT}/.bazelrc.local"
fi

bash "${ROOT}/scripts/sync_native.sh"
log "ready"
