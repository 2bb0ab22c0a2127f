"""A gang whose tasks all run on this machine is not a server on the network.

TensorFlow's gRPC server listens on every interface whatever TF_CONFIG names, serves anyone who
connects, and runs the graphs it is sent. For a gang all on this machine (`--local`, `-H
localhost:N`, a spec of local hosts) the launcher keeps other machines off the tasks' ports, the
first way that works here:

1. A private network (`local_network: "private"`, the default; every task's address a loopback
   one): the tasks run in a network namespace of their own holding only a loopback device
   (launcher/transport/netns_holder.py makes it; as a user other than root, inside a user namespace,
   where the kernel allows one). slirp4netns gives it a way out through this machine's network, so a
   script still downloads its data; nothing comes in. A service on this machine's own loopback is at
   10.0.2.2 from a task.
2. As root: an nftables rule that refuses connections to the tasks' ports from anywhere but this
   machine (launcher/transport/port_firewall.py).
3. Neither: the ports stay open, and the console says so once, with how to close them.

`local_network: "host"` keeps the tasks on this machine's network, as a gang with remote hosts is.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from launcher.agent.protocol import NetworkCommand
from launcher.plan import TaskLaunch
from launcher.spec.addresses import is_loopback
from launcher.transport.port_firewall import FirewallUnavailable, PortFirewall, remove_stale_rules
from launcher.transport.private_network import NetworkUnavailable, make_private, take_early
from worker.contract import RUN_DIR_VAR


@dataclass
class LocalNetwork:
    """How a local gang's ports are kept from other machines: what `--check` says (`says`), what each
    local agent is told (`order`), the ports left open (`exposed`) and the warning for them."""

    says: str
    order: NetworkCommand | None = None
    exposed: tuple[int, ...] = ()
    warning: str | None = None
    _closers: list[Callable[[], None]] = field(default_factory=list)  # each leaves, or removes, at once
    _firewall: PortFirewall | None = None

    def cover(self, ports: Sequence[int]) -> None:
        """A later attempt's ports (a port taken meanwhile was replaced): the rule refuses them too.
        The private network needs nothing: it holds every port of its tasks."""
        if self._firewall is not None:
            self._firewall.cover(list(ports))

    def close(self) -> None:
        while self._closers:
            self._closers.pop()()


class NetworkStarting:
    """`open_local_network` on a thread of its own, so that making the namespaces overlaps the
    agents' own start; `result()` waits for it (and raises what it raised)."""

    def __init__(self, choice: str, tasks: Sequence[TaskLaunch], run_dir: str) -> None:
        self._made: list[LocalNetwork | None] = []
        self._error: list[BaseException] = []
        self._thread = threading.Thread(target=self._make, args=(choice, tasks, run_dir), daemon=True, name="network")
        self._thread.start()

    def _make(self, choice: str, tasks: Sequence[TaskLaunch], run_dir: str) -> None:
        try:
            self._made.append(open_local_network(choice, tasks, run_dir))
        except BaseException as error:  # noqa: BLE001 - raised by result(), on the caller's thread
            self._error.append(error)

    def result(self) -> LocalNetwork | None:
        self._thread.join()
        if self._error:
            raise self._error[0]
        return self._made[0]

    def order(self) -> NetworkCommand | None:
        """What each local agent is told before anything else (None: nothing)."""
        made = self.result()
        return None if made is None else made.order

    def close(self) -> None:
        self._thread.join()
        if self._made and self._made[0] is not None:
            self._made[0].close()


def open_local_network(choice: str, tasks: Sequence[TaskLaunch], run_dir: str) -> LocalNetwork | None:
    """The best isolation for `tasks` here; None when some task runs on another host (its peers
    there must reach the ports, so they stay on the machine's network). The processes that hold a
    private network carry `run_dir` (or, made early, the launcher's working directory) in their
    environment, as the tasks do: `ps e` tells whose they are."""
    remove_stale_rules()  # a launcher killed outright left its rule: it must not refuse these ports (no mark: no cost)
    if not tasks or not all(task.is_local for task in tasks):
        return None
    ports = tuple(sorted({task.port for task in tasks}))
    if choice == "host":
        return LocalNetwork(f"the tasks' {_them(ports)} open to other machines (local_network is host)", None, ports)
    failures: list[NetworkUnavailable | FirewallUnavailable] = []
    if all(is_loopback(task.host) for task in tasks):
        try:
            private = take_early() or make_private({**os.environ, RUN_DIR_VAR: run_dir, "PWD": os.getcwd()})
            return LocalNetwork(private.says, private.order, _closers=[private.close])
        except NetworkUnavailable as why:
            failures.append(why)
    else:
        failures.append(NetworkUnavailable("a task's address is not a loopback one, which a private network lacks"))
    reasons = [str(failure) for failure in failures]
    try:
        firewall = PortFirewall(list(ports))
    except FirewallUnavailable as why:
        failures.append(why)
        reasons.append(str(why))
    else:
        return LocalNetwork(
            f"the tasks' {_them(ports)} closed to other machines by the nftables table {firewall.table}, not "
            f"by a private network ({'; '.join(reasons)})",
            _closers=[firewall.close],  # removed at once: no wait
            _firewall=firewall,
        )
    return LocalNetwork(
        f"the tasks' {_them(ports)} OPEN to other machines: {'; '.join(reasons)}",
        None,
        ports,
        _warning(ports, failures),
    )


def _listed(ports: tuple[int, ...]) -> str:
    return ", ".join(map(str, ports))


def _them(ports: tuple[int, ...]) -> str:
    return f"port {ports[0]} is" if len(ports) == 1 else f"ports {_listed(ports)} are"


def _warning(ports: tuple[int, ...], failures: list[NetworkUnavailable | FirewallUnavailable]) -> str:
    fixes = [failure.fix for failure in failures if failure.fix]
    fixes.append("refuse connections to them from other machines in your firewall")
    return (
        f"warning: the tasks' TensorFlow {_them(ports)} open to other machines, and TensorFlow runs what anyone "
        f"sends there ({'; '.join(map(str, failures))}). To close them: {', or '.join(fixes)}"
    )
