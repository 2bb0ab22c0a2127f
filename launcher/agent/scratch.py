"""The agent's scratch directory: made private, held for the agent's life, and removed by a later
agent when its own was killed before it could remove it.

A live agent holds an exclusive lock (flock) on `<scratch>/.agent`; the kernel lets go of it however
the agent ends, SIGKILL included. An agent, once started, removes every other `tflaunch-agent-*`
directory of its user beside its own whose lock it can take: that agent is gone, and its tasks with it
(they get SIGKILL from the kernel when their agent dies). A directory without the lock file (made by
another version, or an agent that could not lock) is left alone, as is anything not a plain
directory of the user's own.

Standard library only.
"""

from __future__ import annotations

import os
import stat
import tempfile

PREFIX = "tflaunch-agent-"
HELD = ".agent"


def make(parent: str | None = None) -> tuple[str, int | None]:
    """A new private scratch directory and the descriptor holding its lock (None: not held, so
    never swept). The lock file gets its name only once locked, so a sweep never sees it free."""
    scratch = tempfile.mkdtemp(prefix=PREFIX, dir=parent)
    try:
        import fcntl

        fresh = os.path.join(scratch, HELD + ".new")
        fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except (ImportError, OSError):
        return scratch, None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.rename(fresh, os.path.join(scratch, HELD))
    except OSError:
        os.close(fd)
        os.unlink(fresh)
        return scratch, None
    return scratch, fd


def sweep(own: str) -> list[str]:
    """Remove the scratch directories beside `own` that a killed agent of this user left; says which."""
    parent = os.path.dirname(own)
    try:
        entries = [e for e in os.scandir(parent) if e.name.startswith(PREFIX) and e.path != own]
    except OSError:
        return []
    return [entry.path for entry in entries if _remove_if_left(entry.path)]


def _remove_if_left(path: str) -> bool:
    import fcntl

    uid = os.geteuid()
    try:
        here = os.lstat(path)
        if not stat.S_ISDIR(here.st_mode) or here.st_uid != uid:
            return False
        folder = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            fd = os.open(HELD, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=folder)
        finally:
            os.close(folder)
    except OSError:  # gone meanwhile, not ours to open, or no lock file
        return False
    try:
        held = os.fstat(fd)
        if not stat.S_ISREG(held.st_mode) or held.st_uid != uid:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # its agent is alive
            return False
        import shutil  # only when there is something to remove

        shutil.rmtree(path, ignore_errors=True)
        return not os.path.lexists(path)
    finally:
        os.close(fd)
