#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The main job: sets up (idempotently), builds, and runs the replay demo:
# a server, actors writing trajectories, a learner sampling them.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "${ROOT}/scripts/setup.sh"
cd "${ROOT}"
TF_CPP_MIN_LOG_LEVEL=2 exec "${ROOT}/.venv/bin/python" examples/demo.py
