"""Processes the agent did not start but is the parent of: spares a task forked (worker/forked_spare.py).

The agent is a child subreaper, so a process orphaned below it (the spare a task forks, whose own
parent exits at once) becomes its child rather than init's. `Adopted` follows such a child as a
`Popen` would (pid, poll, wait, returncode: negative for a signal). Orphans it does not know of (a
task's daemonised grandchild, now the agent's child too) are reaped by `reap_strays` once they
have been zombies for a whole poll, so that no process the agent waits for itself is taken from it.
Standard library only.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Collection

PR_SET_CHILD_SUBREAPER = 36
_WAIT_POLL_S = 0.01


def become_subreaper() -> bool:
    """Make orphans below this process its children (Linux 3.4+); False where that is not to be had."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (ImportError, OSError, AttributeError):  # no ctypes, libc or prctl: spares are imported instead
        return False


class Adopted:
    """A child this process did not start, followed as `subprocess.Popen` follows its own."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped already (or never ours): nothing more to learn
                self.returncode = 0
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if timeout is None and self.returncode is None:
            try:
                _, status = os.waitpid(self.pid, 0)
                self.returncode = os.waitstatus_to_exitcode(status)
            except ChildProcessError:
                self.returncode = 0
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
            time.sleep(_WAIT_POLL_S)
        return code


class StrayReaper:
    """Reaps this process's zombie children that nobody waits for: seen as zombies at two polls in a
    row and not among the pids the agent follows itself."""

    def __init__(self) -> None:
        self._seen: set[int] = set()

    def reap(self, followed: Collection[int]) -> list[int]:
        zombies = {pid for pid in _children() if pid not in followed and _state(pid) == "Z"}
        reaped = []
        for pid in zombies & self._seen:
            try:
                os.waitpid(pid, os.WNOHANG)
                reaped.append(pid)
            except ChildProcessError:  # its owner reaped it meanwhile
                pass
        self._seen = zombies - set(reaped)
        return reaped


def _children() -> list[int]:
    """This process's children, from every thread's /proc children list (each thread's forks are its own)."""
    found: list[int] = []
    try:
        threads = os.listdir("/proc/self/task")
    except OSError:
        return found
    for tid in threads:
        try:
            with open(f"/proc/self/task/{tid}/children", encoding="ascii") as listing:
                found.extend(int(pid) for pid in listing.read().split())
        except (OSError, ValueError):  # the thread ended meanwhile, or no such file on this kernel
            continue
    return found


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[0].decode("ascii", "replace")
    except (OSError, IndexError):
        return None
