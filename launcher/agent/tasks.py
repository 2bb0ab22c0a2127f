"""The agent's tasks: each started in a process group of its own, watched, and never left behind.

One I/O thread serves every task of the host through a selector: it forwards output as frames in
bounded chunks, relays event lines (a line over MAX_EVENT_BYTES is dropped, and the task's output
says so), and notices the end of each task's leading process (a pidfd, or a waiting thread where
the kernel has none). When the leader ends, whatever is left of its group is killed, its pipes
are drained for a bounded time, and one `exit` event closes the task's frames: the exit code or
signal, and the contents of its result and error files, which it wrote in the agent's scratch
directory (so the launcher gets them whether or not it shares a file system with this host).

A task of the next attempt may start in a warm spare made while the current one runs
(launcher/agent/standby.py); a `warm` event says whether it did, and why not.

Standard library only. Never catches a signal meant for a task; never leaves a task's group alive.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from launcher.agent import frames, stacks
from launcher.agent.adoption import StrayReaper, become_subreaper
from launcher.agent.keeper import Keeper
from launcher.agent.oom import oom_kills
from launcher.agent.processes import (
    MIRROR_MAX_BYTES,
    Send,
    close_fds,
    kill_group,
    process_state,
    read_mirrored,
    remove_quietly,
)
from launcher.agent.spawn import start_task
from launcher.agent.standby import SPARE, ForkedSpare, Standby
from worker.contract import (
    AGENT_EVENTS,
    CONTINUED,
    ERROR_FILE_VAR,
    EVENT_FD_VAR,
    EXIT,
    RESULT_FILE_VAR,
    SPARE_FDS_VAR,
    STACK_FILE_VAR,
    STARTED,
    STOPPED,
)

DRAIN_S = 1.0  # after the leader ended: how long a grandchild that escaped the group may hold a pipe


class Running:
    """One started task. Its pid leads its process group; `fds` are the open read ends of its
    output and event pipes. Ended once `status` is set; finished once its exit was sent."""

    def __init__(self, ident: int, name: str, proc: subprocess.Popen[bytes], out_fd: int, ev_fd: int) -> None:
        self.ident = ident
        self.name = name
        self.proc = proc
        self.pid = proc.pid
        self.fds = {out_fd: "out", ev_fd: "ev"}
        self.partial = b""  # event bytes not yet ended by a newline
        self.dropping = False  # inside an over-long event line
        self.status: int | None = None
        self.ended_at = 0.0  # (monotonic) when its process ended: its exit may be sent a drain later
        self.drain_until = 0.0
        self.stopped = False
        self.mirrors: dict[str, str] = {}  # env var -> the scratch path the task writes it to
        self.stack_file: str | None = None  # where its registered faulthandler writes its stacks (stacks.py)
        self.oom_kills_before = oom_kills()  # the host's count: told back if the task dies of SIGKILL


class Tasks:
    """Every task of the host. `start` and `signal` come from the command reader; the I/O thread
    does everything else. Invariant: a task's `exit` event is the last frame sent for it, and is
    sent only once its whole process group is gone."""

    def __init__(self, send: Send, scratch: str, keeper: Keeper | None = None) -> None:
        self._send = send
        self._scratch = scratch
        self._keeper = keeper
        self._adopts: bool | None = None  # a child subreaper (asked at the first task that may fork a spare)
        self._forked: dict[str, ForkedSpare] = {}  # task name -> the spare its current task forked
        self._strays = StrayReaper()
        self._selector = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._running: dict[int, Running] = {}
        self._standbys: dict[int, Standby] = {}
        self._queued: list[Callable[[], None]] = []  # work for the I/O thread, queued by other threads
        self._wake_r, self._wake_w = os.pipe()
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        threading.Thread(target=self._loop, daemon=True, name="io").start()

    # ---- commands ----------------------------------------------------------------------------

    def start(
        self,
        ident: int,
        name: str,
        argv: list[str],
        env: dict[str, str],
        cwd: str | None,
        standby: int | None,
        fork: bool = False,
    ) -> None:
        """Start a task, in its standby's spare when it has a ready one; `fork`: a runtime task that may
        fork a spare for its next attempt once it imported TensorFlow."""
        env = dict(env)
        mirrors = {}
        for key in (RESULT_FILE_VAR, ERROR_FILE_VAR):
            mirrors[key] = env[key] = os.path.join(self._scratch, f"{ident}.{key.lower()}")
        env[STACK_FILE_VAR] = os.path.join(self._scratch, f"{ident}.stack")
        spare = self._standbys.pop(standby, None) if standby is not None else self._own_spare(ident, name, fork)
        task = None
        if spare is not None and spare.take(argv, env, cwd):  # a forked one not yet ready is waited for
            task = Running(ident, name, spare.proc, spare.out_fd, spare.ev_fd)
        if fork and self._adopts is None:
            self._adopts = become_subreaper()  # else its forked spare would be init's child, not ours
        if task is None:
            task = self._start_cold(ident, name, argv, env, cwd, fork and bool(self._adopts))
        if task is None:
            return
        task.mirrors = mirrors
        task.stack_file = env[STACK_FILE_VAR]
        self._send(frames.event_frame(ident, {"event": STARTED, "pid": task.pid}))
        with self._lock:
            self._running[ident] = task
        self._queue(lambda: self._watch(task))

    def _own_spare(self, ident: int, name: str, fork: bool) -> Standby | None:
        """The spare the task's last attempt forked, when the launcher asked for no standby (the attempt
        ended before it asked): it costs nothing more to use than to close."""
        if not fork:
            return None
        with self._lock:
            forked = self._forked.pop(name, None)
        if forked is not None and forked.error is None:
            forked.serve(ident, self._send)
            return forked
        if forked is not None:
            forked.close()
        return None

    def _start_cold(
        self, ident: int, name: str, argv: list[str], env: dict[str, str], cwd: str | None, fork: bool = False
    ) -> Running | None:
        out_r, out_w = os.pipe()
        ev_r, ev_w = os.pipe()
        env[EVENT_FD_VAR] = str(ev_w)
        forked = ForkedSpare(argv[0], env, self._keeper) if fork else None
        handed: tuple[int, ...] = ()
        if forked is not None:
            handed, env[SPARE_FDS_VAR] = forked.handed()
        try:
            proc = start_task(argv, env, cwd, out_w, (ev_w, *handed), self._keeper)
        except OSError as error:
            if forked is not None:
                forked.started(False)
                forked.close()
            close_fds(out_r, ev_r)
            where = f" in {cwd}" if cwd and not os.path.isdir(cwd) else ""
            message = f"cannot start {argv[0]!r}{where}: {error.strerror}"
            self._send(frames.output_frame(ident, f"{message}\n".encode()))
            self._send(frames.event_frame(ident, {"event": EXIT, "code": 127, "signal": None, "error": message}))
            return None
        finally:
            close_fds(out_w, ev_w)
            env.pop(SPARE_FDS_VAR, None)
        if forked is not None:
            forked.started(True)
            with self._lock:
                replaced, self._forked[name] = self._forked.get(name), forked
            if replaced is not None:  # one its earlier task forked and no standby took: not needed now
                replaced.close()
        return Running(ident, name, proc, out_r, ev_r)

    def prepare(
        self, ident: int, order: dict[str, Any], env: dict[str, str], cwd: str | None, name: str | None = None
    ) -> None:
        """A standby for task `name`'s next attempt: the spare its task forked, else one that imports."""
        with self._lock:
            forked = self._forked.pop(name, None) if name is not None else None
        standby: Standby
        if forked is not None and forked.error is None:
            forked.adopt(ident, self._send)
            standby = forked
        else:
            if forked is not None:
                forked.close()
            standby = Standby(ident, order, env, cwd, self._send, self._keeper)
        with self._lock:
            replaced = self._standbys.get(ident)
            self._standbys[ident] = standby
        if replaced is not None:  # never left to be reaped unseen (its pid stays listed with the keeper)
            replaced.close()

    def drop(self, idents: list[int]) -> None:
        for ident in idents:
            standby = self._standbys.pop(ident, None)
            if standby is not None:
                standby.close()

    def signal(self, ident: int | None, signum: int) -> None:
        with self._lock:
            targets = [t for t in self._running.values() if ident is None or t.ident == ident]
        for task in targets:
            if task.status is None:
                kill_group(task.pid, signum)

    def kill_all(self) -> None:
        """Everything dies: every task's group and every spare (the launcher is gone)."""
        with self._lock:  # an ended task is reaped already: its pid may be another's now
            running = [t for t in self._running.values() if t.status is None]
            standbys: list[Standby] = [*self._standbys.values(), *self._forked.values()]
            self._standbys.clear()
            self._forked.clear()
        for task in running:
            kill_group(task.pid)
        for standby in standbys:
            standby.close()
        for task in running:
            if self._keeper is not None:
                self._keeper.forget(task.pid)
            try:
                task.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:  # stuck in the kernel: nothing more to be done from here
                pass

    def check_states(self) -> None:
        """Report a task held stopped (SIGSTOP, Ctrl-Z), and when it runs again; reap strays."""
        with self._lock:
            running = [t for t in self._running.values() if t.status is None]
            followed = {t.pid for t in self._running.values()}
            spares = [*self._standbys.values(), *self._forked.values()]
        if self._adopts:
            followed |= {s.proc.pid for s in spares if s.proc is not None}
            self._strays.reap(followed)
        for task in running:
            stopped = process_state(task.pid) in ("T", "t")
            if stopped != task.stopped:
                task.stopped = stopped
                event = {"event": STOPPED if stopped else CONTINUED, "pid": task.pid}
                self._send(frames.event_frame(task.ident, event))

    def stacks(self, idents: list[int] | None) -> dict[str, Any]:
        """The stacks of these running tasks (all, for None), by ident; see launcher/agent/stacks.py."""
        with self._lock:
            chosen = [t for t in self._running.values() if t.status is None and (idents is None or t.ident in idents)]
        return stacks.capture_all([(t.ident, t.pid, t.stack_file, t.stopped) for t in chosen])

    def groups(self) -> dict[int, int]:
        """Every running task's process group, by ident."""
        with self._lock:
            return {t.ident: t.pid for t in self._running.values() if t.status is None}

    def counts(self) -> int:
        with self._lock:
            return len(self._running)

    # ---- the I/O thread ---------------------------------------------------------------------

    def _queue(self, work: Callable[[], None]) -> None:
        with self._lock:
            self._queued.append(work)
        os.write(self._wake_w, b"x")

    def _watch(self, task: Running) -> None:
        for fd, kind in task.fds.items():
            self._selector.register(fd, selectors.EVENT_READ, (task, kind))
        try:
            pidfd = os.pidfd_open(task.pid)
        except (AttributeError, OSError):  # an old kernel or python: a thread waits instead
            threading.Thread(target=self._await_exit, args=(task,), daemon=True).start()
            return
        self._selector.register(pidfd, selectors.EVENT_READ, (task, "pidfd"))

    def _await_exit(self, task: Running) -> None:
        os.waitid(os.P_PID, task.pid, os.WEXITED | os.WNOWAIT)  # ended, not reaped: its group id stays ours
        self._queue(lambda: self._ended(task))

    def _loop(self) -> None:
        while True:
            with self._lock:
                draining = [t for t in self._running.values() if t.status is not None]
            now = time.monotonic()
            timeout = max(0.0, min(t.drain_until for t in draining) - now) if draining else None
            for key, _ in self._selector.select(timeout):
                if key.data is None:
                    os.read(self._wake_r, 4096)
                    with self._lock:
                        work, self._queued = self._queued, []
                    for item in work:
                        item()
                    continue
                task, kind = key.data
                if kind == "pidfd":
                    self._selector.unregister(key.fd)
                    close_fds(key.fd)
                    self._ended(task)
                elif kind == "out":
                    self._forward_output(task, key.fd)
                else:
                    self._forward_events(task, key.fd)
            now = time.monotonic()
            for task in draining:
                if task.ident in self._running and (not task.fds or now >= task.drain_until):
                    self._finish(task)

    def _ended(self, task: Running) -> None:
        kill_group(task.pid)  # the task is over when its group is: nothing of it may linger
        if self._keeper is not None:
            self._keeper.forget(task.pid)
        task.status = task.proc.wait()
        task.ended_at = time.monotonic()
        task.drain_until = task.ended_at + DRAIN_S
        if not task.fds:
            self._finish(task)

    def _release(self, task: Running, fd: int) -> None:
        self._selector.unregister(fd)
        close_fds(fd)
        task.fds.pop(fd, None)
        if not task.fds and task.status is not None:
            self._finish(task)

    def _forward_output(self, task: Running, fd: int) -> None:
        data = os.read(fd, frames.OUTPUT_CHUNK)
        if not data:
            self._release(task, fd)
            return
        self._send(frames.output_frame(task.ident, data))

    def _forward_events(self, task: Running, fd: int) -> None:
        data = os.read(fd, 65536)
        if not data:
            self._release(task, fd)
            return
        if task.dropping:  # inside a line already dropped: nothing of it is kept
            end = data.find(b"\n")
            if end < 0:
                return
            data, task.dropping = data[end + 1 :], False
        *lines, task.partial = (task.partial + data).split(b"\n")
        for line in lines:
            self._relay(task, line)
        if len(task.partial) > frames.MAX_EVENT_BYTES:
            task.partial, task.dropping = b"", True
            note = f"[tflaunch] an event line of {task.name} over {frames.MAX_EVENT_BYTES} bytes was dropped\n"
            self._send(frames.output_frame(task.ident, note.encode()))

    def _relay(self, task: Running, line: bytes) -> None:
        text = line.decode("utf-8", "replace")
        try:
            report = json.loads(text)
        except (ValueError, RecursionError):  # not a report (or nested past parsing): never let it through
            return
        if not isinstance(report, dict) or not isinstance(report.get("event"), str):
            return
        if report["event"] in AGENT_EVENTS or report["event"] == SPARE:
            return  # the agent's own words about a task: a task may not say them of itself
        self._send(frames.event_frame(task.ident, text))

    def _finish(self, task: Running) -> None:
        for fd in list(task.fds):
            self._selector.unregister(fd)
            close_fds(fd)
        task.fds.clear()
        if task.stack_file is not None:
            remove_quietly(task.stack_file)
        files = {}
        for key, path in task.mirrors.items():
            text = read_mirrored(path)
            if text is None:
                continue
            if len(text.encode("utf-8", "surrogateescape")) > MIRROR_MAX_BYTES:
                note = f"[tflaunch] {key} of {task.name} is over {MIRROR_MAX_BYTES} bytes: not sent back\n"
                self._send(frames.output_frame(task.ident, note.encode()))
                continue
            files[key] = text
        status = task.status if task.status is not None else 0
        code, sig = (status, None) if status >= 0 else (None, -status)
        with self._lock:
            self._running.pop(task.ident, None)
        report: dict[str, Any] = {"event": EXIT, "code": code, "signal": sig, "pid": task.pid, "files": files}
        if task.ended_at:  # how long ago it ended: which task of a host ended first, whatever held its pipes
            report["ended_s"] = round(time.monotonic() - task.ended_at, 4)
        if sig == signal.SIGKILL and task.oom_kills_before is not None and (now := oom_kills()) is not None:
            report["oom_kills"] = now - task.oom_kills_before  # 0: not the kernel's OOM killer
        self._send(frames.event_frame(task.ident, report))
