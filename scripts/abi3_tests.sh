#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Tests the cp312-abi3 wheel that pip_package/abi3.Dockerfile built on
# Debian 12, in the test stage's newer Debian (its python3 is 3.12 or
# later): Debian's python3-venv, chromium (the dashboard tests drive it)
# and binutils (tests/test_native_linking.py reads the libraries with
# readelf), then scripts/check_wheel.sh in fresh venvs of that Python.
#
#   bash scripts/abi3_tests.sh DIST TESTS DISTRIBUTION [VERSION]
#
# TESTS: portable (or auto): both smoke tests and the portable pytest suite
# against the installed wheel, with that TensorFlow; smoke: the smoke tests
# only. VERSION empty: the TensorFlow requirements.txt pins for this Python
# (scripts/pins.sh), with the rest of its pins as constraints, as
# scripts/test.sh checks its wheel. Exits non-zero when a test fails.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dist="$1"; tests="$2"; distribution="$3"; version="${4:-}"
log() { printf '[abi3_tests %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

wheel="$(ls "${dist}"/reverb_tf-*-cp312-abi3-*.whl)"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
  python3-venv chromium binutils ca-certificates >/dev/null
python3 -c 'import sys; assert sys.version_info >= (3, 12), sys.version'

log "$(python3 -c 'import platform, sys; print(platform.machine(), sys.version.replace(chr(10), " "))')," \
    "wheel $(basename "${wheel}")"

check_args=()
if [[ -z "${version}" ]]; then
  pins="$(mktemp)"
  trap 'rm -f "${pins}"' EXIT
  bash "${ROOT}/scripts/pins.sh" python3 > "${pins}"
  requirement="$(grep -iE "^${distribution//-/[-_]}==" "${pins}")"
  check_args+=(--constraints "${pins}")
else
  requirement="${distribution}==${version}"
fi
case "${tests}" in
  portable|auto) check_args+=(--pytest --portable) ;;
  smoke) ;;
  *) echo "TESTS must be portable, smoke or auto, not ${tests}" >&2; exit 2 ;;
esac
bash "${ROOT}/scripts/check_wheel.sh" "${wheel}" "${requirement}" "${check_args[@]}"
