"""The launcher's end of one host agent: one channel, one reader, every task of the host.

Whatever carries it (a local pipe, an SSH session, a node's share of a Slurm step), a session
speaks the agent protocol (launcher/agent/protocol.py, launcher/agent/frames.py): commands out,
frames in. One reader thread per host reads every frame and routes it: output to its task (the
attempt's log file gets the bytes; the console gets lines, an over-long one cut and saying so),
events to the supervisor's sink, the agent's answers to whoever asked. When the channel ends or
goes silent, every task of the host that has not reported its exit ends as lost, with the reason.
"""

from __future__ import annotations

import functools
import logging
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import IO, Any

from launcher.agent import frames
from launcher.agent.bootstrap import NEEDS_CODE
from launcher.agent.processes import kill_group
from launcher.agent.protocol import Answer, Command, ProbeRequest
from launcher.common.errors import HostError
from launcher.common.masking import PemLines, redact
from launcher.common.private_files import make_private_dir, open_private
from launcher.plan import TaskLaunch
from launcher.transport.base import EventSink, ExitStatus, OutputLine, TaskExited, WorkerReport, exit_status_of
from launcher.transport.channel import Channel
from worker.contract import ALIVE, CUT_MARKER, ERROR_FILE_VAR, EXIT, MAX_LINE_BYTES, RESULT_FILE_VAR, STARTED, USAGE
from worker.files import write_atomic

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 60.0  # an agent is up in well under a second; a host this slow is not usable
PROBE_TIMEOUT_S = 30.0
SPARE = "spare"  # a standby's report that its spare is ready (or will not be): counted, not shown
_RAW_KEPT = 12  # lines of an agent's own words kept for the message when it cannot start or dies


class Lines:
    """Splits a task's output into console lines; a line over MAX_LINE_BYTES is shown cut, once."""

    def __init__(self, emit: Callable[[str], None]) -> None:
        self._emit = emit
        self._partial = b""
        self._cutting = False

    def feed(self, data: bytes) -> None:
        *lines, rest = (self._partial + data).split(b"\n")
        for line in lines:
            if self._cutting:
                self._cutting = False
                continue
            self._show(line)
        self._partial = rest
        if len(rest) > MAX_LINE_BYTES:
            if not self._cutting:
                self._emit(self._text(rest[:MAX_LINE_BYTES]) + CUT_MARKER)
            self._partial, self._cutting = b"", True

    def flush(self) -> None:
        if self._partial and not self._cutting:
            self._show(self._partial)
        self._partial, self._cutting = b"", False

    def _show(self, line: bytes) -> None:
        self._emit(self._text(line))

    @staticmethod
    def _text(raw: bytes) -> str:
        return raw.decode("utf-8", "replace").rstrip("\r")


def write_mirrored(launch: TaskLaunch, files: dict[str, Any]) -> None:
    """Write the result/error files an agent sent back where the launcher reads them."""
    targets = {RESULT_FILE_VAR: launch.result_path, ERROR_FILE_VAR: launch.error_path}
    for key, text in files.items():
        path = targets.get(key)
        if path is None or not isinstance(text, str):
            continue
        make_private_dir(os.path.dirname(path))
        write_atomic(path, redact(text))


class RedactedLog:
    """A task's log file, written line by line through the launch's redaction (its secrets never
    reach the disk); a line longer than MAX_LINE_BYTES is written in pieces as it comes. The file is
    made at the first write: a task that prints nothing has none (a thousand empty files cost a
    launch of a thousand silent tasks a third of the launcher's CPU)."""

    def __init__(self, opener: Callable[[], IO[bytes]]) -> None:
        self._opener = opener
        self._handle: IO[bytes] | None = None
        self._closed = False
        self._partial = b""
        self._pem = PemLines()
        self.failed: str | None = None  # why the file could not be written (a full disk): nothing more is

    def _open(self) -> IO[bytes] | None:
        if self._handle is None and not self._closed and self.failed is None:
            try:
                self._handle = self._opener()
            except OSError as error:
                self.failed = error.strerror or str(error)
        return self._handle

    def write(self, data: bytes) -> str | None:
        """Write what is whole of `data`; returns why, the one time the file fails (then writes no more)."""
        if self.failed is not None:
            return None
        handle = self._open()
        if handle is None:
            return self.failed
        *lines, self._partial = (self._partial + data).split(b"\n")
        try:
            if len(self._partial) > MAX_LINE_BYTES:
                lines.append(self._partial)
                self._partial = b""
                handle.write(self._redacted(lines, last_is_whole=False))
            elif lines:
                handle.write(self._redacted(lines, last_is_whole=True))
            handle.flush()
        except OSError as error:  # ENOSPC, EDQUOT, EIO: the task runs on, its lines still reach the console
            self.failed = error.strerror or str(error)
            self._partial = b""
            return self.failed
        return None

    def _redacted(self, lines: list[bytes], last_is_whole: bool) -> bytes:
        text = "\n".join(self._pem.line(line.decode("utf-8", "surrogateescape")) for line in lines)
        return (redact(text) + ("\n" if last_is_whole else "")).encode("utf-8", "surrogateescape")

    def close(self) -> None:
        handle, self._handle, self._closed = self._handle, None, True
        if handle is None:
            return
        try:
            if self._partial and self.failed is None:
                handle.write(self._redacted([self._partial], last_is_whole=False))
            self._partial = b""
            handle.close()
        except OSError as error:  # the last piece, or the buffered flush at close, met the full disk
            self.failed = self.failed or error.strerror or str(error)
            try:
                handle.close()
            except OSError:  # closed already; what it held is lost
                pass


def _open_log(path: str) -> IO[bytes]:
    make_private_dir(os.path.dirname(path))
    return open_private(path, "ab")


class AgentTask:
    """One task as the supervisor holds it. Invariant: its sink gets TaskExited exactly once, after
    the last of its output; `gone()` from then on."""

    def __init__(self, session: AgentSession, ident: int, launch: TaskLaunch, sink: EventSink) -> None:
        self.launch = launch
        self.ident = ident
        self.pid = 0  # the task's pid on its host (its process group), known once the agent started it
        self.started_at = time.time()
        self._session = session
        self._sink = sink
        self._exited = False
        self._ending = threading.Lock()
        self._log = RedactedLog(functools.partial(_open_log, launch.log_path))
        pem = PemLines()  # the console's own: it sees the same lines as the log, cut differently
        self._lines = Lines(lambda line: sink(OutputLine(launch.name, redact(pem.line(line)))))

    def output(self, data: bytes) -> None:
        if self._exited:  # a frame that raced the host's loss
            return
        failed = self._log.write(data)
        self._lines.feed(data)
        if failed is not None:
            where = self.launch.log_path
            self._sink(
                OutputLine(self.launch.name, redact(f"[tflaunch] cannot write {where} ({failed}): lines not kept"))
            )

    def event(self, data: dict[str, Any]) -> None:
        if data["event"] == EXIT:
            pid = data.get("pid")
            if isinstance(pid, int):
                self.pid = pid
            write_mirrored(self.launch, data.get("files") or {})
            self.end(exit_status_of(data))
        elif data["event"] == STARTED:
            pid = data.get("pid")
            if isinstance(pid, int):
                self.pid = pid
        elif data["event"] != SPARE:
            self._sink(WorkerReport(self.launch.name, data))

    def end(self, status: ExitStatus) -> None:
        with self._ending:  # the reader (an exit) and the liveness watcher (a loss) may race
            if self._exited:
                return
            self._exited = True
        self._lines.flush()
        self._log.close()
        self._sink(TaskExited(self.launch.name, status))

    def signal(self, signum: int) -> None:
        if not self._exited:
            self._session.send({"op": "signal", "id": self.ident, "sig": signum})

    def gone(self) -> bool:
        return self._exited

    def close(self) -> None:
        """Nothing of its own to release: the host's session closes with the transport."""


class NoAnswer(RuntimeError):
    """A probe's answer did not come in time."""

    def __init__(self, op: str, timeout: float) -> None:
        self.op = op
        super().__init__(f"no answer to {op} within {timeout:g}s")


class AgentSession:
    """One host's agent. Lifecycle: made on a channel whose agent was just sent its first line ->
    `wait_ready()` -> probes, starts, standbys, signals -> `close()` or `lose()`. Invariant: once
    `ended`, every task it started has ended too (reported, or lost)."""

    def __init__(
        self,
        host: str,
        python: str,
        channel: Channel,
        liveness_s: float,
        local: bool = False,
        code: bytes | None = None,
    ) -> None:
        """`local`: the agent runs on this machine, so its tasks' groups can be reached from here too. `code`:
        the agent's code line, sent when its bootstrap says its cache has not the code it was named."""
        self.host = host
        self.local = local
        self.python = python
        self.liveness_s = liveness_s
        self.last_heard = time.monotonic()
        self.info: dict[str, Any] = {}
        self.ended = threading.Event()
        self._channel = channel
        self._write_lock = threading.Lock()
        self._lock = threading.Lock()
        self._tasks: dict[int, AgentTask] = {}
        # each frame kind to its handler (launcher/agent/frames.py): the agent's own messages, a task's output or events
        self._routes: dict[str, Callable[[int, Any], None]] = {
            frames.AGENT: self._from_agent,
            frames.OUTPUT: self._task_output,
            frames.EVENT: self._task_event,
        }
        self._standbys: dict[int, dict[str, Any] | None] = {}  # standby id -> its spare report, once sent
        self._answers: dict[int, queue.Queue[dict[str, Any] | None]] = {}
        self._ready = threading.Event()
        self._raw: deque[str] = deque(maxlen=_RAW_KEPT)
        self._lost: str | None = None
        self._routing = False  # the reader is handing a frame on (it may wait for the supervisor)
        self._next_request = 0
        self._code = code
        self._reader = threading.Thread(target=self._read, daemon=True, name=f"agent-{host}")
        self._reader.start()

    # ---- commands ----------------------------------------------------------------------------

    def send(self, command: Command, shared: bool = False) -> bool:
        """Send one command; False when the channel is gone (its end is reported by the reader).
        `shared`: the command is the same for every agent that needs it (see Channel.shared)."""
        import json

        data = (json.dumps(command) + "\n").encode()
        write = self._channel.shared if shared and self._channel.shared is not None else self._channel.write
        with self._write_lock:
            try:
                write(data)
                return True
            except Exception as error:  # noqa: BLE001 - paramiko, OSError, ValueError: all mean the channel is gone
                log.debug("%s: cannot send to the agent: %s", self.host, error)
                return False

    def _write_raw(self, data: bytes) -> None:
        with self._write_lock:
            try:
                self._channel.write(data)
            except Exception as error:  # noqa: BLE001 - the channel is gone: its end is reported by the reader
                log.debug("%s: cannot send the agent's code: %s", self.host, error)

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Wait for the agent's `ready`; HostError naming the host and what it said otherwise."""
        self._ready.wait(timeout)  # set by `ready`, or by the channel's end
        if self.info:
            return
        said = self.said()
        if self.ended.is_set():
            cause = f"the agent did not start with python {self.python!r}"
            raise HostError(self.host, f"{cause}: {said}" if said else f"{cause} ({self._end_reason()})")
        self.close()
        raise HostError(
            self.host,
            f"the agent started with python {self.python!r} did not answer within {timeout:g}s"
            + (f": {said}" if said else ""),
        )

    def said(self) -> str:
        """The agent's own last words (a shell's, python's), one line."""
        return " | ".join(line for line in self._raw if line)[-1000:]

    def probe(self, request: ProbeRequest, timeout: float = PROBE_TIMEOUT_S) -> Answer:
        return self.ask(request)(timeout)

    def ask(self, request: ProbeRequest) -> Callable[[float], Answer]:
        """Send a probe now; what it returns waits for the answer (RuntimeError: none came, or an error did).
        A fleet's probes all go out before any answer is waited for."""
        with self._lock:
            self._next_request += 1
            ident = self._next_request
            answers: queue.Queue[dict[str, Any] | None] = queue.Queue()
            self._answers[ident] = answers
        sent = self.send({"op": "probe", "id": ident, "request": request})

        def answer(timeout: float = PROBE_TIMEOUT_S) -> Answer:
            try:
                if not sent:
                    raise RuntimeError(f"the agent is gone ({self._end_reason()})")
                try:
                    got = answers.get(timeout=timeout)
                except queue.Empty:
                    raise NoAnswer(str(request.get("op")), timeout) from None
            finally:
                with self._lock:
                    self._answers.pop(ident, None)
            if got is None:
                raise RuntimeError(f"the agent is gone ({self._end_reason()})")
            if "error" in got and request.get("op") != "read_marker":
                raise RuntimeError(str(got["error"]))
            return got

        return answer

    def track(self, ident: int, launch: TaskLaunch, sink: EventSink) -> AgentTask:
        """A task about to be started under `ident`: its frames are routed from now on."""
        task = AgentTask(self, ident, launch, sink)
        with self._lock:
            self._standbys.pop(ident, None)
            self._tasks[ident] = task
        if self.ended.is_set():  # the channel ended meanwhile: nothing will ever come for it
            task.end(ExitStatus(None, None, lost=self._lost_reason()))
        return task

    def running(self, names: set[str]) -> dict[int, str]:
        """The idents of these tasks where they still run (no exit reported), with their names."""
        with self._lock:
            return {i: t.launch.name for i, t in self._tasks.items() if t.launch.name in names and not t.gone()}

    def expect_standbys(self, idents: list[int]) -> None:
        with self._lock:
            for ident in idents:
                self._standbys[ident] = None

    def forget_standbys(self) -> list[int]:
        """Standbys not taken by a start: the caller drops them on the agent."""
        with self._lock:
            idents, self._standbys = list(self._standbys), {}
        return idents

    def spares(self) -> tuple[int, int]:
        """(spares ready, standbys waiting)."""
        with self._lock:
            reports = list(self._standbys.values())
        return sum(1 for r in reports if r and r.get("ready")), len(reports)

    def lose(self, why: str) -> None:
        """Give the host up: nothing came from it for too long. Its agent stops its tasks there.
        Returns at once: closing a channel whose far side is frozen may take a while."""
        self._lost = why
        self._end()  # the reader may be stuck in a read that no longer returns
        if self._channel.kill is not None:  # a local agent (launcher/transport/channel.py)
            try:
                self._channel.kill()
            except OSError as error:  # gone already
                log.debug("%s: killing the agent: %s", self.host, error)
        threading.Thread(target=self.close, daemon=True, name=f"close-{self.host}").start()

    def silent_for(self, now: float) -> float:
        """How long nothing came from the agent; zero while the reader is busy handing frames on (a
        slow console holds the launcher up, not the host)."""
        return 0.0 if self._routing else now - self.last_heard

    def close(self) -> None:
        try:
            self._channel.close()
        except Exception as error:  # noqa: BLE001 - a dead connection is closed as far as we are concerned
            log.debug("%s: closing the channel: %s", self.host, error)

    # ---- the reader ----------------------------------------------------------------------------

    def _read(self) -> None:
        readline = functools.partial(self._channel.reader.readline, frames.MAX_FRAME_BYTES)
        try:
            for line in iter(readline, b""):
                self.last_heard = time.monotonic()
                frame = frames.parse_frame(line)
                if frame is None and self._code is not None and line.strip() == NEEDS_CODE:
                    code, self._code = self._code, None  # once: the agent reads it as its next line
                    self._write_raw(code)
                    continue
                if frame is None:
                    self._raw.append(line.decode("utf-8", "replace").strip())
                    continue
                self._routing = True
                try:
                    self._route(*frame)
                finally:
                    self._routing = False
                    self.last_heard = time.monotonic()
        except Exception as error:  # noqa: BLE001 - a broken channel ends the session like EOF
            log.debug("%s: reading from the agent: %s", self.host, error)
        self._end()

    def _route(self, kind: str, ident: int, payload: Any) -> None:
        self._routes[kind](ident, payload)

    def _from_agent(self, ident: int, payload: dict[str, Any]) -> None:
        if payload.get("event") == "ready" and ident == 0:
            self.info = payload
            self._ready.set()
        elif payload.get("event") == USAGE and ident == 0:
            self._usage(payload.get("tasks"))
        elif payload.get("event") != ALIVE or ident != 0:
            with self._lock:
                answers = self._answers.get(ident)
            if answers is not None:
                answers.put(payload)

    def _usage(self, found: object) -> None:
        """Each task's CPU and memory, as the agent sampled them: a report of the task's (never from the task)."""
        if not isinstance(found, dict):
            return
        for key, data in found.items():
            with self._lock:
                task = self._tasks.get(int(key)) if str(key).isdigit() else None
            if task is not None and isinstance(data, dict) and not task.gone():
                task.event({**data, "event": USAGE})

    def _task_output(self, ident: int, payload: bytes) -> None:
        with self._lock:
            task = self._tasks.get(ident)
        if task is not None:
            task.output(payload)

    def _task_event(self, ident: int, payload: dict[str, Any]) -> None:
        with self._lock:
            task = self._tasks.get(ident)
            if task is None and payload.get("event") == SPARE and ident in self._standbys:
                self._standbys[ident] = payload
        if task is not None:
            task.event(payload)

    def _end_reason(self) -> str:
        return self._channel.ended() or "the channel closed"

    def _lost_reason(self) -> str:
        if self._lost is not None:
            return self._lost
        said = self.said()
        why = f"the connection to {self.host} closed before the task reported its exit ({self._end_reason()})"
        return f"{why}: {said}" if said else why

    def _end(self) -> None:
        with self._lock:
            if self.ended.is_set():
                return
            self.ended.set()
            self._ready.set()  # whoever waits for `ready` learns that none will come
            tasks = list(self._tasks.values())
            waiting = list(self._answers.values())
        for answers in waiting:
            answers.put(None)
        for task in tasks:
            if self.local and task.pid and not task.gone():
                kill_group(task.pid)  # the agent died without stopping it (it was killed itself)
            task.end(ExitStatus(None, None, lost=self._lost_reason()))
