#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds everything with Bazel and copies what Python imports into the
# package: the native files (the .so files and the server binary) into
# reverb_tf/, the generated protobuf modules into reverb_tf/cc/, as the wheel
# lays them out. Files that did not change are not touched.
#
# scripts/setup.sh ends with this; after a C++ change on a set-up machine it
# is all that is needed before pytest sees the change.
#
# Usage: bash scripts/sync_native.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
if [[ ! -f .bazelrc.local ]]; then
  echo "sync_native.sh: run scripts/setup.sh once first (it writes .bazelrc.local)" >&2
  exit 2
fi
echo "[sync_native $(date +%H:%M:%S)] bazel build //..."
bazel build --noshow_progress --ui_event_filters=-info,-debug //...
while read -r native; do
  target="${ROOT}/reverb_tf/$(basename "${native}")"
  if ! cmp -s "bazel-bin/${native}" "${target}"; then
    install -m 0755 "bazel-bin/${native}" "${target}"
  fi
done < bazel-bin/pip_package/native_files.txt
while read -r generated destination; do
  target="${ROOT}/${destination}"
  if ! cmp -s "bazel-bin/${generated}" "${target}"; then
    install -m 0644 "bazel-bin/${generated}" "${target}"
  fi
done < bazel-bin/pip_package/generated_python_files.txt
# Generated modules of earlier checkouts that no build makes any more (the
# single wire module reverb_tf_pb2.py, config_pb2.py): a stale copy would
# register its messages a second time, or under names that are gone.
rm -f "${ROOT}/reverb_tf/cc/reverb_tf_pb2.py"
for module in "${ROOT}"/reverb_tf/cc/proto/*_pb2.py; do
  if ! grep -q " ${module#"${ROOT}/"}$" bazel-bin/pip_package/generated_python_files.txt; then
    rm -f "${module}"
  fi
done
