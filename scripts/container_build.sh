#!/usr/bin/env bash
# Runs pip_package/Dockerfile without a Docker engine: with buildah (chroot
# isolation, which needs no OCI runtime or cgroups) on a debian:bookworm base
# made by mmdebstrap from Debian's own archive (no container registry
# needed). What `docker build -f pip_package/Dockerfile -o wheels .` does, on
# machines where that cannot run. Not part of the test suite: a cold build
# takes about 25 minutes on 2 cores (docs/packaging.md).
#
# Usage: bash scripts/container_build.sh [OUTDIR]   (default: ./wheels)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$(realpath -m "${1:-${ROOT}/wheels}")"
log() { printf '[container_build %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

missing=()
for tool in buildah mmdebstrap; do
  command -v "${tool}" >/dev/null || missing+=("${tool}")
done
if (( ${#missing[@]} )); then
  log "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" uidmap >/dev/null
fi

if ! buildah inspect --type image docker.io/library/debian:bookworm >/dev/null 2>&1; then
  log "making the debian:bookworm base image with mmdebstrap"
  base="$(mktemp --suffix=.tar)"
  mmdebstrap --variant=minbase --quiet bookworm "${base}"
  buildah import "${base}" docker.io/library/debian:bookworm >/dev/null
  rm -f "${base}"
fi

# The context is a clean export of HEAD: exactly what is committed.
context="$(mktemp -d)"
trap 'rm -rf "${context}"' EXIT
git -C "${ROOT}" archive HEAD | tar -x -C "${context}"
# On a network that intercepts TLS, the host trusts an extra CA (pip's
# `cert` setting); hand the container the same trust for pip.
mounts=()
pip_cert="${PIP_CERT:-$(sed -n 's/^cert *= *//p' /etc/pip.conf 2>/dev/null | head -n 1)}"
if [[ -n "${pip_cert}" && -f "${pip_cert}" ]]; then
  printf '[global]\ncert = /run/host-ca.crt\n' > "${context}/.host-pip.conf"
  mounts+=(--volume "${pip_cert}:/run/host-ca.crt:ro"
           --volume "${context}/.host-pip.conf:/etc/pip.conf:ro")
fi
log "building (cold: about 25 minutes on 2 cores)"
started=$(date +%s)
buildah bud --isolation chroot --pull-never --network host "${mounts[@]}" \
  --ignorefile "${context}/pip_package/Dockerfile.dockerignore" \
  -f "${context}/pip_package/Dockerfile" -o "type=local,dest=${OUT}" "${context}"
log "done in $(( $(date +%s) - started )) s: $(ls "${OUT}")"
