"""Open agents on remote hosts: one SSH connection and one session per host, whatever its tasks.

The session runs the fixed bootstrap command (launcher/agent/bootstrap.py); the agent, then every
command and the host's part of the plan, go over its standard input, never a command line. Its
standard error is joined to its output, so a login shell's "command not found" reaches the
message. A stock sshd allows 10 sessions per connection (MaxSessions): one is all a host needs,
however many tasks and warm spares it runs. Hosts connect side by side.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from launcher.agent.bootstrap import remote_command
from launcher.common.errors import HostError
from launcher.spec.hosts import HostSpec
from launcher.transport.fleet import side_by_side
from launcher.transport.malloc_arenas import limit_malloc_arenas
from launcher.transport.session import Channel
from launcher.transport.ssh_client import connect, resolve_target

log = logging.getLogger(__name__)
_SESSION_TIMEOUT_S = 10.0


def _channel_errors() -> tuple[type[BaseException], ...]:
    import paramiko

    return (paramiko.SSHException, OSError, EOFError)


class SshMedium:
    """The SSH connections of a launch, one per host, opened on first use."""

    def __init__(self, hosts: list[HostSpec], pythons: list[str]) -> None:
        limit_malloc_arenas()  # before the transports' threads start
        self._hosts = hosts
        self._pythons = pythons
        self._lock = threading.Lock()
        self._clients: dict[int, Any] = {}

    def open(self, indices: list[int], first_line: bytes) -> dict[int, Channel | HostError]:
        opened: dict[int, Channel | HostError] = {}

        def one(index: int) -> None:
            try:
                opened[index] = self._session(index, first_line)
            except HostError as error:
                opened[index] = error

        side_by_side(indices, one)
        return opened

    def _client(self, index: int) -> Any:
        with self._lock:
            client = self._clients.get(index)
        transport = client.get_transport() if client is not None else None
        if transport is None or not transport.is_active():
            client = connect(resolve_target(self._hosts[index]))
            with self._lock:
                self._clients[index] = client
        return client

    def _session(self, index: int, first_line: bytes) -> Channel:

        address = self._hosts[index].address
        client = self._client(index)
        try:
            channel = client.get_transport().open_session(timeout=_SESSION_TIMEOUT_S)
            channel.set_combine_stderr(True)
            channel.exec_command(remote_command(self._pythons[index]))
        except _channel_errors() as error:
            raise HostError(address, f"cannot open an SSH session ({error or type(error).__name__})") from None
        try:
            channel.sendall(memoryview(first_line))  # sendall slices what is left: a view is not copied
        except _channel_errors():  # the command ended at once (a python that is not there): the session reads why
            pass

        def ended() -> str | None:
            if not channel.exit_status_ready():
                return None
            status = channel.recv_exit_status()
            return "the SSH session closed" if status < 0 else f"the agent exited with code {status}"

        def close() -> None:
            try:
                channel.close()
            except _channel_errors():  # a dead connection: closed as far as we are concerned
                pass

        return Channel(channel.sendall, channel.makefile("rb"), close, ended)

    def lost(self, index: int) -> None:
        with self._lock:
            client = self._clients.pop(index, None)
        if client is not None:  # the next open connects afresh; closing a dead one may block
            threading.Thread(target=client.close, daemon=True).start()

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()
