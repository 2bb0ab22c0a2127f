"""The spec's size bounds, without pydantic: the spec's fields use them, and so do the command
line's host lists (`-H`, `--hostfile`, `--local`), which refuse a size before building a spec."""

from __future__ import annotations

MAX_HOSTS = 4096  # hosts of a spec, and nodes of a Slurm job
MAX_WORKERS_PER_HOST = 256  # workers of a host, and tasks of a Slurm node
