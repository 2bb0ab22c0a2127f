"""The one small interface the supervisor and the preflight see, whatever reaches the hosts.

A transport starts an attempt's TaskLaunches and returns a TaskProcess for each; from then on
everything a task does arrives as events on one sink (output lines, worker reports, its exit),
so the supervisor waits on a single queue and never polls slowly. The supervisor never asks
which transport it holds (fleet.py has the one implementation; tests drive fakes).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, Union

from launcher.agent.protocol import Answer, ProbeRequest
from launcher.common.errors import HostError
from launcher.plan import TaskLaunch

_START_THREADS = 32


@dataclass(frozen=True)
class ExitStatus:
    """How a task ended: an exit code, or the signal that killed it."""

    code: int | None
    signal: int | None
    time: float = field(default_factory=time.time)
    lost: str | None = None  # set when the connection to the task's host was lost: why
    oom_kills: int | None = None  # killed by SIGKILL: how many the host's OOM killer made meanwhile (0: not it)
    injected: str | None = None  # the `launch --inject` fault this end is (`kill at step 10`)

    @property
    def ok(self) -> bool:
        return self.code == 0 and self.lost is None

    def describe(self) -> str:
        if self.lost is not None:
            return f"lost: {self.lost}"
        if self.signal is not None:
            import signal as _signal

            try:
                text = f"killed by {_signal.Signals(self.signal).name}"
            except ValueError:
                return f"killed by signal {self.signal}"
            if self.injected is not None:
                return f"{text} (the injected fault: {self.injected})"
            if self.oom_kills == 0:
                return f"{text} (not out of memory: the kernel's OOM killer ended nothing on that host while it ran)"
            if self.oom_kills:
                return (
                    f"{text} (most likely out of memory: the kernel's OOM killer ended {self.oom_kills} process(es) "
                    "on that host while it ran)"
                )
            return text
        return f"exit code {self.code}" + (f" (the injected fault: {self.injected})" if self.injected else "")


def exit_from_report(report: dict[str, Any] | None) -> ExitStatus | None:
    """The helper's `exit` report as a ExitStatus; None when the helper never sent one."""
    return None if report is None else exit_status_of(report)


_LATE_MOST_S = 60.0  # an agent drains a task's pipes for a second after it ended; anything longer is garbled


def exit_status_of(report: dict[str, Any]) -> ExitStatus:
    """An agent's or helper's `exit` report as an ExitStatus (what is not of the expected type: unknown).
    Its time is when the task ended: the report's receipt, less how long before it the agent saw the
    end (`ended_s`, a duration: no host's clock enters), so the first task to end is the root cause
    even when a child that outlived it held its pipes open and its report came later."""
    code, sig, oom, ago = report.get("code"), report.get("signal"), report.get("oom_kills"), report.get("ended_s")
    late = float(ago) if isinstance(ago, (int, float)) and not isinstance(ago, bool) and 0 <= ago <= _LATE_MOST_S else 0
    return ExitStatus(
        code if isinstance(code, int) else None,
        sig if isinstance(sig, int) else None,
        time=time.time() - late,
        oom_kills=oom if isinstance(oom, int) and not isinstance(oom, bool) and oom >= 0 else None,
    )


@dataclass(frozen=True)
class OutputLine:
    task: str
    line: str


@dataclass(frozen=True)
class WorkerReport:
    """A structured report a worker wrote on its event channel (joined, step, done)."""

    task: str
    data: dict[str, Any]


@dataclass(frozen=True)
class TaskExited:
    task: str
    exit: ExitStatus


Event = Union[OutputLine, WorkerReport, TaskExited]
EventSink = Callable[[Event], None]


def parse_report(task: str, raw: str) -> WorkerReport | None:
    """One JSON line from the event channel; None for anything malformed."""
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("event"), str):
        return None
    return WorkerReport(task, data)


class TaskProcess(Protocol):
    """A started task. `signal` reaches its whole process group."""

    launch: TaskLaunch
    pid: int
    started_at: float

    def signal(self, signum: int) -> None: ...

    def gone(self) -> bool:
        """True once no process of the task's group is left running."""
        ...

    def close(self) -> None:
        """Release the task's channel; a helper whose task still runs then kills its group."""
        ...


class UnreachedTask:
    """A task whose host could not be reached: nothing runs, so it is gone from the start."""

    def __init__(self, launch: TaskLaunch) -> None:
        self.launch = launch
        self.pid = 0
        self.started_at = time.time()

    def signal(self, signum: int) -> None:
        """Nothing to signal."""

    def gone(self) -> bool:
        return True

    def close(self) -> None:
        """Nothing to release."""


class Agent(Protocol):
    """What the preflight asks of a host's agent."""

    info: dict[str, Any]  # its `ready` report: pid, hostname, python, executable

    def probe(self, request: ProbeRequest, timeout: float = 30.0) -> Answer: ...

    def ask(self, request: ProbeRequest) -> Callable[[float], Answer]:
        """Send the probe now; the answer is waited for by calling what it returns (with a timeout)."""
        ...


StartRequest = tuple[TaskLaunch, EventSink]
Started = Union[TaskProcess, HostError]  # a HostError: the task's host could not be reached


class Transport(Protocol):
    def start_all(self, requests: list[StartRequest]) -> list[Started]:
        """Start one attempt's tasks; one outcome per request, in order. Never raises HostError."""
        ...

    def prepare_spares(self, launches: list[TaskLaunch]) -> None:
        """Warm spares for the next attempt of these tasks, where the transport has them; else nothing."""
        ...

    def spares(self) -> tuple[int, int]:
        """(spares ready, standbys waiting)."""
        ...

    def stacks(self, launches: list[TaskLaunch]) -> dict[str, dict[str, Any]]:
        """Every thread's stack of these running tasks, by name, as their agents took them
        (launcher/agent/stacks.py); without stopping anything."""
        ...

    def connect(self, host_indices: list[int]) -> None:
        """Start these hosts' agents side by side (failures are raised by `agent`)."""
        ...

    def agent(self, host_index: int) -> Agent:
        """The host's agent, started if needed; HostError when it cannot be reached or started."""
        ...

    def close(self) -> None: ...
