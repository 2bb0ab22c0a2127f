"""The spec's size bounds, without pydantic: the spec's fields use them, and so do the command
line's host lists (`-H`, `--hostfile`, `--local`), which refuse a size before building a spec."""

from __future__ import annotations

MAX_HOSTS = 4096  # hosts of a spec, and nodes of a Slurm job
MAX_WORKERS_PER_HOST = 256  # workers of a host, and tasks of a Slurm node
MAX_SPEC_BYTES = 16 * 2**20  # a spec file (4,096 hosts with an env each fit in a few MiB): read no further
