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
# A Debian patch to an automake input (sid's 1.0.10-1 patches
# src/microhttpd/Makefile.am, to drop TLS tests) leaves it newer than the
# tarball's generated files, and make then wants the exact automake that
# made them (automake-1.17), which is not installed. Only the library is
# built here, from the tarball's generated files: they are made newer than
# their inputs again, and the patched inputs are named.
patched_inputs="$(sed -n 's|^+++ b/||p' debian/patches/* 2>/dev/null |
                  grep -E '(Makefile\.am|configure\.ac|\.m4)$' | sort -u | tr '\n' ' ' || true)"
if [[ -n "${patched_inputs}" ]]; then
  echo "note: Debian's patches change ${patched_inputs}(automake inputs); the library" \
       "is built with the tarball's generated Makefiles, not regenerated from them"
  find . \( -name Makefile.in -o -name configure -o -name aclocal.m4 -o -name 'config.h.in' \) \
    -exec touch {} +
fi
# REVERB_TF_CROSS (e.g. aarch64-linux-gnu): cross-compile for that target
# with Debian's compiler (scripts/cross_build.sh).
cross=()
[[ -z "${REVERB_TF_CROSS:-}" ]] || cross=(--host="${REVERB_TF_CROSS}")
# Its symbols stay hidden in our shared objects like every static archive's.
if ! { ./configure "${cross[@]}" --prefix="${prefix}" --disable-shared --enable-static --with-pic \
         --disable-https --without-gnutls --disable-doc --disable-examples \
         --disable-curl --disable-tools CFLAGS="-O2 -fvisibility=hidden" &&
       make -j"$(nproc)" -C src/microhttpd &&
       make -C src/microhttpd install && make -C src/include install; } >build.log 2>&1; then
  tail -n 40 build.log >&2
  echo "libmicrohttpd build failed (log above)" >&2
  exit 1
fi
dpkg-parsechangelog -S Version > "${prefix}/.complete"
