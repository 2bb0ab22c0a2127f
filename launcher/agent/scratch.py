"""The agent's scratch directory, and the removal of those whose agent died without removing them.

An agent removes its scratch when it leaves; one killed by SIGKILL, or on a machine that lost
power, cannot. So each scratch holds an `owner` file naming its agent: the pid, that process's
start time (clock ticks after boot, from /proc), the boot and the pid namespace. A starting agent
removes the scratch directories of its user whose agent is gone for certain: the same boot and pid
namespace (elsewhere a pid names another process), and no process with that pid and start time.
Anything else is left alone: another user's, a symbolic link, no or an unreadable owner file, a
temporary directory that another user could swap entries in. Standard library only.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile

from launcher.agent.safe_paths import unsafe_ancestry

PREFIX = "tflaunch-agent-"
OWNER = "owner"
_MAX_OWNER_BYTES = 4096


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def start_time(pid: int) -> int | None:
    """When process `pid` started, in clock ticks after boot; None when there is no such process."""
    stat_line = _read(f"/proc/{pid}/stat")
    if stat_line is None or ")" not in stat_line:
        return None
    fields = stat_line.rsplit(")", 1)[1].split()
    try:
        return int(fields[19])  # field 22 of proc(5); the text after the command's ")" starts at field 3
    except (IndexError, ValueError):
        return None


def _where() -> dict[str, str | None]:
    try:
        namespace: str | None = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = None
    return {"boot": _read("/proc/sys/kernel/random/boot_id"), "pidns": namespace}


def owner_of_this_process() -> dict[str, object] | None:
    """What the owner file of this process's scratch says; None where /proc cannot tell it."""
    where = _where()
    started = start_time(os.getpid())
    if started is None or None in where.values():
        return None
    return {"pid": os.getpid(), "start": started, **where}


def make_scratch() -> str:
    """A new private directory under the temporary directory, with its owner file."""
    scratch = tempfile.mkdtemp(prefix=PREFIX)
    owner = owner_of_this_process()
    if owner is not None:
        fd = os.open(os.path.join(scratch, OWNER), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(owner, handle)
    return scratch


def _gone_agent(path: str, here: dict[str, str | None], uid: int) -> bool:
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
        return False
    fd = os.open(os.path.join(path, OWNER), os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as handle:
        owner = json.loads(handle.read(_MAX_OWNER_BYTES))
    if not isinstance(owner, dict) or owner.get("boot") != here["boot"] or owner.get("pidns") != here["pidns"]:
        return False
    pid, started = owner.get("pid"), owner.get("start")
    if not isinstance(pid, int) or not isinstance(started, int) or pid <= 0 or pid == os.getpid():
        return False
    return start_time(pid) != started


def sweep(root: str | None = None) -> list[str]:
    """Remove the scratch directories under `root` (the temporary directory) whose agent is gone;
    returns their paths."""
    root = root or tempfile.gettempdir()
    here = _where()
    # judged as the parent of what it holds: root itself too, not only the directories above it
    if None in here.values() or unsafe_ancestry(os.path.join(root, PREFIX)) is not None:
        return []
    removed: list[str] = []
    uid = os.getuid()
    try:
        names = [name for name in os.listdir(root) if name.startswith(PREFIX)]
    except OSError:
        return []
    for name in names:
        path = os.path.join(root, name)
        try:
            if not _gone_agent(path, here, uid):
                continue
        except (OSError, ValueError):  # gone meanwhile, no owner file, not JSON: not ours to judge
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed
