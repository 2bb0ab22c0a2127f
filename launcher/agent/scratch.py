"""The agent's scratch directory: made private, held for the agent's life, and removed by a later
agent when its own was killed before it could remove it.

A live agent holds an exclusive lock (flock) on `<scratch>/.agent`; the kernel lets go of it however
the agent ends, SIGKILL included. An agent, once started, removes every other `tflaunch-agent-*`
directory of its user beside its own whose lock it can take: that agent is gone, and its tasks with it
(they get SIGKILL from the kernel when their agent dies). A directory without the lock file (made by
another version, or an agent that could not lock) is left alone, unless it is empty (or holds only a
lock file never named) and ten minutes old: an agent killed before it made its lock file, as is anything not a plain
directory of the user's own, and a directory with anything mounted inside (a task's FUSE or bind
mount outlives its agent: emptying the directory would empty what is mounted). The lock file is
removed last, so a directory that could not be emptied is tried again by the next agent.

Standard library only.
"""

from __future__ import annotations

import os
import socket
import stat

PREFIX = "tflaunch-agent-"
HELD = ".agent"


def make(parent: str | None = None) -> tuple[str, int | None]:
    """A new private scratch directory and the descriptor holding its lock (None: not held, so
    never swept). The lock file gets its name only once locked, so a sweep never sees it free."""
    scratch = _private_directory(parent or temp_root())
    try:
        import fcntl

        fresh = os.path.join(scratch, HELD + ".new")
        fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except (ImportError, OSError):
        return scratch, None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, _host())
        os.rename(fresh, os.path.join(scratch, HELD))
    except OSError:
        os.close(fd)
        os.unlink(fresh)
        return scratch, None
    return scratch, fd


def temp_root() -> str:
    """Where tempfile would put it (TMPDIR, TEMP, TMP, then /tmp, /var/tmp, /usr/tmp, then here), without
    tempfile's import (random, shutil: a tenth of an agent's start-up, on every host of a fleet)."""
    named = [os.environ.get(name) for name in ("TMPDIR", "TEMP", "TMP")]
    for found in [*(n for n in named if n), "/tmp", "/var/tmp", "/usr/tmp"]:
        if os.path.isdir(found) and os.access(found, os.W_OK | os.X_OK):
            return os.path.abspath(found)
    return os.getcwd()


def _private_directory(parent: str) -> str:
    """A new directory PREFIX + a random name in `parent`, 0700, as tempfile.mkdtemp makes one."""
    for _ in range(100):
        path = os.path.join(os.path.abspath(parent), PREFIX + os.urandom(6).hex())
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"no free scratch directory name in {parent}")


def _host() -> bytes:
    return socket.gethostname().encode("utf-8", "surrogateescape")[:256]


def sweep(own: str) -> list[str]:
    """Remove the scratch directories beside `own` that a killed agent of this user left; says which."""
    parent = os.path.dirname(own)
    try:
        entries = [e for e in os.scandir(parent) if e.name.startswith(PREFIX) and e.path != own]
    except OSError:
        return []
    return [entry.path for entry in entries if remove_if_left(entry.path)]


def remove_if_left(path: str) -> bool:
    """Remove `path` when it is a scratch directory of this user and host whose agent is gone; whether it did."""
    import fcntl

    uid = os.geteuid()
    try:
        here = os.lstat(path)
    except OSError:  # gone meanwhile
        return False
    if not stat.S_ISDIR(here.st_mode) or here.st_uid != uid:
        return False
    try:
        folder = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            fd = os.open(HELD, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=folder)
        finally:
            os.close(folder)
    except FileNotFoundError:  # no lock file: an agent killed before it made one, or one that left it empty
        return _remove_if_empty_and_old(path, here.st_mtime)
    except OSError:  # gone meanwhile, or not ours to open
        return False
    try:
        held = os.fstat(fd)
        if not stat.S_ISREG(held.st_mode) or held.st_uid != uid:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # its agent is alive
            return False
        if os.pread(fd, 256, 0) != _host():  # a temporary directory shared with other hosts (NFS, where a
            return False  # lock may be this host's alone): only this host's agents are judged here
        if _mounts_under(path):  # a task mounted something there (FUSE, a bind): not ours to empty
            return False
        remove(path)
        return not os.path.lexists(path)
    finally:
        os.close(fd)


EMPTY_AGE_S = 600.0  # an agent makes its lock file microseconds after its directory


def _remove_if_empty_and_old(path: str, modified: float) -> bool:
    """A directory without a lock file, holding nothing or only a lock file never named (its agent
    was killed in between), untouched for ten minutes: no agent will use it."""
    import time

    if time.time() - modified < EMPTY_AGE_S:
        return False
    try:
        names = os.listdir(path)
        if any(name != HELD + ".new" for name in names):
            return False
        for name in names:
            os.unlink(os.path.join(path, name))
        os.rmdir(path)  # only ever an empty one
    except OSError:
        return False
    return True


def _mounts_under(path: str) -> bool:
    """Whether anything is mounted inside `path` (also when the mount table cannot be read)."""
    import re

    inside = os.path.realpath(path).rstrip(os.sep) + os.sep
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as table:
            points = [line.split(" ")[4] for line in table if line.count(" ") >= 4]
    except OSError:
        return True
    unescaped = (re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), point) for point in points)
    return any(point.startswith(inside) for point in unescaped)


def remove_tree(path: str) -> bool:
    """`path` and everything in it, never following a symbolic link; errors are skipped. Whether it
    is all gone. Not shutil.rmtree: importing shutil (and the compression modules it tries) took an
    agent's exit about 10 ms, which every launch waited for."""
    gone = True
    try:
        for _, folders, files, fd in os.fwalk(path, topdown=False, follow_symlinks=False):
            for name in files:
                gone = _unlink(name, fd) and gone
            for name in folders:  # a link to a directory is listed here too (fwalk stats through links)
                try:
                    os.rmdir(name, dir_fd=fd)
                except NotADirectoryError:
                    gone = _unlink(name, fd) and gone
                except OSError:
                    gone = False
        os.rmdir(path)
    except OSError:
        return False
    return gone


def _unlink(name: str, fd: int) -> bool:
    try:
        os.unlink(name, dir_fd=fd)
        return True
    except OSError:
        return False


def remove(path: str) -> None:
    """Everything in `path`, its lock file last: what cannot be removed keeps the lock file, so a
    later sweep tries again. Directories a task made read-only (a Go module cache) are made
    writable first: they are the user's own."""
    folders = [path]
    while folders:
        folder = folders.pop()
        try:
            if stat.S_ISDIR(os.lstat(folder).st_mode):
                os.chmod(folder, 0o700)
                folders.extend(e.path for e in os.scandir(folder) if e.is_dir(follow_symlinks=False))
        except OSError:
            continue
    try:
        entries = [e for e in os.scandir(path) if e.name != HELD]
    except OSError:
        return
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                if not remove_tree(entry.path):
                    return
            else:
                os.unlink(entry.path)
        except OSError:
            return
    try:
        os.unlink(os.path.join(path, HELD))
        os.rmdir(path)
    except OSError:
        pass
