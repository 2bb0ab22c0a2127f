"""Choose free ports for `port: 0` tasks and check that local ports are free before starting.

TF's gRPC server binds every interface, so the checks bind the wildcard address too.
SO_REUSEADDR lets a port whose old connections linger in TIME_WAIT count as free (the restarted
gang can reuse it), while a port someone still listens on counts as taken.
"""

from __future__ import annotations

import errno
import socket

from launcher.common.errors import PortInUseError
from launcher.plan import LaunchPlan, Roster, task_slots
from launcher.spec.models import ClusterSpec

_PICK_TRIES = 100


def _bind(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("", port))
    except OSError:
        sock.close()
        raise
    return sock


def choose_free_ports(spec: ClusterSpec, roster: Roster | None = None) -> dict[str, int]:
    """A distinct free port for every local task that asked for port 0.

    One probe socket at a time (hundreds of tasks must not run out of file descriptors); a port
    the kernel hands out twice is simply asked for again.
    """
    chosen: dict[str, int] = {}
    taken: set[int] = set()
    for slot in task_slots(spec, roster):
        if slot.requested_port == 0 and slot.host.is_local:
            for _ in range(_PICK_TRIES):
                with _bind(0) as sock:
                    port = sock.getsockname()[1]
                if port not in taken:
                    break
            else:
                raise PortInUseError(slot.name, slot.host.address, 0)
            taken.add(port)
            chosen[slot.name] = port
    return chosen


def port_is_free(port: int) -> bool:
    try:
        _bind(port).close()
    except OSError as error:
        if error.errno in (errno.EADDRINUSE, errno.EACCES):
            return False
        raise
    return True


def check_local_ports(plan: LaunchPlan) -> None:
    """Raise PortInUseError for the first local task whose port is taken."""
    for task in plan.tasks:
        if task.is_local and not port_is_free(task.port):
            raise PortInUseError(task.name, task.host, task.port)
