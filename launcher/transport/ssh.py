"""Start tasks on remote hosts over SSH, with the same guarantees as local ones.

Each task is one SSH session running the task_runner helper through the bootstrap: its source,
then the task's argv, cwd and environment go over the channel's stdin (never the command line).
The helper leads the remote process group; stdout carries the task's output, stderr the event
channel (JSON lines), and stdin stays open as the lifeline: when the launcher or the connection
goes away the helper kills the group. Stops are forwarded as `signal N` lines.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import Any

from launcher import task_runner
from launcher.plan import TaskLaunch
from launcher.spec import HostSpec
from launcher.transport.base import EventSink, ExitStatus, HelperChannel
from launcher.transport.bootstrap import remote_command, source_line
from launcher.transport.ssh_client import connect, resolve_target
from launcher.transport.streams import TaskStreams
from worker.contract import ERROR_FILE_VAR, RESULT_FILE_VAR

log = logging.getLogger(__name__)


class SshTask:
    """One task on a remote host. Invariant: `gone()` once the remote helper has exited."""

    def __init__(self, launch: TaskLaunch, client: Any, sink: EventSink) -> None:
        self.launch = launch
        self._lock = threading.Lock()
        transport = client.get_transport()
        self._channel = transport.open_session(timeout=10)
        self._channel.exec_command(remote_command(launch.python))
        header = {"argv": launch.argv, "cwd": launch.cwd, "env": launch.env}
        self._channel.sendall(source_line(task_runner) + (json.dumps(header) + "\n").encode())
        self.pid = 0  # the remote pid arrives with the exit report; unknown before
        self.started_at = time.time()
        self._streams = TaskStreams(
            launch.name,
            launch.log_path,
            sink,
            self._channel.makefile("rb"),
            self._channel.makefile_stderr("rb"),
            self._wait,
            on_files=self._mirror,
        )

    def _mirror(self, files: dict[str, Any]) -> None:
        """Write the remote result/error files where the launcher reads local ones."""
        targets = {RESULT_FILE_VAR: self.launch.result_path, ERROR_FILE_VAR: self.launch.error_path}
        for key, text in files.items():
            path = targets.get(key)
            if path is None or not isinstance(text, str):
                continue
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.tmp-{os.getpid()}"
            with open(tmp, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.replace(tmp, path)

    def _wait(self) -> ExitStatus:
        status = self._channel.recv_exit_status()  # -1 when the connection closed without one
        if status >= 0:
            return ExitStatus(status, None)
        return ExitStatus(
            None, None, lost=f"the SSH connection to {self.launch.host} closed before the task reported its exit"
        )

    def signal(self, signum: int) -> None:
        with self._lock:
            try:
                self._channel.sendall(f"signal {signum}\n".encode())
            except OSError:  # the channel is closed: the helper is gone or going
                pass

    def gone(self) -> bool:
        return self._channel.exit_status_ready() or self._channel.closed

    def close(self) -> None:
        """Close the lifeline: a helper still running kills its group."""
        self._channel.close()


class SshTransport:
    """One SSH connection per host, opened on first use and shared by that host's tasks."""

    def __init__(self, hosts: list[HostSpec]) -> None:
        self._hosts = hosts
        self._clients: dict[int, Any] = {}
        self._lock = threading.Lock()

    def client(self, host_index: int) -> Any:
        with self._lock:
            client = self._clients.get(host_index)
            transport = client.get_transport() if client is not None else None
            if transport is None or not transport.is_active():
                client = connect(resolve_target(self._hosts[host_index]))
                self._clients[host_index] = client
            return client

    def start(self, launch: TaskLaunch, sink: EventSink) -> SshTask:
        log.debug("starting %s on %s over SSH", launch.name, launch.host)
        return SshTask(launch, self.client(launch.host_index), sink)

    def open_helper(self, host_index: int, python: str) -> HelperChannel:
        """A bootstrap session on the host's shared connection (the one its tasks will use)."""
        channel = self.client(host_index).get_transport().open_session(timeout=10)
        channel.exec_command(remote_command(python))
        return HelperChannel(channel.sendall, channel.makefile("rb"), channel.makefile_stderr("rb"), channel.close)

    def close(self) -> None:
        with self._lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()
