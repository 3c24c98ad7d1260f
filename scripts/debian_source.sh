# SPDX-License-Identifier: Apache-2.0
# Sourced by the scripts that build a library from Debian's own source
# package (build_protobuf_pic.sh, build_microhttpd.sh).
#
# fetch_debian_source PACKAGE[=VERSION] DIR: downloads the source package
# (adding deb-src entries for the configured archive once: Debian lists
# binary packages only) and unpacks it into DIR.
# download_same_upstream NAME VERSION DIR: downloads into DIR the source of
# another Debian revision of NAME's upstream VERSION that apt knows, and
# prints that revision (nothing if none could be had).
download_same_upstream() {
  local name="$1" wanted="$2" dir="$3" version
  for version in $(apt-cache showsrc "${name}" 2>/dev/null | sed -n 's/^Version: //p' |
                   sort -u); do
    [[ "${version}" != "${wanted}" && "${version%%-*}" == "${wanted%%-*}" ]] || continue
    rm -rf "${dir:?}"/*
    if (cd "${dir}" && apt-get source -qq --download-only "${name}=${version}" >/dev/null 2>&1)
    then
      echo "${version}"
      return 0
    fi
  done
}

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
  if ! (cd "${download}" && apt-get source -qq --download-only "${package}" >/dev/null 2>&1); then
    # A security update's source can be missing from the archive the
    # registry serves (seen on Debian 13: protobuf 3.21.12-11+deb13u1's .dsc
    # is not there). The release's source of the same upstream version is
    # the closest: take it, and say so.
    local name="${package%%=*}" wanted="${package#*=}" got=""
    if [[ "${name}" != "${package}" ]]; then
      got="$(download_same_upstream "${name}" "${wanted}" "${download}")"
    fi
    if [[ -z "${got}" && "${name}" != "${package}" ]]; then
      # Debian 13's registry copy serves no protobuf source at all; Debian
      # 12's source of the same upstream version is there. Ask it alone.
      local list=/etc/apt/sources.list.d/reverb-tf-bookworm-src.list
      if [[ ! -f "${list}" ]] && ! grep -rqs "bookworm" /etc/apt/sources.list /etc/apt/sources.list.d/; then
        echo "deb-src http://deb.debian.org/debian bookworm main" > "${list}"
        apt-get update -qq || true
        got="$(download_same_upstream "${name}" "${wanted}" "${download}")"
        [[ -z "${got}" ]] || got="${got} (Debian 12's)"
        rm -f "${list}"
        apt-get update -qq || true
      fi
    fi
    if [[ -z "${got}" ]]; then
      echo "cannot download the source of ${package} (nor of another Debian revision of" \
           "its upstream version)" >&2
      rm -rf "${download}"
      return 1
    fi
    echo "note: the source of ${name} ${wanted} is not available; building ${got}," \
         "the same upstream version" >&2
  fi
  (cd "${download}" && dpkg-source -x ./*.dsc "${dir}" >/dev/null 2>&1)
  rm -rf "${download}"
}
