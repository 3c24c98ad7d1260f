#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds a position-independent static GNU libmicrohttpd without HTTPS from
# Debian's own source package: the HTTP server behind /metrics
# (docs/operations.md).
#
# Why not Debian's libmicrohttpd.a: it is built with HTTPS, so it needs
# GnuTLS and its seven libraries at run time, in every process that imports
# reverb_tf. The metrics endpoint serves plain HTTP on a chosen interface;
# without HTTPS the library needs nothing but libc.
#
# Usage: build_microhttpd.sh <install-prefix>
# Idempotent: does nothing once <install-prefix>/.complete exists.
set -euo pipefail
prefix="$1"
if [[ -f "${prefix}/lib/libmicrohttpd.a" && -f "${prefix}/.complete" ]]; then
  exit 0
fi
source "$(dirname "${BASH_SOURCE[0]}")/debian_source.sh"
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
fetch_debian_source libmicrohttpd "${work}/src"
cd "${work}/src"
echo "building static libmicrohttpd $(dpkg-parsechangelog -S Version) into ${prefix}"
# Its symbols stay hidden in our shared objects like every static archive's.
if ! { ./configure --prefix="${prefix}" --disable-shared --enable-static --with-pic \
         --disable-https --without-gnutls --disable-doc --disable-examples \
         --disable-curl --disable-tools CFLAGS="-O2 -fvisibility=hidden" &&
       make -j"$(nproc)" -C src/microhttpd &&
       make -C src/microhttpd install && make -C src/include install; } >build.log 2>&1; then
  tail -n 40 build.log >&2
  echo "libmicrohttpd build failed (log above)" >&2
  exit 1
fi
dpkg-parsechangelog -S Version > "${prefix}/.complete"
