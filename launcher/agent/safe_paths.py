"""Whether another local user could swap a directory the launcher writes in or restores from.

A directory is only as safe as the path to it: whoever may rename an entry above it can put their
own directory (or a symbolic link to one) in its place between a check and a write. The rule is
OpenSSH's StrictModes: every directory on the way, and every symbolic link followed, belongs to
root or to us, and a directory others may write to has the sticky bit (as /tmp does), so that they
cannot rename what is ours in it. Standard library only: the host agent's probe uses it too.
"""

from __future__ import annotations

import os
import stat

__all__ = ["unsafe_ancestry"]

_MAX_LINKS = 40  # as the kernel's ELOOP limit


def _problem(path: str, info: os.stat_result, uid: int) -> str | None:
    if info.st_uid not in (uid, 0):
        return f"{path} belongs to uid {info.st_uid}, not to you (uid {uid}) or root"
    if stat.S_ISDIR(info.st_mode) and info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
        return f"{path} is writable by others (mode {stat.S_IMODE(info.st_mode):04o}) and not sticky"
    return None


def unsafe_ancestry(path: str, uid: int | None = None) -> str | None:
    """Why another user could replace `path` or a directory above it, or None. Every existing
    component from / down is checked, each symbolic link and the path it leads to; `path` itself
    only as a component (its owner and mode are the caller's to judge). Missing components are fine:
    whoever creates them makes them their own."""
    uid = os.geteuid() if uid is None else uid
    pending = [part for part in os.path.abspath(path).split(os.sep) if part]
    current, links = os.sep, 0
    while pending:
        part = pending.pop(0)
        candidate = os.path.join(current, part)
        try:
            info = os.lstat(candidate)
        except OSError:  # not there yet (or not reachable): nothing of another user's to follow
            return None
        last = not pending
        if stat.S_ISLNK(info.st_mode):
            if info.st_uid not in (uid, 0):
                return f"{candidate} is a symbolic link of uid {info.st_uid}, not yours (uid {uid}) or root's"
            links += 1
            if links > _MAX_LINKS:
                return f"{path} goes through more than {_MAX_LINKS} symbolic links"
            target = os.readlink(candidate)
            pending = [p for p in target.split(os.sep) if p] + pending
            current = os.sep if os.path.isabs(target) else current
            continue
        if part == "..":
            current = os.path.dirname(current)
            continue
        if part == ".":
            continue
        if not last:
            problem = _problem(candidate, info, uid)
            if problem is not None:
                return problem
        current = candidate
    return None
