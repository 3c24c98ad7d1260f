#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the reverb_tf wheel into OUTDIR (relative to where bazel was run):
#
#   bazel run //pip_package:build_pip_package -- OUTDIR
#
# The work is done by build_pip_package.py, run with the interpreter the
# native code was built for (see BUILD).
set -euo pipefail
if [[ -d "$0.runfiles" ]]; then
  RUNFILES="$0.runfiles/reverb_tf"
else
  RUNFILES="${RUNFILES_DIR:?cannot find the runfiles of $0}/reverb_tf"
fi
python="$(cat "${RUNFILES}/pip_package/build_python.txt")"
exec "${python}" "${RUNFILES}/pip_package/build_pip_package.py" --runfiles="${RUNFILES}" "$@"
