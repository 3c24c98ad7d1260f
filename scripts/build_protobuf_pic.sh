#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds a position-independent static libprotobuf from Debian's own source
# package, so that it matches /usr/bin/protoc (3.21) exactly.
#
# Why: Debian ships libprotobuf.a without -fPIC, and every .so we load into a
# Python process must carry protobuf statically with hidden symbols, because
# TensorFlow exports its own protobuf globally (docs/native_linking.md).
#
# Usage: build_protobuf_pic.sh <install-prefix>
# Idempotent: does nothing once <install-prefix>/.complete exists.
set -euo pipefail

prefix="$1"
if [[ -f "${prefix}/lib/libprotobuf.a" && -f "${prefix}/.complete" ]]; then
  exit 0
fi

source "$(dirname "${BASH_SOURCE[0]}")/debian_source.sh"
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
cd "${work}"
# The exact version of the installed headers, so library and headers agree.
deb_version="$(dpkg-query -W -f='${Version}' libprotobuf-dev)"
fetch_debian_source "protobuf=${deb_version}" "${work}/src"
version="$(protoc --version | awk '{print $2}')"
echo "building PIC libprotobuf ${version} from Debian source into ${prefix}"
# REVERB_TF_CROSS (e.g. aarch64-linux-gnu): cross-compile with Debian's
# compiler for that target (scripts/cross_build.sh); the version is still the
# installed (target architecture's) libprotobuf-dev and protoc's.
cross=()
if [[ -n "${REVERB_TF_CROSS:-}" ]]; then
  cross=(-DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR="${REVERB_TF_CROSS%%-*}"
         -DCMAKE_C_COMPILER="${REVERB_TF_CROSS}-gcc" -DCMAKE_CXX_COMPILER="${REVERB_TF_CROSS}-g++")
fi
# Compiler warnings from protobuf's own sources go to a log, shown on failure.
if ! { cmake -S src/cmake -B build -DCMAKE_BUILD_TYPE=Release "${cross[@]}" \
         -DCMAKE_POSITION_INDEPENDENT_CODE=ON -Dprotobuf_BUILD_TESTS=OFF \
         -Dprotobuf_BUILD_SHARED_LIBS=OFF -Dprotobuf_BUILD_PROTOC_BINARIES=OFF \
         -Dprotobuf_WITH_ZLIB=OFF -DCMAKE_INSTALL_PREFIX="${prefix}" \
         -DCMAKE_CXX_FLAGS="-fvisibility=hidden -fvisibility-inlines-hidden" &&
       cmake --build build -j"$(nproc)" --target libprotobuf; } >build.log 2>&1; then
  tail -n 40 build.log >&2
  echo "PIC protobuf build failed (log above)" >&2
  exit 1
fi
mkdir -p "${prefix}/lib"
cp build/libprotobuf.a "${prefix}/lib/"
echo "${version}" > "${prefix}/.complete"
