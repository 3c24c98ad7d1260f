# SPDX-License-Identifier: Apache-2.0
# Sourced by the scripts that build a library from Debian's own source
# package (build_protobuf_pic.sh, build_microhttpd.sh).
#
# fetch_debian_source PACKAGE[=VERSION] DIR: downloads the source package
# (adding deb-src entries for the configured archive once: Debian lists
# binary packages only) and unpacks it into DIR.
fetch_debian_source() {
  local package="$1" dir="$2"
  local src_list=/etc/apt/sources.list.d/reverb-tf-deb-src.sources
  if ! grep -rqs "deb-src" /etc/apt/sources.list /etc/apt/sources.list.d/; then
    if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
      sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources > "${src_list}"
    else
      grep -E '^deb ' /etc/apt/sources.list | sed 's/^deb /deb-src /' \
        > /etc/apt/sources.list.d/reverb-tf-deb-src.list
    fi
    apt-get update -qq
  fi
  local download
  download="$(mktemp -d)"
  (cd "${download}" && apt-get source -qq --download-only "${package}" >/dev/null 2>&1 &&
     dpkg-source -x ./*.dsc "${dir}" >/dev/null 2>&1)
  rm -rf "${download}"
}
