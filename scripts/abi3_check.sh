#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# CI's short check of the cp312-abi3 target (docs/packaging.md): the
# extension on the stable ABI, limited to 3.12, must compile and must serve
# under the newest CPython. The full abi3 wheel is built in a trixie or sid
# build root (container_build.sh, minutes); this keeps its two rot-prone
# parts true on every run, on a machine whose own Python is 3.11:
#   1. a check image: the sid base (Python 3.14) with python3-dev (3.14's
#      headers) and a venv holding the wheel's pinned dependencies, made once
#      and named by the pins (container_build.sh --suite sid --check-image);
#   2. Bazel compiles reverb_tf._core with --config=abi3 against those
#      headers (REVERB_TF_PYTHON_HEADERS, third_party/python/local_python.bzl),
#      in an output base of its own: Py_LIMITED_API=0x030C0000 hides every
#      API newer than 3.12 or outside the limited API, so a binding that
#      uses one fails here. What does not depend on Python's headers comes
#      from the shared disk cache;
#   3. in the check image, Python 3.14 imports the package staged with that
#      extension and the core library (the Debian 12 absl and re2 they link
#      beside them) and serves one item (pip_package/target_check.py --abi3).
# Warm about 15 s; cold about 3 to 4 min (the image, then the compile of
# nanobind and the bindings). Prints a PASS/FAIL line per step and
# "abi3_check: N passed, N failed"; exits non-zero on a failure.
#
# Usage: bash scripts/abi3_check.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${REVERB_TF_CACHE:-${HOME}/.cache/reverb_tf}"
STATE="${CACHE}/abi3-check"

passed=0; failed=0
result() {  # NAME STATUS SECONDS
  if (( $2 == 0 )); then
    passed=$(( passed + 1 )); echo "abi3_check: PASS $1 ($3 s)"
  else
    failed=$(( failed + 1 )); echo "abi3_check: FAIL $1 ($3 s)"
  fi
}
finish() {
  echo "abi3_check: ${passed} passed, ${failed} failed"
  (( failed == 0 ))
  exit
}
bazel_startup=(--output_base="${STATE}/bazel" --max_idle_secs=30)
work="$(mktemp -d)"
container=""
cleanup() {
  [[ -z "${container}" ]] || buildah rm "${container}" >/dev/null 2>&1 || true
  rm -rf "${work}"
}
trap cleanup EXIT

# 1. The check image on the sid base (container_build.sh --check-image makes
# what is missing: the base, then python3-dev and the pinned venv).
start=${SECONDS}; rc=0
timeout --kill-after=10 900 bash "${ROOT}/scripts/container_build.sh" --suite sid --check-image \
  > "${work}/image.txt" 2> "${work}/image.log" || rc=$?
check_image="$(tail -n 1 "${work}/image.txt")"
result "check image ${check_image:-?}" "${rc}" $(( SECONDS - start ))
if (( rc != 0 )); then tail -n 20 "${work}/image.log" >&2; finish; fi

# 2. The headers out of the image (again whenever the image changed), then
# the extension compiled against them.
start=${SECONDS}; rc=0
image_id="$(buildah images --noheading --no-trunc --format "{{.ID}}" "${check_image}")"
headers="${STATE}/include"
if [[ "$(cat "${STATE}/include.from" 2>/dev/null)" != "${image_id}" ]]; then
  rm -rf "${headers}"; mkdir -p "${headers}"
  container="$(buildah from --pull-never "${check_image}")"
  # Debian's python3.X/pyconfig.h only picks the architecture's own, which
  # sits in x86_64-linux-gnu/python3.X/: put that one in its place.
  buildah run --isolation chroot --volume "${headers}:/out" "${container}" -- \
    bash -c 'set -e; version="$(python3 -c "import sys; print(\"%d.%d\" % sys.version_info[:2])")"
             cp -r "/usr/include/python${version}/." /out/
             cp "/usr/include/x86_64-linux-gnu/python${version}/pyconfig.h" /out/pyconfig.h' \
    > "${work}/headers.log" 2>&1 || rc=$?
  buildah rm "${container}" >/dev/null 2>&1 || true
  container=""
  (( rc != 0 )) || echo "${image_id}" > "${STATE}/include.from"
fi
if (( rc == 0 )); then
  version="$(awk '$2 == "PY_VERSION" {gsub(/"/, "", $3); print $3}' "${headers}/patchlevel.h")"
  timeout --kill-after=10 900 bazel "${bazel_startup[@]}" build --noshow_progress \
    --ui_event_filters=-info,-debug --symlink_prefix=/ --config=abi3 \
    --repo_env=REVERB_TF_PYTHON_HEADERS="${headers}" \
    //reverb_tf/cc/python:_core.so //reverb_tf/cc:libreverb_tf.so \
    //pip_package:generated_python_manifest > "${work}/bazel.log" 2>&1 || rc=$?
fi
result "_core.so on the stable ABI (Py_LIMITED_API 3.12) against Python ${version:-?}'s headers" \
  "${rc}" $(( SECONDS - start ))
if (( rc != 0 )); then tail -n 30 "${work}/headers.log" "${work}/bazel.log" >&2 2>/dev/null; finish; fi

# 3. The package under Python 3.14: the committed Python files and the
# generated protobuf modules, the abi3 extension and the core library, and
# the system libraries they link that sid has under other names (Debian 12's
# absl and re2).
start=${SECONDS}; rc=0
bin="$(bazel "${bazel_startup[@]}" info --config=abi3 \
        --repo_env=REVERB_TF_PYTHON_HEADERS="${headers}" bazel-bin 2>/dev/null)"
mkdir -p "${work}/pkg" "${work}/libs"
(cd "${ROOT}" && git ls-files -z 'reverb_tf/*.py' | xargs -0 cp --parents -t "${work}/pkg")
while read -r generated destination; do
  install -D -m 0644 "${bin}/${generated}" "${work}/pkg/${destination}"
done < "${bin}/pip_package/generated_python_files.txt"
cp "${bin}/reverb_tf/cc/python/_core.so" "${bin}/reverb_tf/cc/libreverb_tf.so" \
  "${work}/pkg/reverb_tf/"
ldd "${work}/pkg/reverb_tf/_core.so" "${work}/pkg/reverb_tf/libreverb_tf.so" \
  | awk '$2 == "=>" && $3 ~ /^\/(usr\/)?lib\// {print $3}' \
  | grep -vE '/lib(c|m|stdc\+\+|gcc_s|pthread|dl|rt)\.so' | sort -u \
  | xargs -r cp -L -t "${work}/libs"
container="$(buildah from --pull-never "${check_image}")"
timeout --kill-after=10 300 buildah run --isolation chroot \
  --volume "${work}/pkg:/pkg:ro" --volume "${work}/libs:/libs:ro" \
  --volume "${ROOT}/pip_package:/check:ro" \
  --env LD_LIBRARY_PATH=/pkg/reverb_tf:/libs "${container}" -- \
  /venv/bin/python /check/target_check.py /pkg --abi3 > "${work}/check.log" 2>&1 || rc=$?
result "Python ${version:-?} imports it and serves one item ($(tail -n 1 "${work}/check.log"))" \
  "${rc}" $(( SECONDS - start ))
(( rc == 0 )) || tail -n 30 "${work}/check.log" >&2
finish
