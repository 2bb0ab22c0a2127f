"""Open agents on remote hosts: one SSH connection and one session per host, whatever its tasks.

The session runs the fixed bootstrap command (launcher/agent/bootstrap.py); the agent, then every
command and the host's part of the plan, go over its standard input, never a command line. Its
standard error is joined to its output, so a login shell's "command not found" reaches the
message. A stock sshd allows 10 sessions per connection (MaxSessions): one is all a host needs,
however many tasks and warm spares it runs. The connections are made and carried by relay
processes (launcher/transport/relays.py), a window of handshakes at once; each reads the SSH config
and the known_hosts files once, so the launcher itself never imports paramiko.
"""

from __future__ import annotations

import logging

from launcher.agent.bootstrap import remote_command
from launcher.common.errors import HostError
from launcher.spec.hosts import HostSpec
from launcher.transport.relays import Relays
from launcher.transport.session import Channel
from launcher.transport.ssh_client import SshHost

log = logging.getLogger(__name__)


class SshMedium:
    """The SSH connections of a launch, one per host, opened on first use through the relays."""

    def __init__(self, hosts: list[HostSpec], pythons: list[str]) -> None:
        self._hosts = hosts
        self._pythons = pythons
        remote = [i for i, host in enumerate(hosts) if not host.is_local]
        self._relays = Relays(len(remote))
        self._relays.start(remote)  # their start-up overlaps the launcher's own

    def open(self, indices: list[int], first_line: bytes) -> dict[int, Channel | HostError]:
        hosts = {index: (SshHost.of(self._hosts[index]), remote_command(self._pythons[index])) for index in indices}
        return self._relays.open(hosts, first_line)

    def lost(self, index: int) -> None:
        self._relays.lost(index)  # the next open connects afresh

    def close(self) -> None:
        self._relays.close()
