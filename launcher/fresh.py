"""`--fresh`: start a run over instead of resuming it.

The run directory (logs, summary, and the checkpoints when they live inside it) and a checkpoint
directory kept elsewhere on this machine are renamed to `<path>.old-<time>`, never deleted. What
cannot be moved from here (an object store, a directory only the remote hosts see) is refused with
the path named, so a run never resumes silently when a fresh start was asked for. Never starts a
process.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from launcher.checkpoint_mark import has_checkpoints, refuse_if_in_use
from launcher.errors import UsageError
from launcher.masking import printable
from launcher.plan import checkpoint_dir_of
from launcher.run_lock import check_run_dir, refuse_if_running
from launcher.spec import ClusterSpec, is_url
from worker.contract import RunLayout

__all__ = ["start_over"]


def _inside(path: str, directory: str) -> bool:
    return os.path.abspath(path).startswith(os.path.abspath(directory).rstrip("/") + "/")


def _aside(path: str, stamp: str) -> str:
    target = f"{path}.old-{stamp}"
    suffix = 1
    while os.path.lexists(target):
        target, suffix = f"{path}.old-{stamp}-{suffix}", suffix + 1
    os.rename(path, target)
    return target


def start_over(spec: ClusterSpec, run_dir: Path, launcher_cwd: str) -> list[str]:
    """Move the run's old files aside; returns one line per move (empty when there was nothing)."""
    checkpoints = checkpoint_dir_of(spec, RunLayout(str(run_dir)), launcher_cwd)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    outside = not _inside(checkpoints, str(run_dir))
    if is_url(checkpoints):
        raise UsageError(
            f"--fresh cannot move aside the checkpoints at {printable(checkpoints)} (an object store): remove or "
            "rename them there, or give the run another --name. Nothing was started."
        )
    if outside and not os.path.exists(checkpoints) and not any(host.is_local for host in spec.hosts):
        raise UsageError(
            f"--fresh moves old checkpoints aside on this machine, and {printable(checkpoints)} is not here: rename "
            "it on the hosts' shared storage, or give the run another --name. Nothing was started."
        )
    check_run_dir(str(run_dir))  # another user's, or one they could swap: not ours to move
    refuse_if_running(str(run_dir))
    refuse_if_in_use(checkpoints, str(run_dir))  # another run may write there (inside this run directory, too)
    if outside:  # a rename there could be raced, and the run would be refused after it
        from launcher.resume import refuse_if_unsafe

        refuse_if_unsafe(checkpoints, to_move=True)
    moved = []
    try:
        if outside and has_checkpoints(checkpoints):
            moved.append(f"checkpoints {printable(checkpoints)} -> {printable(_aside(checkpoints, stamp))}")
        if run_dir.exists():
            moved.append(f"run directory {printable(str(run_dir))} -> {printable(_aside(str(run_dir), stamp))}")
    except OSError as error:
        raise UsageError(
            f"--fresh could not move aside {printable(str(error.filename))}: {error.strerror}. Nothing was started."
        ) from None
    return moved
