"""A byte channel to a host agent, as every medium opens it (standard library only: the CLI may
open a local one before the rest of the launcher is imported)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class Channel:
    """A byte channel to an agent just started with the bootstrap command: `write` sends, `reader`
    has `readline(limit)`, `close` ends it (the agent then kills its tasks). `ended` says why the
    far side ended, once it has (an exit status, srun's last words), or None."""

    write: Callable[[bytes], None]
    reader: Any
    close: Callable[[], None]
    ended: Callable[[], str | None] = lambda: None
    # Where one write reaches every agent of a group (a Slurm step's broadcast input), a writer
    # that sends a command to all of them, once: what they all need (the cluster, the settings
    # their tasks share) then costs one copy, not one per node.
    shared: Callable[[bytes], None] | None = None
