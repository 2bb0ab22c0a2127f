"""After a failed attempt, ask membership (membership.py) whether a host should leave the gang, and turn
the policy's decision into a restart on the new roster when it should.

The root cause's host is the failed task's, or the peer TensorFlow blames for it (a survivor whose
collective broke did nothing wrong). A host whose connection was lost is tried once: a host whose agent
cannot be reached or started again is gone for good; one that answers stays (a passing network blip).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from launcher.common.errors import HostError
from launcher.plan import TaskLaunch
from launcher.supervise.gang import GangStatus
from launcher.supervise.grow_back import GrowBack
from launcher.supervise.membership import Change, Membership
from launcher.supervise.policy import Action, Decision, FailureKind, peers_blamed
from launcher.supervise.tracked import TrackedTask
from launcher.transport.base import Transport

CANNOT_START = "cannot start: "  # how a lost exit of a host whose agent could not start begins
_RESEATED = (FailureKind.RETRYABLE, FailureKind.START_TIMEOUT, FailureKind.STALLED)
NOT_COUNTED = "not counted against max_restarts"


@dataclass(frozen=True)
class HostLoss:
    """What a launch whose gang can change does about a host gone for good: membership decides, grow back
    takes hosts back (None: not this gang's kind), and the free spare hosts' tasks get warm standbys."""

    membership: Membership
    grow_back: GrowBack | None = None
    spare_hosts_tasks: Callable[[], list[TaskLaunch]] = list


def root_machine(decision: Decision, status: GangStatus, tasks: Mapping[str, TrackedTask]) -> int | None:
    """The machine the decision's root cause ran on: the cause's, or that of the peer it blames."""
    if decision.cause is None or decision.cause not in tasks:
        return None
    cause = next((t for t in status.tasks if t.name == decision.cause), None)
    blamed = [name for name in peers_blamed(cause) if name in tasks] if cause is not None else []
    return tasks[blamed[0] if blamed else decision.cause].launch.host_index


def gone_machines(tasks: Mapping[str, TrackedTask], transport: Transport) -> dict[int, str]:
    """Machines whose tasks were lost and whose agent cannot be reached or started again, with why."""
    lost: dict[int, str] = {}
    for task in tasks.values():
        if task.exit is not None and task.exit.lost is not None:
            lost.setdefault(task.launch.host_index, task.exit.lost)
    gone = {m: why.removeprefix(CANNOT_START) for m, why in lost.items() if why.startswith(CANNOT_START)}
    probe = [m for m in lost if m not in gone]
    if probe:
        transport.connect(probe)  # side by side; a failure waits for agent() to raise it
    for machine in probe:
        try:
            transport.agent(machine)
        except HostError as error:
            gone[machine] = str(error)
    return gone


def regroup(
    membership: Membership,
    decision: Decision,
    status: GangStatus,
    tasks: Mapping[str, TrackedTask],
    transport: Transport,
    now: Callable[[], float],
    say: Callable[[str], None],
) -> tuple[Decision, Change | None]:
    """The decision to act on, and the roster's change, if one was made (the planner reads the roster)."""
    if decision.action not in (Action.RESTART, Action.FAIL) or decision.kind not in _RESEATED:
        return decision, None
    change, kept = membership.after_failure(
        root_machine(decision, status, tasks), gone_machines(tasks, transport), now()
    )
    if kept is not None:
        say(kept)
    if change is None:
        return decision, None
    if not change.first:  # a machine out again: a restart like any other, within max_restarts
        counted = replace(decision, reason=f"{decision.reason}; {change.says}")
        return counted, change if decision.action is Action.RESTART else None
    reason = f"{decision.what or decision.reason}; {change.says}"
    return replace(decision, action=Action.RESTART, reason=reason), change
