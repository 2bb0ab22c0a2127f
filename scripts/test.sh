#!/usr/bin/env bash
# Install everything the tests need (on a fresh Debian machine too) and run the whole suite.
# Exit status: pytest's, except that "no tests collected" (5) counts as a failure.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v sshd >/dev/null 2>&1 && [ ! -x /usr/sbin/sshd ]; then
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y openssh-server
fi

bash scripts/setup.sh test

# Lint, format and types first: cheap, and they fail fast.
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy

set +e
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: treating as a failure" >&2
  exit 1
fi
exit "$status"
