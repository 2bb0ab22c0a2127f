#!/usr/bin/env bash
# Create .venv (reusing packages already installed system-wide) and install the project into it.
# Usage: bash scripts/setup.sh [EXTRAS]   e.g. bash scripts/setup.sh test
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
  if ! python3 -m venv --system-site-packages .venv 2>/dev/null; then
    rm -rf .venv
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y python3-venv
    python3 -m venv --system-site-packages .venv
  fi
fi
spec="."
if [ -n "${1:-}" ]; then spec=".[$1]"; fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e "$spec"
