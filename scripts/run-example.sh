#!/usr/bin/env bash
# Install the project and train the built-in example: three CPU workers on this machine.
# Extra arguments go to `launch` (e.g. --run-root DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh tf
exec "${TFLAUNCH_VENV:-.venv}/bin/launch" --cluster cluster.example.json "$@"
