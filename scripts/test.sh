#!/usr/bin/env bash
# Install everything the tests need (on a fresh Debian machine too) and run the whole suite.
# Exit status: pytest's, except that "no tests collected" (5) counts as a failure.
set -euo pipefail
cd "$(dirname "$0")/.."

# A real sshd for the SSH tests; iproute2, iptables and nsenter (util-linux) for the namespace hosts.
missing=()
{ command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ]; } || missing+=(openssh-server)
{ command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ]; } || missing+=(iproute2)
{ command -v iptables >/dev/null 2>&1 || [ -x /usr/sbin/iptables ]; } || missing+=(iptables)
command -v nsenter >/dev/null 2>&1 || missing+=(util-linux)
# A local gang's private network (slirp4netns) and, without it, its firewall rule (nft).
command -v slirp4netns >/dev/null 2>&1 || missing+=(slirp4netns)
{ command -v nft >/dev/null 2>&1 || [ -x /usr/sbin/nft ]; } || missing+=(nftables)
# A real Slurm (controller and node daemons started by the tests) and munge for its authentication.
{ [ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/slurmd ] && command -v sbatch >/dev/null 2>&1; } || missing+=(slurm-wlm)
[ -x /usr/sbin/munged ] || missing+=(munge)
# podman (with runc) and debootstrap build and run the project's image from a Debian-made base.
command -v podman >/dev/null 2>&1 || missing+=(podman)
command -v runc >/dev/null 2>&1 || missing+=(runc)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
if [ "${#missing[@]}" -gt 0 ]; then
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
fi

bash scripts/setup.sh test

# Lint, format, types and the import layers first: cheap, and they fail fast.
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/lint-imports --no-logo  # the contracts in pyproject.toml: stages import downwards, no cycles
.venv/bin/hadolint docker/Dockerfile tests/data/containers/python-base.Containerfile

set +e
# --durations: the slowest tests, so the time the suite takes and where it goes is on record in CI
.venv/bin/python -m pytest -q -p no:cacheprovider --durations=20 "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: treating as a failure" >&2
  exit 1
fi
exit "$status"
