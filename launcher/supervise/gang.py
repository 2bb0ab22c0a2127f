"""What the supervisor knows about the gang: lifecycle states, status snapshots, outcomes.

Plain data only. Snapshots are frozen so a policy can be tested against hand-made ones; results
are values (task, host, pid, exit, error file, times), never exceptions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from launcher.transport.base import ExitStatus
from worker.contract import START_MILESTONES


class LaunchState(str, Enum):
    """Lifecycle of one launch. Terminal states end the run."""

    STARTING = "starting"  # tasks started, not all joined yet
    RUNNING = "running"  # every task joined (or does not report joining)
    RESTARTING = "restarting"  # stopping the gang to start the next attempt
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"  # the user (or a signal) stopped the launcher
    PREEMPTED = "preempted"  # every task saved after a preemption; the scheduler requeues the run

    @property
    def is_terminal(self) -> bool:
        return self in (LaunchState.SUCCEEDED, LaunchState.FAILED, LaunchState.INTERRUPTED, LaunchState.PREEMPTED)


@dataclass(frozen=True)
class TaskStatus:
    """One task at one instant. Times named *_at are wall clock; `last_progress` is monotonic."""

    name: str
    host: str
    pid: int | None
    joined: bool
    step: int | None
    exit: ExitStatus | None
    started_mono: float
    last_progress: float
    reported: bool = False  # sent any report (the runtime came up), joined or not
    milestone: str | None = None  # the last start-up milestone it reported: starting, imported, joined
    stopped_since: float | None = None  # monotonic time its process was seen stopped (SIGSTOP, Ctrl-Z)
    error: tuple[str, str] | None = None  # (exception type, message) from its error file, once it exited

    @property
    def start_rank(self) -> int:
        """How far start-up got: 0 nothing reported .. 3 joined; the lowest is the one behind."""
        if self.joined:
            return len(START_MILESTONES)
        if self.milestone in START_MILESTONES:
            return START_MILESTONES.index(self.milestone) + 1
        return 1 if self.reported else 0

    @property
    def running(self) -> bool:
        return self.exit is None

    @property
    def failed(self) -> bool:
        return self.exit is not None and not self.exit.ok


@dataclass(frozen=True)
class GangStatus:
    """The whole gang at one instant (`now` is monotonic)."""

    attempt: int
    restarts: int
    preemptions: int
    now: float
    reports_progress: bool
    tasks: tuple[TaskStatus, ...]
    earlier_causes: tuple[str | None, ...] = ()  # root-cause signature of every earlier restarted attempt
    spares: tuple[int, int] = (0, 0)  # warm spares for the next attempt: (ready, standing by)
    stopping: bool = False  # the launcher is stopping the gang's tasks (to restart, or to end)
    idle_attempts: int = 0  # attempts in a row, just before this one, in which not every task reported a step
    restart_at: float | None = None  # backing off: when (wall clock) every task is started again
    excluded: tuple[dict[str, Any], ...] = ()  # hosts taken out of the gang (membership.Exclusion.to_json)
    step_time_s: float | None = None  # the slowest task's mean seconds per step this attempt (None: not known yet)
    last_hang: dict[str, Any] | None = None  # this launch's latest hang: {"attempt", "named", "stack_files", ...}

    @property
    def all_succeeded(self) -> bool:
        return all(t.exit is not None and t.exit.ok for t in self.tasks)

    @property
    def failures(self) -> list[TaskStatus]:
        """Failed tasks, earliest exit first; a `launch --inject` fault's task before them (the fault rehearsed
        is the root cause: a preempted peer that left first with the same exit code is not)."""
        return sorted(
            (t for t in self.tasks if t.failed),
            key=lambda t: (t.exit is None or t.exit.injected is None, t.exit.time if t.exit else 0.0),
        )

    @property
    def unjoined(self) -> list[TaskStatus]:
        return [t for t in self.tasks if not t.joined]


@dataclass(frozen=True)
class TaskResult:
    """How one task of one attempt ended."""

    name: str
    host: str
    pid: int | None
    exit_code: int | None
    signal: int | None
    started_at: float
    ended_at: float | None
    joined: bool
    step: int | None
    log_path: str
    reported: bool = False
    stopped: bool = False  # still running when the launcher stopped the gang: not a failure of its own
    killed_by_launcher: bool = False  # died of a signal the launcher sent it (SIGTERM or SIGKILL)
    lost: str | None = None  # the connection to its host was lost: why
    preempted: bool = False  # left with the preemption exit code: saved, and resumes; not a failure
    sidecar: bool = False  # the evaluator: its outcome never fails the run
    error: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    oom_kills: int | None = None  # killed by SIGKILL: the host's OOM kills while it ran (0: not out of memory)
    injected: str | None = None  # its end was the `launch --inject` fault it was given (`kill at step 10`)

    @property
    def describe_exit(self) -> str:
        if self.exit_code is None and self.signal is None and self.lost is None:
            return "did not exit"
        oom_kills = None if self.killed_by_launcher else self.oom_kills
        ended = ExitStatus(self.exit_code, self.signal, lost=self.lost, oom_kills=oom_kills, injected=self.injected)
        text = ended.describe()
        # "killed by SIGKILL" alone reads as the kernel's out-of-memory killer: say whose signal it was
        return f"{text} (stopped by the launcher)" if self.killed_by_launcher and self.lost is None else text

    @property
    def failed(self) -> bool:
        if self.preempted and self.lost is None:
            return False
        return self.lost is not None or self.signal is not None or self.exit_code not in (0, None)


@dataclass(frozen=True)
class AttemptResult:
    attempt: int
    reason: str
    cause: str | None
    kind: str
    tasks: tuple[TaskResult, ...]
    started_at: float
    ended_at: float
    recovery: dict[str, Any] | None = None  # for a restarted attempt: where the restart's time went
    regrouped: bool = False  # restarted on a new roster (a host gone for good): not counted as a restart
    hang: dict[str, Any] | None = None  # a stall, a missed start, a stop ignored: the tasks' stacks (hang.Hang)


@dataclass
class RunResult:
    """The outcome of the whole launch, filled in as attempts finish."""

    run_name: str
    run_dir: str
    state: LaunchState = LaunchState.STARTING
    attempts: list[AttemptResult] = field(default_factory=list)
    final_step: int | None = None
    message: str = ""
    outputs: dict[str, str] = field(default_factory=dict)  # what the run produced, and where
    excluded: list[dict[str, Any]] = field(default_factory=list)  # hosts taken out of the gang, and why
