#!/usr/bin/env bash
# Create a virtual environment (default .venv; TFLAUNCH_VENV names another) and install the project
# into it, with nothing from the system's site-packages: what runs is what the project declares.
# Usage: bash scripts/setup.sh [EXTRAS]   e.g. bash scripts/setup.sh test (extras comma-separated: tf,fit)
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${TFLAUNCH_VENV:-.venv}"

if [ ! -x "$venv/bin/python" ]; then
  if ! python3 -m venv "$venv" 2>/dev/null; then
    rm -rf "$venv"
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y python3-venv
    python3 -m venv "$venv"
  fi
fi
spec="."
if [ -n "${1:-}" ]; then spec=".[$1]"; fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e "$spec"
# Bytecode for the project's own modules: an editable install has none, and an environment with
# PYTHONDONTWRITEBYTECODE set would otherwise compile the launcher anew at every start.
"$venv/bin/python" -m compileall -q launcher worker tflaunch >/dev/null
