"""One launcher per run directory, and what a run directory holds.

While a launch runs it holds an flock on `launch.lock` with its pid in it; a second launch of the
same run, or a `--fresh` that would move it, is refused naming that pid. The lock dies with the
process, so a killed launcher never leaves a stale one. Which files only a launch makes tells a run
directory from a directory of the user's own. What refuses a run directory is launcher/rundir/refusals.py.
Never starts a process.
"""

from __future__ import annotations

import errno
import fcntl
import os
from fnmatch import fnmatch

from launcher.common.errors import RunDirError, UsageError
from launcher.common.printable import printable
from worker.contract import RunLayout

__all__ = ["RUNNING", "RunLock", "foreign_files", "holder_of", "is_run_dir", "lock_run", "run_around"]


_LAYOUT = RunLayout("")  # its paths are then the bare names a launch gives its files
_MADE_BY_A_LAUNCH = (_LAYOUT.lock_file, "submitted-spec.json")  # every launch's lock; a Slurm submission's spec
# Only a launch (of this version or an older one) writes these: no project of the user's has them by chance.
_ONLY_A_LAUNCH = frozenset(
    (_LAYOUT.summary_file, _LAYOUT.status_file, _LAYOUT.preflight_file, _LAYOUT.stop_request_file, "submit.sbatch")
)
# Everything a launch leaves in its run directory, besides attempt-N/, slurm-JOBID.out and its temporary files.
_RUN_LAYOUT = _ONLY_A_LAUNCH | {
    *_MADE_BY_A_LAUNCH,
    _LAYOUT.spec_file,
    _LAYOUT.metrics_file,
    _LAYOUT.eval_file,
    _LAYOUT.default_checkpoint_dir,
    _LAYOUT.export_dir,
    _LAYOUT.tensorboard_dir,
    "stacks",  # `launch stacks` requests and answers (launcher/rundir/stacks_now.py)
}


def _only_a_launch_writes(name: str) -> bool:
    """A launch's summary, status, preflight findings or stop request, an attempt, a Slurm script or its output."""
    return name in _ONLY_A_LAUNCH or RunLayout.attempt_of(name) is not None or fnmatch(name, "slurm-*.out")


def _launch_wrote(name: str) -> bool:
    return name in _RUN_LAYOUT or _only_a_launch_writes(name) or (name.startswith(".") and name.endswith(".tmp"))


def run_file_in(path: str) -> str | None:
    """A file or directory in `path` that only a launch makes (summary, status, preflight findings, an
    attempt, a Slurm script), not counting Slurm's own output (sbatch writes slurm-*.out where it is
    run); None when there is none or `path` cannot be read."""
    try:
        names = sorted(os.listdir(path))
    except OSError:
        return None
    return next((name for name in names if name in _ONLY_A_LAUNCH or RunLayout.attempt_of(name) is not None), None)


def run_around(path: str, levels: int) -> tuple[str, str] | None:
    """The nearest of `path` and the `levels - 1` directories above it (symbolic links resolved) that
    holds a file only a launch makes, with that file's name (see `run_file_in`); None when none does."""
    here = os.path.realpath(path)
    for _ in range(levels):
        found = run_file_in(here)
        if found is not None:
            return here, found
        here = os.path.dirname(here)
    return None


def is_run_dir(path: str) -> bool:
    """Whether `path` holds what only a launch leaves (a summary, a status file, a Slurm script, an attempt)."""
    try:
        return any(_only_a_launch_writes(name) for name in os.listdir(path))
    except OSError:
        return False


def foreign_files(run_dir: str) -> list[str] | None:
    """The files of a run directory that no launch wrote (a directory of the user's own named by --name
    or --run-root), unless a launch has locked it before: a launch would write its spec.json and
    summary.json among theirs, and `--fresh` would move it aside. None for a missing or empty one, or
    one holding only what a launch leaves (an older launch's, one copied back)."""
    try:
        with os.scandir(run_dir) as entries:
            names = sorted(entry.name for entry in entries)
    except OSError:  # missing, or not a directory: the other refusals and the launch say so
        return None
    if not names or any(name in names for name in _MADE_BY_A_LAUNCH):
        return None
    foreign = [name for name in names if not _launch_wrote(name)]
    if not foreign and any(map(_only_a_launch_writes, names)):
        return None  # an older launch's (before its lock), or one copied back whole
    return foreign or names  # `model/`, `checkpoints/` and `metrics.jsonl` alone are anybody's names


def holder_of(run_dir: str) -> int | None:
    """The pid of the launcher running this run now, or None."""
    try:
        fd = os.open(RunLayout(run_dir).lock_file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:  # no lock file (never launched here) or not a regular file we can open
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as error:
        if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise
        text = os.read(fd, 32).decode("ascii", "replace").strip()
        return int(text) if text.isdigit() else -1
    finally:
        os.close(fd)
    return None


RUNNING = (
    "{shown} is being run by another launcher (pid {pid}): wait for it, stop it with 'launch stop {shown}', or use "
    "another --name."
)


def _running(run_dir: str, pid: str) -> UsageError:
    return UsageError(RUNNING.format(shown=printable(run_dir), pid=pid) + " Nothing was started.")


class RunLock:
    """The held lock; `release()` (or the process's end) frees it."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def lock_run(run_dir: str) -> RunLock:
    """Take the run's lock (the run directory exists and passed `refuse_run_dir(run_dir, OWNED)`)."""
    path = RunLayout(run_dir).lock_file
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as error:
        raise RunDirError(path, error.strerror or str(error)) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        text = os.read(fd, 32).decode("ascii", "replace").strip()
        os.close(fd)
        if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise RunDirError(path, error.strerror or str(error)) from None
        raise _running(run_dir, text or "?") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return RunLock(fd)
