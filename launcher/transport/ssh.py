"""Start tasks on remote hosts over SSH, with the same guarantees as local ones.

Each task is one SSH session running the task_runner helper through the bootstrap: its source,
then the task's argv, cwd and environment go over the channel's stdin (never the command line).
The helper leads the remote process group; stdout carries the task's output, stderr the event
channel (JSON lines), and stdin stays open as the lifeline: when the launcher or the connection
goes away the helper kills the group. Stops are forwarded as `signal N` lines.

A partition or a frozen host closes nothing, so both ends also watch for silence: the launcher
pings every helper and each helper reports `alive` a few times per `ssh.liveness_timeout_s`;
a session silent for that long is lost here (the report names the host) and, on the far side,
the helper kills its task by itself.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from typing import Any

from launcher.agent import task_runner
from launcher.agent.bootstrap import remote_command, source_line
from launcher.agent.task_runner import BEATS_PER_TIMEOUT
from launcher.errors import HostError
from launcher.plan import TaskLaunch
from launcher.spec import HostSpec, SshSpec
from launcher.transport.base import EventSink, ExitStatus, HelperChannel
from launcher.transport.ssh_client import connect, resolve_target
from launcher.transport.standby import SpareWatch, StandbyPool, standby_header, task_header
from launcher.transport.streams import TaskStreams, write_mirrored
from worker.contract import PING_LINE, SIGNAL_LINE

log = logging.getLogger(__name__)


def _channel_errors() -> tuple[type[BaseException], ...]:
    import paramiko

    return (paramiko.SSHException, OSError, EOFError)


def _exec_session(client: Any, command: str) -> Any:
    """A new session on `client`'s connection running `command` (the fixed bootstrap)."""
    channel = client.get_transport().open_session(timeout=10)
    channel.exec_command(command)
    return channel


class SshStandby:
    """A remote helper in standby mode (see transport/standby.py), on the host's shared connection."""

    def __init__(self, launch: TaskLaunch, client: Any, liveness_s: float) -> None:
        self.launch = launch
        self.lock = threading.Lock()  # one writer at a time: pings, then the task's header
        self.channel = _exec_session(client, remote_command(launch.python, stdlib_only=True))
        header = json.dumps(standby_header(launch, liveness_s)) + "\n"
        self.channel.sendall(source_line(task_runner) + header.encode())
        self.events = self.channel.makefile_stderr("rb")
        self.watch = SpareWatch(self.events, launch.name)

    def ping(self) -> None:
        with self.lock:
            try:
                self.channel.sendall(f"{PING_LINE}\n".encode())
            except _channel_errors():  # gone: the start that takes it falls back to a cold one
                pass

    def close(self) -> None:
        try:
            self.channel.close()  # the helper reads EOF and kills its group, spare included
        except _channel_errors():  # a dead connection: closed as far as we are concerned
            pass


class SshTask:
    """One task on a remote host. Invariant: `gone()` once the remote helper has exited or is lost."""

    def __init__(
        self,
        launch: TaskLaunch,
        client: Any,
        sink: EventSink,
        liveness_s: float,
        session: Any = None,
        standby: SshStandby | None = None,
    ) -> None:
        """`session`: a session already running the helper's bootstrap (the preflight's, handed
        over); `standby`: a standby made for this task; neither: a new session on `client`."""
        self.launch = launch
        self.liveness_s = liveness_s
        self._lock = standby.lock if standby is not None else threading.Lock()
        self._lost: str | None = None
        header = (json.dumps(task_header(launch, liveness_s)) + "\n").encode()
        try:
            if standby is not None:
                self._channel = standby.channel
                with self._lock:
                    self._channel.sendall(header)
                standby.watch.finish()
                events = standby.events
            else:
                self._channel = session or _exec_session(client, remote_command(launch.python, stdlib_only=True))
                self._channel.sendall(source_line(task_runner) + header)
                events = self._channel.makefile_stderr("rb")
        except _channel_errors() as error:
            raise HostError(
                launch.host, f"cannot open an SSH session for {launch.name} ({error or type(error).__name__})"
            ) from None
        self.pid = 0  # the remote helper's pid (its process group) arrives with its first heartbeat
        self.started_at = time.time()
        self._streams = TaskStreams(
            launch.name,
            launch.log_path,
            sink,
            self._channel.makefile("rb"),
            events,
            self._wait,
            on_files=functools.partial(write_mirrored, launch),
            on_alive=self._alive,
        )

    def _alive(self, report: dict[str, Any]) -> None:
        pid = report.get("pid")
        if isinstance(pid, int) and not self.pid:
            self.pid = pid

    def _wait(self) -> ExitStatus:
        status = self._channel.recv_exit_status()  # -1 when the channel closed without one
        if status >= 0 and self._lost is None:
            return ExitStatus(status, None)
        return ExitStatus(
            None,
            None,
            lost=self._lost or f"the SSH connection to {self.launch.host} closed before the task reported its exit",
        )

    def silent_for(self, now: float) -> float:
        return 0.0 if self._streams.ended else now - self._streams.last_heard

    def ping(self) -> None:
        self._send(f"{PING_LINE}\n".encode())

    def lose(self, why: str) -> None:
        """Give the task up: nothing has come from its host for too long. Its helper kills it there."""
        self._lost = why
        self.close()

    def _send(self, data: bytes) -> None:
        with self._lock:
            try:
                self._channel.sendall(data)
            except _channel_errors():  # the channel is closed: the helper is gone or going
                pass

    def signal(self, signum: int) -> None:
        self._send(f"{SIGNAL_LINE} {signum}\n".encode())

    def gone(self) -> bool:
        return self._channel.exit_status_ready() or self._channel.closed

    def close(self) -> None:
        """Close the lifeline: a helper still running kills its group."""
        try:
            self._channel.close()
        except _channel_errors():  # a dead connection: closed as far as we are concerned
            pass


class SshTransport:
    """One SSH connection per host, opened on first use and shared by that host's tasks.

    One heartbeat thread serves every task: it pings each helper and gives up a task whose
    session stayed silent for its host's liveness timeout, dropping that host's connection so
    the next start connects afresh."""

    def __init__(self, hosts: list[HostSpec]) -> None:
        self._hosts = hosts
        self._clients: dict[int, Any] = {}
        self._connecting: dict[int, threading.Lock] = {}
        self._kept_sessions: dict[int, list[Any]] = {}  # preflight sessions kept for first tasks, one per host
        self._lock = threading.Lock()
        self._tasks: list[SshTask] = []
        self._closed = threading.Event()
        self._heartbeat: threading.Thread | None = None
        self.standbys = StandbyPool(self._standby)

    def _standby(self, launch: TaskLaunch) -> SshStandby:
        standby = SshStandby(launch, self.client(launch.host_index), self._liveness_s(launch.host_index))
        self._ensure_heartbeat()  # a waiting standby needs pings as much as a task
        return standby

    def _ensure_heartbeat(self) -> None:
        with self._lock:
            if self._heartbeat is None:
                self._heartbeat = threading.Thread(target=self._beat, daemon=True, name="ssh-heartbeat")
                self._heartbeat.start()

    def client(self, host_index: int) -> Any:
        """The host's shared connection, opened if needed. Hosts connect in parallel: only callers
        for the same host wait for each other."""
        with self._lock:
            host_lock = self._connecting.setdefault(host_index, threading.Lock())
        with host_lock:
            with self._lock:
                client = self._clients.get(host_index)
            transport = client.get_transport() if client is not None else None
            if transport is None or not transport.is_active():
                client = connect(resolve_target(self._hosts[host_index]))
                with self._lock:
                    self._clients[host_index] = client
            return client

    def _liveness_s(self, host_index: int) -> float:
        settings = self._hosts[host_index].ssh
        return settings.liveness_timeout_s if settings is not None else SshSpec().liveness_timeout_s

    def start(self, launch: TaskLaunch, sink: EventSink) -> SshTask:
        log.debug("starting %s on %s over SSH", launch.name, launch.host)
        index = launch.host_index
        task = None
        standby = self.standbys.take(launch)
        if isinstance(standby, SshStandby):
            try:
                task = SshTask(launch, None, sink, self._liveness_s(index), standby=standby)
            except HostError as error:  # the standby's session broke meanwhile: start cold
                log.debug("standby for %s unusable (%s); starting cold", launch.name, error)
                standby.close()
        if task is None:
            session = self._take_kept_session(index)
            client = None if session is not None else self.client(index)
            task = SshTask(launch, client, sink, self._liveness_s(index), session)
        with self._lock:
            self._tasks = [t for t in self._tasks if not t.gone()] + [task]
        self._ensure_heartbeat()
        return task

    def open_helper(self, host_index: int, python: str) -> HelperChannel:
        """A bootstrap session on the host's shared connection (the one its tasks will use). Kept,
        it becomes the session of the host's first task: each session costs a login shell there."""
        try:
            channel = _exec_session(self.client(host_index), remote_command(python))
        except _channel_errors() as error:
            raise HostError(self._hosts[host_index].address, f"cannot open an SSH session ({error})") from None

        def keep() -> None:
            with self._lock:
                self._kept_sessions.setdefault(host_index, []).append(channel)

        return HelperChannel(
            channel.sendall, channel.makefile("rb"), channel.makefile_stderr("rb"), channel.close, keep=keep
        )

    def _take_kept_session(self, host_index: int) -> Any:
        """A kept session of this host still open, or None."""
        with self._lock:
            kept = self._kept_sessions.get(host_index, [])
            while kept:
                channel = kept.pop(0)
                if not (channel.closed or channel.exit_status_ready()):
                    return channel
                channel.close()
        return None

    def _beat(self) -> None:
        tick = min(1.0, min(self._liveness_s(i) for i in range(len(self._hosts))) / BEATS_PER_TIMEOUT)
        while not self._closed.wait(tick):
            with self._lock:
                tasks = [t for t in self._tasks if not t.gone()]
            now = time.monotonic()
            for task in tasks:
                silent = task.silent_for(now)
                if silent > task.liveness_s:
                    self._lose(task, silent)
                else:
                    task.ping()
            for standby in self.standbys.standing():
                if isinstance(standby, SshStandby):
                    standby.ping()

    def _lose(self, task: SshTask, silent: float) -> None:
        """Give up every task on the silent task's host, and the host's connection."""
        why = (
            f"nothing from {task.launch.host} for {silent:.0f}s (ssh.liveness_timeout_s={task.liveness_s:g}): the "
            "host or the network to it is down; its helper stops the task there by itself"
        )
        with self._lock:
            for other in self._tasks:
                if other.launch.host_index == task.launch.host_index and not other.gone():
                    other.lose(why)
            client = self._clients.pop(task.launch.host_index, None)
        if client is not None:  # the next start on this host connects afresh
            threading.Thread(target=client.close, daemon=True).start()

    def close(self) -> None:
        self._closed.set()
        self.standbys.clear()
        with self._lock:
            for channel in [c for kept in self._kept_sessions.values() for c in kept]:
                channel.close()  # a waiting bootstrap reads EOF and exits
            self._kept_sessions.clear()
            for client in self._clients.values():
                client.close()
            self._clients.clear()
