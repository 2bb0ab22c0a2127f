"""One launcher per run directory, and a run directory that only its owner can change.

An existing run directory must belong to the launcher's user and be writable by nobody else
(otherwise another local user could plant files or symlinks where the launcher writes). While a
launch runs it holds an flock on `launch.lock` with its pid in it; a second launch of the same run,
or a `--fresh` that would move it, is refused naming that pid. The lock dies with the process,
so a killed launcher never leaves a stale one. Never starts a process.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from fnmatch import fnmatch
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.agent.safe_paths import unsafe_ancestry
from launcher.common.errors import RunDirError, UsageError
from launcher.common.masking import printable
from worker.contract import RunLayout

if TYPE_CHECKING:
    from launcher.spec.models import ClusterSpec

__all__ = [
    "RunLock",
    "check_run_dir",
    "holder_of",
    "is_run_dir",
    "lock_run",
    "refuse_if_not_a_run",
    "refuse_if_running",
]


def refuse_unsafe_ancestry(run_dir: str) -> None:
    """Refuse a run directory that another user could swap for theirs through a directory or a
    symbolic link above it (see unsafe_ancestry)."""
    problem = unsafe_ancestry(run_dir)
    if problem is not None:
        raise UsageError(
            f"{printable(run_dir)} is not safe to write in: {printable(problem)}, so another user could put their "
            "own directory in its place. Use a --run-root whose directories only you or root can change. Nothing "
            "was started."
        )


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
}


def run_dir_of(spec: ClusterSpec) -> Path:
    """The run directory, with the run root's symbolic links resolved once no other user could have
    swapped one of them (after resolving, a link of theirs would no longer show)."""
    refuse_unsafe_ancestry(os.path.join(os.path.abspath(spec.run_root), spec.name))
    _refuse_dangling_links(os.path.abspath(spec.run_root))
    return Path(spec.run_root).resolve() / spec.name


def _refuse_dangling_links(path: str) -> None:
    """UsageError when a symbolic link on `path` points nowhere (a file system not mounted, say): the
    directories the launch makes would go where the link points, where nobody looks for them."""
    at = "/"
    for part in path.strip("/").split("/"):
        at = os.path.join(at, part)
        if os.path.islink(at) and not os.path.exists(at):
            raise UsageError(
                f"run_root {printable(path)}: {printable(at)} is a symbolic link to {printable(os.readlink(at))}, "
                "which does not exist (a file system not mounted?); mount or fix it, or give another --run-root. "
                "Nothing was started."
            )
        if not os.path.lexists(at):
            return


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


def refuse_if_not_a_run(run_dir: str) -> None:
    """Refuse a run directory that exists and holds files a launch does not write (a directory of the
    user's own named by --name or --run-root), unless a launch has locked it before: a launch would
    write its spec.json and summary.json among theirs, and `--fresh` would move it aside. A missing or
    empty one, or one holding only what a launch leaves (an older launch's, one copied back), is fine."""
    try:
        with os.scandir(run_dir) as entries:
            names = sorted(entry.name for entry in entries)
    except OSError:  # missing, or not a directory: check_run_dir and the launch say so
        return
    if not names or any(name in names for name in _MADE_BY_A_LAUNCH):
        return
    foreign = [name for name in names if not _launch_wrote(name)]
    if not foreign and any(map(_only_a_launch_writes, names)):
        return  # an older launch's (before its lock), or one copied back whole
    foreign = foreign or names  # `model/`, `checkpoints/` and `metrics.jsonl` alone are anybody's names
    shown = ", ".join(printable(n) for n in foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
    raise UsageError(
        f"{printable(run_dir)} exists and holds files no launch wrote ({shown}): a launch writes its spec.json, "
        "summary.json and logs there. Give the run another --name or --run-root, or move those files. Nothing was "
        "started."
    )


def check_run_dir(run_dir: str) -> None:
    """Refuse a run directory that is not ours alone, or that another user could swap for theirs (a
    symbolic link, or a directory above it that others may change: see unsafe_ancestry); a missing
    one is fine (we make it 0700)."""
    shown = printable(run_dir)
    refuse_unsafe_ancestry(run_dir)
    try:
        info = os.lstat(run_dir)
    except (FileNotFoundError, NotADirectoryError):  # made later; a file in the way is reported then
        return
    except OSError as error:  # too long a path, a loop of links, no permission to look
        raise UsageError(
            f"{shown} cannot be used as the run directory ({error.strerror}); use another --name or --run-root. "
            "Nothing was started."
        ) from None
    if stat.S_ISLNK(info.st_mode):
        raise UsageError(
            f"{shown} is a symbolic link: the launcher writes only in a directory of its own there. Remove it, or "
            "use another --name or --run-root. Nothing was started."
        )
    if not stat.S_ISDIR(info.st_mode):
        raise RunDirError(run_dir, "it exists and is not a directory")
    if info.st_uid != os.geteuid():
        raise UsageError(
            f"{shown} belongs to uid {info.st_uid}, not to you (uid {os.geteuid()}): another user could have "
            "planted files there. Use another --name or --run-root. Nothing was started."
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UsageError(
            f"{shown} is writable by others (mode {stat.S_IMODE(info.st_mode):04o}): another user could plant files "
            f"or symlinks where the launcher writes. Make it yours alone (chmod 700 {shown}) or use another --name. "
            "Nothing was started."
        )


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


def _running(run_dir: str, pid: str) -> UsageError:
    return UsageError(
        f"{printable(run_dir)} is being run by another launcher (pid {pid}): wait for it, stop it with "
        f"'launch stop {printable(run_dir)}', or use another --name. Nothing was started."
    )


def refuse_if_running(run_dir: str) -> None:
    holder = holder_of(run_dir)
    if holder is not None:
        raise _running(run_dir, str(holder) if holder > 0 else "?")


class RunLock:
    """The held lock; `release()` (or the process's end) frees it."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def lock_run(run_dir: str) -> RunLock:
    """Take the run's lock (the run directory exists and passed `check_run_dir`)."""
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
