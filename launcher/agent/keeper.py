"""The agent's keeper: one process per agent that kills the agent's tasks should the agent itself be
killed outright (SIGKILL, the OOM killer) and so leave them running.

Forked from the agent at its very start, before it has any thread (a fork copies only the forking
thread, so no lock can be left half-held): the bootstrap runs this module first and forks at once,
before the agent's other modules are loaded (launcher/agent/bootstrap.py). The keeper then maps
8.8 MiB rather than 12.4 (the agent, 15.6), and every page a process maps costs its exit: at a stop of
256 hosts simulated on 2 cores, exits were half the CPU. It leaves the agent's session and process
group, keeps nothing open of the agent's (its standard streams go to /dev/null, so it holds neither the agent's
channel nor a terminal) but the read end of one pipe, and reads what the agent writes there, a
line each: `+PID START` when a task's group starts (START is the leader's start time from /proc),
`-PID` before the agent reaps a leader it has killed or seen end. When the pipe ends, the agent is
gone (killed, or leaving after it killed its tasks): every group still listed and still the agent's
gets SIGKILL, and the keeper exits.

A group counts as still the agent's while its leader is the process that was started (same pid,
same start time); with the leader gone, while a process of that group is in the agent's session
(tasks never leave it; a daemon that double-forked did) and started no earlier than the leader.

This costs the agent one fork (no new interpreter) and one short write per start and per end, where
the kernel's parent-death signal costs each task either the exec of `setpriv` (about a millisecond
of CPU, a sixth of a trivial task's start when a host starts hundreds) or a `preexec_fn`, which rules
out vfork. What it does not cover: a task in the moment between its spawn and its `+PID` line
(microseconds). Should the keeper die, or read nothing for WRITE_WAIT_S (stopped), it is killed and
the tasks it listed are covered no more; from then on the agent starts tasks the kernel's way
(launcher/agent/spawn.py).

Standard library only.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time

WRITE_WAIT_S = 5.0  # how long a line waits for a keeper that reads nothing (stopped, or starved of CPU)
WAIT_S = 2.0  # how long a leaving agent waits for its keeper's last pass


def proc_stat(pid: int | str) -> list[bytes] | None:
    """The fields of /proc/PID/stat after the command name (state first), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_time(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (clock ticks since boot): with the pid, names one process."""
    fields = proc_stat(pid)
    return int(fields[19]) if fields is not None and len(fields) > 19 else None


def _members() -> dict[int, list[tuple[int, int]]]:
    """Every process now running (or a zombie) by its process group: (session, start time) each."""
    found: dict[int, list[tuple[int, int]]] = {}
    for name in os.listdir("/proc"):
        fields = proc_stat(name) if name.isdigit() else None
        if fields is not None and len(fields) > 19:
            found.setdefault(int(fields[2]), []).append((int(fields[3]), int(fields[19])))
    return found


def doomed(listed: dict[int, int], session: int) -> list[int]:
    """Which listed groups (leader pid -> its start time) are still the agent's (module docstring)."""
    members: dict[int, list[tuple[int, int]]] | None = None
    kill = []
    for pid, started in listed.items():
        now = start_time(pid)
        if now == started:
            kill.append(pid)
        elif now is None:  # the leader was reaped: its group may live on under its number
            members = _members() if members is None else members
            if any(sid == session and begun >= started for sid, begun in members.get(pid, [])):
                kill.append(pid)
    return kill


def _keep(read_fd: int) -> None:
    session = os.getsid(0)  # the agent's, which its tasks share
    os.setsid()  # out of the agent's group and session: what stops them does not stop the keeper
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    for name in os.listdir("/proc/self/fd"):
        if int(name) > 2 and int(name) != read_fd:
            try:
                os.close(int(name))
            except OSError:  # the listing's own descriptor, closed already
                pass
    listed: dict[int, int] = {}
    pending = b""
    while data := os.read(read_fd, 65536):
        *lines, pending = (pending + data).split(b"\n")
        for line in lines:
            words = line[1:].split()
            if line[:1] == b"+" and len(words) == 2:
                listed[int(words[0])] = int(words[1])
            elif line[:1] == b"-" and len(words) == 1:
                listed.pop(int(words[0]), None)
    for pgid in doomed(listed, session):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:  # gone meanwhile
            pass


class Keeper:
    """The agent's side. Lifecycle: `start()` -> `watch` and `forget` per task -> `release()` once the
    agent has killed every task itself. Once `lives()` is False it stays so."""

    def __init__(self, pid: int, write_fd: int) -> None:
        self.pid = pid
        self._usable = True  # False once a line could not be written: tasks then start the kernel's way
        self._reaped = False
        self._fd = write_fd
        self._lock = threading.Lock()

    def lives(self) -> bool:
        """Whether the keeper runs and its pipe takes a line now (it is this process's child), so
        that a task started next is listed at once, never after it ran for WRITE_WAIT_S."""
        with self._lock:
            self._reap()
            if self._usable and not self._reaped and not select.select([], [self._fd], [], WRITE_WAIT_S)[1]:
                self._give_up()
            return self._usable and not self._reaped

    def _give_up(self) -> None:
        """Alive but not reading: killed, as it would keep a list the agent no longer tells."""
        self._usable = False
        self._reap()
        self._kill_unreaped()

    def _kill_unreaped(self) -> None:
        if not self._reaped:  # unreaped: the pid is still the keeper's
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            self._reaped = True

    def _reap(self) -> None:
        if not self._reaped:
            try:
                self._reaped = os.waitpid(self.pid, os.WNOHANG)[0] != 0
            except ChildProcessError:  # not ours to reap (cannot happen: nothing else waits for it)
                self._reaped = True

    def _write(self, line: bytes) -> bool:
        with self._lock:
            if not self._usable or self._reaped:
                return False
            try:
                while line:  # never blocks for long: a keeper that reads nothing must not stop the agent
                    if not select.select([], [self._fd], [], WRITE_WAIT_S)[1]:
                        raise BlockingIOError
                    line = line[os.write(self._fd, line) :]
            except OSError:  # killed (EPIPE), or it read nothing for WRITE_WAIT_S (stopped)
                self._give_up()
            return self._usable

    def watch(self, pid: int) -> bool:
        """A task's group just started under `pid`; False when the keeper does not cover it."""
        started = start_time(pid)
        return started is not None and self._write(f"+{pid} {started}\n".encode())

    def forget(self, pid: int) -> None:
        """The agent is about to reap that group's leader (killed, or ended): no longer the keeper's."""
        self._write(f"-{pid}\n".encode())

    def release(self) -> None:
        """The agent leaves, its tasks killed: the pipe ends, so the keeper kills what is still listed
        and still the agent's (a task started while the agent was leaving) and exits; reaped here,
        killed when it does not exit within WAIT_S (stopped)."""
        with self._lock:
            self._usable = False
            os.close(self._fd)
            self._await_exit(time.monotonic() + WAIT_S)
            self._kill_unreaped()

    def _await_exit(self, deadline: float) -> None:
        """Until the keeper is reaped or the deadline passes: woken by its exit where the kernel gives a
        pidfd (Linux 5.3+), else polled every 2 ms (hundreds of agents polling on one machine at a stop
        took CPU from the exits they waited for)."""
        self._reap()
        try:
            exited: int | None = os.pidfd_open(self.pid) if not self._reaped else None
        except (AttributeError, OSError):  # no pidfds here
            exited = None
        try:
            while not self._reaped and (left := deadline - time.monotonic()) > 0:
                if exited is not None:
                    select.select([exited], [], [], left)
                else:
                    time.sleep(0.002)
                self._reap()
        finally:
            if exited is not None:
                os.close(exited)


def start() -> Keeper | None:
    """Fork the keeper; call before the agent starts any thread. None where there is no fork, no
    readable /proc, or no `process_group` (python < 3.11): tasks then get the kernel's parent-death
    signal instead."""
    if sys.version_info < (3, 11) or not sys.platform.startswith("linux") or start_time(os.getpid()) is None:
        return None
    try:
        read_fd, write_fd = os.pipe()
    except OSError:
        return None
    try:
        pid = os.fork()
    except OSError:
        os.close(read_fd)
        os.close(write_fd)
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
