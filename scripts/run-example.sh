#!/usr/bin/env bash
# Install the project and train the built-in example: three CPU workers on this machine.
# Extra arguments go to `launch` (e.g. --run-root DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh tf
# The example's tasks run in a private network that no other machine reaches: slirp4netns makes its
# way out. As root, install it where it is missing; without it the launcher says which ports are open.
if [ "$(id -u)" = 0 ] && ! command -v slirp4netns >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q slirp4netns
fi
exec "${TFLAUNCH_VENV:-.venv}/bin/launch" --cluster cluster.example.json "$@"
