"""What the supervisor keeps of each task of the current attempt, and what it makes of it when the
attempt ends: the task's result (how it ended, what it left) and where the restart's time went.

Plain bookkeeping: no processes, no transport; the supervisor owns each TrackedTask and changes it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from launcher.common.log_reading import ending_exception, read_end
from launcher.plan import TaskLaunch
from launcher.supervise.gang import TaskResult, TaskStatus
from launcher.supervise.recovery import RestartTimes, restart_phases
from launcher.transport.base import ExitStatus, TaskProcess
from tflaunch.faults import FaultInjector
from worker.contract import FAULT_VAR, PREEMPTION_EXIT_CODE_VAR


@dataclass
class TrackedTask:
    """Mutable bookkeeping for one task of the current attempt (snapshotted by `status()`)."""

    launch: TaskLaunch
    process: TaskProcess | None = None
    joined: bool = False
    step: int | None = None
    exit: ExitStatus | None = None
    started_mono: float = 0.0
    started_at: float = 0.0
    last_progress: float = 0.0
    stopped: bool = False
    signals_sent: set[int] = field(default_factory=set)  # what the launcher sent its group to stop it
    reported: bool = False
    milestone: str | None = None
    stopped_since: float | None = None
    error: tuple[str, str] | None = None
    error_file: dict[str, Any] | None = None  # what its error file held when it exited (mirrored with the exit)
    times: dict[str, float] = field(default_factory=dict)  # milestone -> wall time the launcher got it
    warm: dict[str, Any] | None = None  # the agent's `warm` report: ran in a spare, or why not
    snapshot: TaskStatus | None = None  # the last TaskStatus made of it; None once anything in it changed
    muted: int | None = None  # stopped because another task failed: lines not echoed since (logged)
    first_step: tuple[float, int] | None = None  # (monotonic time, step) of its first step report this attempt


def step_time(task: TrackedTask) -> float | None:
    """The task's mean seconds per step since its first step report of the attempt; None before a second one."""
    if task.first_step is None or task.step is None or task.step <= task.first_step[1]:
        return None
    return (task.last_progress - task.first_step[0]) / (task.step - task.first_step[1])


def error_of(data: dict[str, Any] | None) -> tuple[str, str] | None:
    """(exception type, message) from a task's error file, if it wrote one."""
    if data is None:
        return None
    return str(data.get("type", "")), str(data.get("message", ""))


def exception_in_log(path: str) -> tuple[str, str] | None:
    """(exception type, first line of its message) of the traceback that ends a task's log: how a
    script that writes no error file died, for the root cause's words and to tell a failure bound to
    repeat. Only a traceback that ends the log (TensorFlow's C++ log lines aside) counts: one the
    script printed and handled before it exited for another reason is not why it exited."""

    found = ending_exception(read_end(path))
    return None if found is None else (found.short_type, found.message.split("\n", 1)[0].strip())


def read_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):  # not written (the task died first) or cut short
        return None
    return data if isinstance(data, dict) else None


def as_injected(launch: TaskLaunch, exit: ExitStatus) -> ExitStatus:
    """`exit`, said to be the `launch --inject` fault the task was given when it ended as that fault ends it."""
    fault = FaultInjector(launch.env.get(FAULT_VAR, ""))  # "": none (never this process's own environment)
    preempted = launch.env.get(PREEMPTION_EXIT_CODE_VAR, "")
    ends = fault.ends(exit.code, exit.signal, int(preempted) if preempted.lstrip("-").isdigit() else None)
    if fault.kind is None or exit.lost is not None or not ends:
        return exit
    return replace(exit, injected=f"{fault.kind} at step {fault.step}")


def names_of(tasks: list[TrackedTask]) -> str:
    """The first three tasks' names, and how many more."""
    more = f" and {len(tasks) - 3} more" if len(tasks) > 3 else ""
    return ", ".join(t.launch.name for t in tasks[:3]) + more


def task_result(task: TrackedTask, preempted: bool) -> TaskResult:
    """How one task of the attempt ended and what it left, for the attempt's record."""
    launch, exit = task.launch, task.exit
    return TaskResult(
        name=launch.name,
        host=launch.host,
        pid=task.process.pid if task.process else None,
        exit_code=exit.code if exit else None,
        signal=exit.signal if exit else None,
        started_at=task.started_at,
        ended_at=exit.time if exit else None,
        joined=task.joined,
        step=task.step,
        log_path=launch.log_path,
        reported=task.reported,
        stopped=task.stopped,
        killed_by_launcher=exit is not None and exit.signal in task.signals_sent,
        sidecar=launch.sidecar,
        lost=exit.lost if exit else None,
        preempted=preempted,
        error=task.error_file,
        result=read_json(launch.result_path),
        oom_kills=exit.oom_kills if exit else None,
        injected=exit.injected if exit else None,
    )


def recovery_of(times: RestartTimes, tasks: list[TrackedTask], why_no_spare: str | None) -> dict[str, Any]:
    """How a restart spent its time, phase by phase, and which of its tasks ran in a warm spare (or why not)."""
    trainers = [t for t in tasks if not t.launch.sidecar]
    recovery = restart_phases(times, [t.times for t in trainers])
    recovery["warm_tasks"] = sum(1 for t in trainers if t.warm and t.warm.get("used"))
    recovery["forked_tasks"] = sum(1 for t in trainers if t.warm and t.warm.get("used") and t.warm.get("forked"))
    recovery["tasks"] = len(trainers)
    cold = {t.launch.name: t.warm.get("why") for t in trainers if t.warm and not t.warm.get("used")}
    for task in trainers:
        if task.warm is None:
            cold[task.launch.name] = why_no_spare
    if cold:
        recovery["cold_because"] = cold
    return recovery
