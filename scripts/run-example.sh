#!/usr/bin/env bash
# Install the project and train the built-in example: three CPU workers on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/launch --cluster cluster.example.json "$@"
