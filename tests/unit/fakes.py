"""A fake transport for driving the supervisor one step at a time (no processes, no sleeps)."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field

from launcher.common.errors import HostError
from launcher.plan import LaunchPlan, PlanInputs, TaskLaunch, build_plan
from launcher.spec.load import parse_spec
from launcher.spec.models import ClusterSpec
from launcher.transport.base import (
    Agent,
    EventSink,
    ExitStatus,
    OutputLine,
    Started,
    StartRequest,
    TaskExited,
    WorkerReport,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class FakeTask:
    launch: TaskLaunch
    sink: EventSink
    pid: int
    started_at: float = 0.0
    signals: list[int] = field(default_factory=list)
    exited: bool = False
    ignore_term: bool = False
    closed: bool = False
    last_words: list[str] = field(default_factory=list)  # printed when signalled (a peer's loss breaks it)

    def signal(self, signum: int) -> None:
        self.signals.append(signum)
        if self.exited:
            return
        for line in self.last_words:
            self.print(line)
        if signum == signal.SIGKILL or (signum == signal.SIGTERM and not self.ignore_term):
            self.exit(None, signum)

    def gone(self) -> bool:
        return self.exited

    def close(self) -> None:
        self.closed = True

    # test controls
    def exit(self, code: int | None, sig: int | None = None, at: float = 0.0) -> None:
        self.exited = True
        self.sink(TaskExited(self.launch.name, ExitStatus(code, sig, time=at or 0.0)))

    def say(self, event: str, **data: object) -> None:
        self.sink(WorkerReport(self.launch.name, {"event": event, **data}))

    def print(self, line: str) -> None:
        self.sink(OutputLine(self.launch.name, line))


class FakeTransport:
    def __init__(self) -> None:
        self.started: list[FakeTask] = []
        self.closed = False
        self.unreachable: set[str] = set()  # hosts whose starts fail as an unreachable SSH host's do
        self.start_calls = 0
        self.spares_for: list[list[str]] = []  # task names of every prepare_spares call
        self.stacks_asked: list[list[str]] = []  # task names of every stacks call
        self.stack_answers: dict[str, dict[str, object]] = {}  # task -> its agent's answer (agent/stacks.py)

    def start(self, launch: TaskLaunch, sink: EventSink) -> FakeTask:
        self.start_calls += 1
        if launch.host in self.unreachable:
            raise HostError(launch.host, "no answer within 10s (ssh.connect_timeout_s)")
        task = FakeTask(launch, sink, pid=10_000 + len(self.started))
        self.started.append(task)
        return task

    def start_all(self, requests: list[StartRequest]) -> list[Started]:
        """In order (tests index `started`); as the real transport, one failed connection per host
        stands for all its tasks."""
        outcomes: list[Started] = []
        failed: dict[str, HostError] = {}
        for launch, sink in requests:
            if launch.host in failed:
                outcomes.append(failed[launch.host])
                continue
            try:
                outcomes.append(self.start(launch, sink))
            except HostError as error:
                failed[launch.host] = error
                outcomes.append(error)
        return outcomes

    def prepare_spares(self, launches: list[TaskLaunch]) -> None:
        self.spares_for.append([launch.name for launch in launches])

    def spares(self) -> tuple[int, int]:
        return 0, len(self.spares_for[-1]) if self.spares_for else 0

    def stacks(self, launches: list[TaskLaunch]) -> dict[str, dict[str, object]]:
        """What a test put in `self.stack_answers` (the agents' answers, by task), for the tasks asked."""
        self.stacks_asked.append([launch.name for launch in launches])
        answers = self.stack_answers
        return {launch.name: answers[launch.name] for launch in launches if launch.name in answers}

    def connect(self, host_indices: list[int]) -> None:
        """Nothing to start: the fake has no agents."""

    def agent(self, host_index: int) -> Agent:
        raise NotImplementedError("the supervisor never asks for an agent; preflight is tested on real hosts")

    def close(self) -> None:
        self.closed = True

    def current(self, count: int) -> list[FakeTask]:
        return self.started[-count:]


def fake_spec(workers: int = 2, **restart: object) -> ClusterSpec:
    return parse_spec(
        {
            "name": "fake",
            "hosts": [{"address": "localhost", "workers": workers, "ports": list(range(7000, 7000 + workers))}],
            "restart": {"grace_period_s": 5, "backoff_s": 0, **restart},
        }
    )


def fake_planner(spec: ClusterSpec, run_dir: str):  # type: ignore[no-untyped-def]
    def plan(attempt: int) -> LaunchPlan:
        return build_plan(spec, PlanInputs(run_dir, attempt, "/py", "/work"))

    return plan
