#!/usr/bin/env bash
# The main job: sets up (idempotently), builds, and runs the replay demo.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "${ROOT}/scripts/setup.sh"
cd "${ROOT}"
bazel run --noshow_progress --ui_event_filters=-info,-debug //examples:core_demo
