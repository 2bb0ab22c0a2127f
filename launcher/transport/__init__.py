"""Ways of starting tasks, behind one interface (see base.py)."""

from __future__ import annotations

from launcher.plan import TaskLaunch
from launcher.spec import HostSpec
from launcher.transport.base import EventSink, HelperChannel, Started, StartRequest, TaskProcess, start_by_host
from launcher.transport.local import LocalTransport
from launcher.transport.standby import StandbyPool


class HostRouter:
    """Starts each task with the transport its host needs; the supervisor sees one transport."""

    def __init__(self, hosts: list[HostSpec]) -> None:
        self._hosts = hosts
        self._local = LocalTransport()
        self._ssh = None
        if any(not host.is_local for host in hosts):
            from launcher.transport.ssh import SshTransport  # paramiko only when needed

            self._ssh = SshTransport(hosts)

    def start(self, launch: TaskLaunch, sink: EventSink) -> TaskProcess:
        if launch.is_local or self._ssh is None:
            return self._local.start(launch, sink)
        return self._ssh.start(launch, sink)

    def start_all(self, requests: list[StartRequest]) -> list[Started]:
        try:
            return start_by_host(self.start, requests)
        finally:  # standbys serve the attempt after the one they were made in, never a later one
            for pool in self._pools():
                pool.clear()

    def prepare_spares(self, launches: list[TaskLaunch]) -> None:
        """Standbys for the next attempt of these tasks (in the background; see transport/standby.py)."""
        self._local.standbys.prepare([launch for launch in launches if launch.is_local or self._ssh is None])
        if self._ssh is not None:
            self._ssh.standbys.prepare([launch for launch in launches if not launch.is_local])

    def spares(self) -> tuple[int, int]:
        """(spares ready, standbys waiting)."""
        counts = [pool.counts() for pool in self._pools()]
        return sum(ready for ready, _ in counts), sum(total for _, total in counts)

    def _pools(self) -> list[StandbyPool]:
        return [self._local.standbys] + ([self._ssh.standbys] if self._ssh is not None else [])

    def open_helper(self, host_index: int, python: str) -> HelperChannel:
        if self._hosts[host_index].is_local or self._ssh is None:
            return self._local.open_helper(host_index, python)
        return self._ssh.open_helper(host_index, python)

    def close(self) -> None:
        self._local.close()
        if self._ssh is not None:
            self._ssh.close()
