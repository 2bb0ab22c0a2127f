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

from launcher.common.errors import UsageError
from launcher.common.printable import printable
from launcher.rundir.checkpoint_mark import (
    MARKER,
    has_checkpoints,
    read_mark,
    refuse_if_in_use,
    refuse_if_unsafe,
    tensorflow_checkpoints,
    tensorflow_file,
    writer_of,
)
from launcher.rundir.place import RunPlace
from launcher.rundir.refusals import refuse_run_dir
from launcher.spec.models import ClusterSpec
from worker.contract import is_url

__all__ = ["start_over"]


def _inside(path: str, directory: str) -> bool:
    return os.path.abspath(path).startswith(os.path.abspath(directory).rstrip("/") + "/")


def _covers(directory: str, path: str) -> bool:
    """Whether `path` is `directory` or lies inside it, symbolic links resolved."""
    outer, inner = os.path.realpath(directory), os.path.realpath(path)
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")


def _looks_like_checkpoints(names: list[str]) -> bool:
    """A launch's mark, or TensorFlow's own checkpoint files."""
    return MARKER in names or tensorflow_checkpoints(names)


def _marked_below(path: str, limit: int = 10_000) -> str | None:
    """A directory below `path` that a launch marked as its checkpoint directory (another run's,
    maybe running), looked for among the first `limit` entries; None when there is none."""
    seen = 0
    for folder, subfolders, names in os.walk(path):
        seen += len(subfolders) + len(names)
        if folder != path and MARKER in names:
            return folder
        if seen > limit:
            return None
    return None


def _not_to_move(checkpoints: str, run_dir: str, launcher_cwd: str) -> str | None:
    """Why `--fresh` must leave the checkpoint directory where it is (None: it may move it): what only
    looks like this run's checkpoints because checkpoint_dir names it (`.`, the run root, a shared
    folder, another run's checkpoints)."""
    if os.path.islink(checkpoints):
        return f"is a symbolic link (to {printable(os.readlink(checkpoints))}): moving it would move the link alone"
    for what, inner in (
        ("the run directory", run_dir),
        ("the directory you launched from", launcher_cwd),
        ("your home directory", os.path.expanduser("~")),
    ):
        if _covers(checkpoints, inner):
            return f"holds {what} ({printable(inner)})"
    if os.path.realpath(checkpoints).count("/") <= 1:
        return "is a top-level directory of this machine"
    try:
        if os.stat(checkpoints).st_mode & 0o002:
            return "is writable by anybody: a shared directory, not this run's own"
        names = os.listdir(checkpoints)
    except OSError:
        return None
    mark = read_mark(checkpoints)
    writer = writer_of(mark)
    if writer is not None and writer != run_dir:
        return f"holds the checkpoints of the run in {printable(writer)}, not this run's"
    # what was there before: the user's own files (TensorFlow's, restored by this run, are its checkpoints)
    before = [
        n for n in (mark or {}).get("found") or [] if isinstance(n, str) and n in names and not tensorflow_file(n)
    ]
    if before:
        return f"also holds what was there before the run's first launch ({_some(before)})"
    nested = _marked_below(checkpoints)
    if nested is not None:
        return f"holds another launch's checkpoint directory ({printable(nested)})"
    others = sorted(n for n in names if not tensorflow_file(n))
    if mark is None and others and tensorflow_checkpoints(names):  # no launch wrote there, and not only TensorFlow
        return f"holds files that no launch wrote and that are not TensorFlow checkpoint files ({_some(others)})"
    if not _looks_like_checkpoints(names):
        return f"holds no checkpoints of a launch (no {MARKER}, no TensorFlow checkpoint files)"
    return None


def _some(names: list[str]) -> str:
    """`a, b, c and 4 more`."""
    shown = ", ".join(printable(n) for n in names[:3])
    return shown + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _aside(path: str, stamp: str) -> str:
    target = f"{path}.old-{stamp}"
    suffix = 1
    while os.path.lexists(target):
        target, suffix = f"{path}.old-{stamp}-{suffix}", suffix + 1
    os.rename(path, target)
    return target


def start_over(spec: ClusterSpec, place: RunPlace) -> list[str]:
    """Move the run's old files aside; returns one line per move (empty when there was nothing)."""
    run_dir, checkpoints, launcher_cwd = Path(place.run_dir), place.checkpoint_dir, place.cwd
    stamp = time.strftime("%Y%m%d-%H%M%S")
    same = os.path.realpath(checkpoints) == os.path.realpath(run_dir)  # moved with the run directory
    outside = not (_inside(checkpoints, str(run_dir)) or same)
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
    refuse_run_dir(place.run_dir)  # another user's or swappable, a directory of the user's own, running: not ours
    refuse_if_in_use(checkpoints, str(run_dir))  # another run may write there (inside this run directory, too)
    if outside:  # a rename there could be raced, and the run would be refused after it
        refuse_if_unsafe(checkpoints, to_move=True)
    if outside and has_checkpoints(checkpoints):
        why = _not_to_move(checkpoints, str(run_dir), launcher_cwd)
        if why is not None:
            raise UsageError(
                f"--fresh will not move aside checkpoint_dir {printable(checkpoints)}: it {why}. Give checkpoint_dir "
                "a directory of the run's own, or move what should not be resumed by hand. Nothing was started."
            )
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
