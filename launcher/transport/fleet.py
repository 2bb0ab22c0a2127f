"""Every host's agent behind the one Transport interface the supervisor and the preflight use.

A medium (local pipes, SSH, a Slurm step) only opens channels to agents; everything else is done
once, here and in session.py, whatever the medium: one session per host, the host's part of each
attempt's plan, warm spares, and one liveness watcher. The watcher pings every agent a few times
per liveness timeout and gives a host up when nothing came from it for that long (a partition or
a frozen host closes nothing); the agent, which hears the pings, stops the tasks on its side.
"""

from __future__ import annotations

import functools
import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from launcher.agent.bootstrap import agent_line, cached_agent_lines
from launcher.agent.protocol import ClusterCommand
from launcher.common.errors import HostError
from launcher.plan import TaskLaunch
from launcher.transport import payload
from launcher.transport.base import EventSink, Started, StartRequest
from launcher.transport.channel import Channel
from launcher.transport.local import LOCAL_BEAT_S
from launcher.transport.session import AgentSession

log = logging.getLogger(__name__)

BEATS_PER_TIMEOUT = 4
_HELD_S = 2.0  # the watcher woke this much later than it asked: the launcher was not running
_PARALLEL = 32  # hosts handled side by side (a constant, whatever the fleet's size)
STACKS_TIMEOUT_S = 60.0  # an agent bounds its own stack taking well under this (launcher/agent/stacks.py)
T = TypeVar("T")


@dataclass(frozen=True)
class AgentHost:
    """What the transport needs to know of one host."""

    address: str
    python: str
    liveness_s: float
    remote: bool  # a remote agent also ends itself on silence (a local one only on end of input)
    setting: str = "restart.liveness_timeout_s"  # where the liveness timeout came from, for messages


class Medium(Protocol):
    """Opens channels to agents: a local pipe, an SSH session, a node's share of a Slurm step."""

    def open(self, indices: list[int], first_line: bytes) -> dict[int, Channel | HostError]:
        """A channel per host index, each agent already sent `first_line` (the bootstrap's input)."""
        ...

    def lost(self, index: int) -> None:
        """The host went silent: the next open must not reuse what reached it."""
        ...

    def close(self) -> None: ...


def _by_name(launches: list[TaskLaunch], standbys: dict[str, int]) -> dict[str, int]:
    """The standbys of a host by the task each will run: the one made for it, else one made for another task
    of the host (the start command gives a standby its task's environment). A spare host's were made for the
    tasks of the first seat of its shape, and a shrunk gang renumbers its tasks. Never for a side-car, whose
    standby imports other modules."""
    mine = {launch.name: standbys[launch.name] for launch in launches if launch.name in standbys}
    left = [ident for name, ident in standbys.items() if name not in mine and not name.startswith("evaluator")]
    for launch in launches:
        if launch.name not in mine and not launch.sidecar and left:
            mine[launch.name] = left.pop(0)
    return mine


def side_by_side(items: list[T], work: Callable[[T], object]) -> None:
    """`work` on every item, a bounded number at a time (all at once for a fleet costs one start-up)."""
    if len(items) <= 1:
        for item in items:
            work(item)
        return
    with ThreadPoolExecutor(max_workers=min(_PARALLEL, len(items)), thread_name_prefix="hosts") as pool:
        list(pool.map(work, items))


class AgentTransport:
    """One agent session per host, opened on first use (all at once by `connect`) and reopened
    after its host was lost. Lifecycle: `connect` -> `agent`/`start_all`/`prepare_spares` ->
    `close`; the watcher thread runs from the first session to `close`."""

    def __init__(self, hosts: list[AgentHost], medium: Medium, addressed: bool = False) -> None:
        self._hosts = hosts
        self._medium = medium
        self._addressed = addressed
        self._lock = threading.Lock()
        self._sessions: dict[int, AgentSession] = {}
        self._failed: dict[int, HostError] = {}  # the last open's failure, given to whoever asks next
        self._opening: dict[int, threading.Lock] = {}
        self._clusters: dict[int, int] = {}  # host index -> id() of the cluster its agent has
        self._packed: tuple[Any, ClusterCommand] | None = None  # (the plan's cluster, its command)
        self._standby_ids: dict[int, dict[str, int]] = {}  # host index -> task name -> standby id
        self._ids = itertools.count(1)
        self._closed = threading.Event()
        self._watcher: threading.Thread | None = None

    # ---- sessions ----------------------------------------------------------------------------

    def connect(self, indices: list[int]) -> None:
        """Start the agents of these hosts, side by side; failures wait for `agent()` to raise them."""
        wanted = [i for i in indices if self._live(i) is None]
        if wanted:
            self._open(wanted)

    def agent(self, index: int) -> AgentSession:
        """The host's agent, started if needed. HostError: it cannot be reached or started."""
        with self._lock:
            gate = self._opening.setdefault(index, threading.Lock())
        with gate:
            session = self._live(index)
            if session is None:
                with self._lock:
                    failed = self._failed.pop(index, None)
                if failed is not None:  # `connect` just tried: one try per host and attempt
                    raise failed
                self._open([index])
                session = self._live(index)
            if session is None:
                with self._lock:
                    raise self._failed.pop(index, HostError(self._hosts[index].address, "the agent did not start"))
            return session

    def _live(self, index: int) -> AgentSession | None:
        with self._lock:
            session = self._sessions.get(index)
        return session if session is not None and not session.ended.is_set() else None

    def _open(self, indices: list[int]) -> None:
        by_settings: dict[tuple[float, bool], list[int]] = {}
        for i in indices:
            host = self._hosts[i]
            by_settings.setdefault((host.liveness_s if host.remote else LOCAL_BEAT_S, host.remote), []).append(i)
        for (liveness_s, remote), group in by_settings.items():
            code: bytes | None = None  # a remote host keeps the agent's code by its hash: sent when it says it needs it
            if remote and not self._addressed:  # (a Slurm step's input reaches every node: the whole line, as before)
                first, code = cached_agent_lines(liveness_s)
            else:
                first = agent_line(liveness_s, remote, self._addressed, remote)
            opened = list(self._medium.open(group, first).items())
            side_by_side(opened, functools.partial(self._ready, code=code))
        self._ensure_watcher()

    def _ready(self, opened: tuple[int, Channel | HostError], code: bytes | None = None) -> None:
        """Wait for a just-opened agent's `ready`; keep its session, or the reason it has none."""
        index, channel = opened
        if isinstance(channel, HostError):
            with self._lock:
                self._failed[index] = channel
            return
        host = self._hosts[index]
        session = AgentSession(host.address, host.python, channel, host.liveness_s, local=not host.remote, code=code)
        try:
            session.wait_ready()
        except HostError as error:
            session.close()
            with self._lock:
                self._failed[index] = error
            return
        with self._lock:
            self._sessions[index] = session
            self._clusters.pop(index, None)

    # ---- attempts ----------------------------------------------------------------------------

    def start_all(self, requests: list[StartRequest]) -> list[Started]:
        by_host: dict[int, list[int]] = {}
        for position, (launch, _) in enumerate(requests):
            by_host.setdefault(launch.host_index, []).append(position)
        outcomes: list[Started | None] = [None] * len(requests)
        self.connect(list(by_host))

        def on_host(index: int) -> None:
            positions = by_host[index]
            with self._lock:
                standbys = self._standby_ids.pop(index, {})
            try:
                session = self.agent(index)
            except HostError as error:
                for position in positions:
                    outcomes[position] = error
                return
            launches = [requests[p][0] for p in positions]
            standbys = _by_name(launches, standbys)
            if self._clusters.get(index) != id(launches[0].cluster):
                session.send(self._cluster_command(launches[0]), shared=True)
                self._clusters[index] = id(launches[0].cluster)
            ids = [standbys.get(launch.name) or next(self._ids) for launch in launches]
            for position, ident in zip(positions, ids, strict=True):
                launch, sink = requests[position]
                outcomes[position] = session.track(ident, launch, sink)
            common, start = payload.split_start(payload.start_command(launches, ids, standbys))
            session.send(common, shared=True)
            session.send(start)
            unused = [i for i in session.forget_standbys() if i not in ids]
            if unused:
                session.send({"op": "drop", "ids": unused})

        side_by_side(list(by_host), on_host)
        for index in set(self._standby_ids) - set(by_host):  # hosts without a task this attempt
            self._drop_standbys(index)
        return [outcome for outcome in outcomes if outcome is not None]

    def _cluster_command(self, launch: TaskLaunch) -> ClusterCommand:
        """The attempt's packed cluster, packed once for every host (the plan shares one object)."""
        with self._lock:
            if self._packed is None or self._packed[0] is not launch.cluster:
                self._packed = (launch.cluster, payload.cluster_command(launch))
            return self._packed[1]

    def _drop_standbys(self, index: int) -> None:
        with self._lock:
            self._standby_ids.pop(index, None)
            session = self._sessions.get(index)
        if session is not None:
            unused = session.forget_standbys()
            if unused:
                session.send({"op": "drop", "ids": unused})

    def prepare_spares(self, launches: list[TaskLaunch]) -> None:
        """A standby per task (those with something to preload) for the next attempt, on the
        agents that run them now."""
        groups: dict[tuple[int, str, tuple[str, ...], str], list[TaskLaunch]] = {}
        for launch in launches:
            if launch.preload:
                key = (launch.host_index, launch.python, launch.preload, launch.cwd)
                groups.setdefault(key, []).append(launch)
        for (index, _, _, _), group in groups.items():
            session = self._live(index)
            if session is None:
                continue
            ids = [next(self._ids) for _ in group]
            session.expect_standbys(ids)
            with self._lock:
                self._standby_ids.setdefault(index, {}).update(
                    {launch.name: i for launch, i in zip(group, ids, strict=True)}
                )
            session.send(payload.standby_command(group, ids))

    def stacks(self, launches: list[TaskLaunch]) -> dict[str, dict[str, Any]]:
        """Every thread's stack of these tasks, by name, from their hosts' agents side by side (each host's
        bounded by its agent: launcher/agent/stacks.py); a task whose host cannot answer says why."""
        by_host: dict[int, set[str]] = {}
        for launch in launches:
            by_host.setdefault(launch.host_index, set()).add(launch.name)
        found: dict[str, dict[str, Any]] = {}

        def on_host(index: int) -> None:
            session = self._live(index)
            if session is None:
                found.update({name: {"via": None, "why": "its host is lost"} for name in by_host[index]})
                return
            names = session.running(by_host[index])
            found.update({name: {"via": None, "why": "it had ended"} for name in by_host[index] - set(names.values())})
            if not names:
                return
            try:
                answer = session.probe({"op": "stacks", "ids": list(names)}, timeout=STACKS_TIMEOUT_S)
            except RuntimeError as error:
                found.update({name: {"via": None, "why": f"{session.host}: {error}"} for name in names.values()})
                return
            taken = answer.get("stacks")
            taken = taken if isinstance(taken, dict) else {}
            for ident, name in names.items():
                got = taken.get(str(ident))
                found[name] = got if isinstance(got, dict) else {"via": None, "why": "its agent sent none"}

        side_by_side(list(by_host), on_host)
        return found

    def spares(self) -> tuple[int, int]:
        with self._lock:
            sessions = list(self._sessions.values())
        counts = [session.spares() for session in sessions]
        return sum(ready for ready, _ in counts), sum(total for _, total in counts)

    # ---- liveness ----------------------------------------------------------------------------

    def _ensure_watcher(self) -> None:
        with self._lock:
            if self._watcher is None and not self._closed.is_set():
                self._watcher = threading.Thread(target=self._watch, daemon=True, name="liveness")
                self._watcher.start()

    def _watch(self) -> None:
        tick = min(1.0, min(h.liveness_s for h in self._hosts) / BEATS_PER_TIMEOUT)
        last = time.monotonic()
        while not self._closed.wait(tick):
            now = time.monotonic()
            with self._lock:
                sessions = [(i, s) for i, s in self._sessions.items() if not s.ended.is_set()]
            if now - last > tick + _HELD_S:
                # this launcher itself was held (Ctrl-Z, a VM pause): the silence was ours, not the hosts'
                for _, session in sessions:
                    session.last_heard = now
            last = now
            for index, session in sessions:
                silent = session.silent_for(now)
                if silent > session.liveness_s:
                    self._lose(index, session, silent)
                else:
                    session.send({"op": "ping"})

    def _lose(self, index: int, session: AgentSession, silent: float) -> None:
        host = self._hosts[index]
        session.lose(
            f"nothing from {host.address} for {silent:.0f}s ({host.setting}={host.liveness_s:g}): the host or the "
            "network to it is down; its agent stops the tasks there by itself"
        )
        self._medium.lost(index)

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            sessions = list(self._sessions.values())
            self._sessions.clear()
        for session in sessions:
            session.close()  # each agent reads the end of its input and stops whatever still runs
        self._medium.close()


__all__ = ["AgentHost", "AgentTransport", "EventSink", "Medium", "side_by_side"]
