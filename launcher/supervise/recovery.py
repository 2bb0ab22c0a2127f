"""Where a restart's time goes: the phases from a failure to the new attempt's first step.

Pure: wall-clock times in, seconds per phase out. Each gang-level milestone is the moment the
last training task reached it (the gang moves at its slowest task), as the launcher received
it, so clocks on other hosts never enter. A phase whose end is unknown (a user script reports
no milestones, a function restores nothing the runtime sees) is None, and the next known phase
counts from the last known point: the known phases always add up to the total.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from launcher.spec.restart import RestartSpec
from worker.contract import IMPORTED, JOINED, RESTORED, STARTING

FIRST_STEP = "first_step"
MILESTONES = (STARTING, IMPORTED, JOINED, RESTORED, FIRST_STEP)
# (phase, the milestone that ends it): spawn ends when the runtime is up in the new process (or
# the spare), import when TensorFlow is imported, join when the strategy is built.
PHASES = (
    ("detect", "decided"),
    ("stop", "stopped"),
    ("backoff", "started"),
    ("spawn", STARTING),
    ("import", IMPORTED),
    ("join", JOINED),
    ("restore", RESTORED),
    ("first_step", FIRST_STEP),
)


@dataclass(frozen=True)
class RestartTimes:
    """When the supervisor saw the failure, decided, had stopped the gang and started the next attempt."""

    kind: str
    failed_at: float | None  # the first failed task's exit as received; None for a hang (no exit)
    decided_at: float
    stopped_at: float
    started_at: float


def gang_milestones(per_task: list[dict[str, float]]) -> dict[str, float]:
    """Each milestone that every task reached, at the time the last one did."""
    return {
        name: max(times[name] for times in per_task)
        for name in MILESTONES
        if per_task and all(name in times for times in per_task)
    }


def restart_phases(times: RestartTimes, per_task: list[dict[str, float]]) -> dict[str, Any]:
    """Seconds per phase, the total from the failure (or the decision) to the first step, and the milestones."""
    points: dict[str, float] = {
        "decided": times.decided_at,
        "stopped": times.stopped_at,
        "started": times.started_at,
        **gang_milestones(per_task),
    }
    origin = times.failed_at if times.failed_at is not None else times.decided_at
    last = origin
    phases: dict[str, float | None] = {}
    for phase, end in PHASES:
        at = points.get(end)
        if phase == "detect" and times.failed_at is None:
            at = None  # a hang has no moment of failure to count from
        phases[phase] = None if at is None else round(max(at - last, 0.0), 3)
        last = at if at is not None else last
    first = points.get(FIRST_STEP)
    return {
        "after": times.kind,
        "phases_s": phases,
        "total_s": None if first is None else round(first - origin, 3),
    }


def why_cold(spec: RestartSpec, spares_asked: bool, trained: bool) -> str:
    """Why the next attempt's tasks start without a warm spare, when the agents say no more; `trained`: every
    task of the attempt reported a step."""
    if not spec.warm_spares:
        return "restart.warm_spares is off"
    if spares_asked:
        return "no spare was ready for it"
    rule = f"spares are made restart.warm_spares_after_s ({spec.warm_spares_after_s:g}s) after"
    if not trained:
        return f"no spare was made: {rule} every task reported a step, and not every task had"
    return f"no spare was made: {rule} every task reported a step; the attempt ended sooner"
