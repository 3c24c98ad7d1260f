#!/usr/bin/env bash
# The wheel part of scripts/test.sh (which runs setup.sh first): builds the
# wheel with Bazel into dist/, then installs it into a brand-new venv with
# the TensorFlow of requirements.txt and runs the smoke test there
# (scripts/check_wheel.sh). Prints the wheel's size and the build time.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { printf '[test_wheel %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
cd "${ROOT}"

start=${SECONDS}
wheel="$(bazel run --noshow_progress --ui_event_filters=-info,-debug \
           //pip_package:build_pip_package -- dist | tail -n 1)"
log "built $(basename "${wheel}"): $(du -h "${wheel}" | cut -f1), $((SECONDS - start)) s"

start=${SECONDS}
tf_pin="$(grep -iE '^tensorflow([-_]cpu)?==' requirements.txt)"
bash scripts/check_wheel.sh "${wheel}" "${tf_pin}" --constraints requirements.txt
log "fresh venv and smoke test: $((SECONDS - start)) s"
