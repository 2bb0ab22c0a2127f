"""Local and SSH hosts behind one transport: a pipe or an SSH session to each host's agent."""

from __future__ import annotations

import json
from collections.abc import Callable

from launcher.agent.protocol import NetworkCommand
from launcher.common.errors import HostError
from launcher.spec.hosts import HostSpec
from launcher.spec.models import ClusterSpec
from launcher.transport.fleet import AgentHost, AgentTransport
from launcher.transport.local import close_early, open_local
from launcher.transport.private_network import close_early as close_early_network
from launcher.transport.session import Channel


class HostsMedium:
    """Local hosts through pipes, remote ones over SSH (paramiko only when a host needs it)."""

    def __init__(
        self, hosts: list[HostSpec], pythons: list[str], network: Callable[[], NetworkCommand | None] | None = None
    ) -> None:
        self._hosts = hosts
        self._pythons = pythons
        # the gang's private network (launcher/transport/local_network.py), told to each local agent
        # before anything else, so that none of its tasks or spares starts outside it; asked for once
        # the agents are on their way (it is being made meanwhile)
        self._network = network
        self._ssh = None
        if any(not host.is_local for host in hosts):
            from launcher.transport.ssh import SshMedium  # ~10 ms: paid only by a spec with a remote host

            self._ssh = SshMedium(hosts, pythons)

    def open(self, indices: list[int], first_line: bytes) -> dict[int, Channel | HostError]:
        opened: dict[int, Channel | HostError] = {}
        remote = [i for i in indices if not self._hosts[i].is_local and self._ssh is not None]
        for index in indices:
            if index not in remote:
                try:
                    opened[index] = open_local(self._hosts[index].address, self._pythons[index], first_line)
                except HostError as error:
                    opened[index] = error
        order = None if self._network is None or len(remote) == len(indices) else self._network()
        for channel in opened.values():
            if order is not None and not isinstance(channel, HostError):
                try:
                    channel.write((json.dumps(order) + "\n").encode())
                except OSError:  # the agent died at once: its session reads why
                    pass
        if remote:
            assert self._ssh is not None
            opened.update(self._ssh.open(remote, first_line))
        return opened

    def lost(self, index: int) -> None:
        if self._ssh is not None:
            self._ssh.lost(index)

    def close(self) -> None:
        close_early()
        close_early_network()
        if self._ssh is not None:
            self._ssh.close()


def agent_hosts(spec: ClusterSpec, pythons: list[str]) -> list[AgentHost]:
    """Each host's address, python and liveness timeout, as the agents need them."""
    hosts = []
    for host, python in zip([*spec.hosts, *spec.spare_hosts], pythons, strict=True):
        liveness, setting = spec.liveness_of(host)
        hosts.append(AgentHost(host.address, python, liveness, not host.is_local, setting))
    return hosts


def host_transport(
    spec: ClusterSpec, pythons: list[str], network: Callable[[], NetworkCommand | None] | None = None
) -> AgentTransport:
    """Local and SSH hosts, an agent on each; the local ones' tasks in the private `network`, if given."""
    every = [*spec.hosts, *spec.spare_hosts]  # the spares' agents too: indexed as plan.machines
    return AgentTransport(agent_hosts(spec, pythons), HostsMedium(every, pythons, network))


__all__ = ["AgentTransport", "HostsMedium", "agent_hosts", "host_transport"]
