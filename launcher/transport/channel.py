"""A byte channel to a host agent, as every medium opens it (standard library only: the CLI may
open a local one before the rest of the launcher is imported)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


def end_by_input(proc: subprocess.Popen[bytes], wait_s: float) -> None:
    """Close the input of a process that ends at the end of its input (an srun step, an SSH relay); kill it
    when it has not ended within `wait_s`."""
    try:
        assert proc.stdin is not None
        proc.stdin.close()
    except OSError:  # already broken
        pass
    try:
        proc.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


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
    # Where the launcher can end the far side itself (a local agent, its own child): an agent given up
    # for its silence is frozen or wedged, and is killed at once, so that its keeper stops its tasks
    # before a next attempt starts beside them (launcher/agent/keeper.py).
    kill: Callable[[], None] | None = None
