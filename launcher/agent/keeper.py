"""The agent's keeper: one process per agent that kills the agent's tasks should the agent itself be
killed outright (SIGKILL, the OOM killer) and so leave them running.

Forked from the agent at its very start, before it has any thread (a fork copies only the forking
thread, so no lock can be left half-held), it leaves the agent's session and process group, keeps
no descriptor but the read end of one pipe (nothing of the agent's channel stays open through it),
and reads what the agent writes there, a line each: `+PID START` when a task's group starts (START
is the leader's start time from /proc), `-PID` when the agent has ended that group itself, `!` when
the agent leaves after killing every task. When the pipe ends without `!`, the agent is gone: every
group still listed gets SIGKILL, and the keeper exits.

A process id is reused once its process is reaped and no group holds it, so a listed group is
killed only while its leader is the process that was started (same start time), or, with the leader
gone, while the number names no other process and some process is still in that group (a group's
id cannot be reused while a member holds it).

This costs the agent one fork (no new interpreter) and one short write per start, where the
kernel's parent-death signal costs each task either the exec of `setpriv` (about a millisecond of
CPU per task, a sixth of a trivial task's start when a host starts hundreds) or a `preexec_fn`,
which rules out vfork. What it does not cover: a task in the moment between its spawn and its
`+PID` line (microseconds), and every task started after the keeper itself was killed; the agent
then starts tasks the kernel's way again (launcher/agent/spawn.py).

Standard library only.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

WAIT_S = 2.0  # how long a leaving agent waits for its keeper to exit


def _start_time(pid: int) -> str | None:
    """Field 22 of /proc/PID/stat (clock ticks since boot): with the pid, names one process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def _groups_in_use() -> set[int]:
    """The process group of every process now running (or a zombie)."""
    found = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as handle:
                    found.add(int(handle.read().rsplit(b")", 1)[1].split()[2]))
            except (OSError, IndexError, ValueError):  # exited meanwhile
                pass
    return found


def doomed(listed: dict[int, str]) -> list[int]:
    """Which of the listed groups (pid -> its leader's start time) are still the agent's tasks."""
    groups: set[int] | None = None
    kill = []
    for pid, started in listed.items():
        now = _start_time(pid)
        if now == started:
            kill.append(pid)
        elif now is None:  # the leader was reaped: its group may live on, under its number
            groups = _groups_in_use() if groups is None else groups
            if pid in groups:
                kill.append(pid)
    return kill


def _keep(read_fd: int) -> None:
    os.setsid()  # out of the agent's group and session: what stops them does not stop the keeper
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.closerange(3, read_fd)
    os.closerange(read_fd + 1, max(os.sysconf("SC_OPEN_MAX"), read_fd + 1))
    listed: dict[int, str] = {}
    pending = b""
    while data := os.read(read_fd, 65536):
        *lines, pending = (pending + data).split(b"\n")
        for line in lines:
            words = line.split()
            if line == b"!":
                return
            if len(words) == 2 and line[:1] == b"+":
                listed[int(words[0][1:])] = words[1].decode()
            elif len(words) == 1 and line[:1] == b"-":
                listed.pop(int(words[0][1:]), None)
    for pgid in doomed(listed):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:  # gone meanwhile
            pass


class Keeper:
    """The agent's side. Lifecycle: `start()` -> `watch`/`forget` per task -> `release()` once the
    agent has killed every task itself. Once `lives()` is False it stays so."""

    def __init__(self, pid: int, write_fd: int) -> None:
        self.pid = pid
        self._alive = True
        self._fd = write_fd
        self._lock = threading.Lock()

    def lives(self) -> bool:
        """Whether the keeper still runs (it is this process's child: asking costs one system call)."""
        with self._lock:
            if self._alive:
                try:
                    self._alive = os.waitpid(self.pid, os.WNOHANG)[0] == 0
                except ChildProcessError:  # reaped already
                    self._alive = False
            return self._alive

    def _write(self, line: bytes) -> bool:
        with self._lock:
            if not self._alive:
                return False
            try:  # a keeper that reads nothing any more (stopped) must not stop the agent: never blocks
                self._alive = os.write(self._fd, line) == len(line)
            except OSError:  # killed (EPIPE), or its pipe is full
                self._alive = False
            return self._alive

    def watch(self, pid: int) -> bool:
        """A task's group just started under `pid`; False when the keeper cannot cover it."""
        started = _start_time(pid)
        return started is not None and self._write(f"+{pid} {started}\n".encode())

    def forget(self, pid: int) -> None:
        """The agent ended that group itself."""
        self._write(f"-{pid}\n".encode())

    def release(self) -> None:
        """Every task is dead: the keeper exits without killing anything, and is reaped here."""
        self._write(b"!\n")
        with self._lock:
            self._alive = False
            os.close(self._fd)
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            try:
                if os.waitpid(self.pid, os.WNOHANG)[0]:
                    return
            except ChildProcessError:  # reaped already (it had died)
                return
            time.sleep(0.005)


def start() -> Keeper | None:
    """Fork the keeper; call before the agent starts any thread. None where there is no fork or
    no `process_group` (python < 3.11): tasks then get the kernel's parent-death signal instead."""
    if sys.version_info < (3, 11) or not sys.platform.startswith("linux"):
        return None
    try:
        read_fd, write_fd = os.pipe()
        pid = os.fork()
    except OSError:
        return None
    if pid == 0:
        code = 0
        try:
            _keep(read_fd)
        except BaseException:  # noqa: BLE001 - the keeper has nobody to tell; it ends
            code = 1
        os._exit(code)
    os.close(read_fd)
    os.set_blocking(write_fd, False)
    return Keeper(pid, write_fd)
