"""A hang named before anything is killed: every running task's stacks taken by its host's agent, written
beside its log as `worker-1.stack.txt` (masked like every output), and the task behind named with the
innermost frame of its user's code (launcher/supervise/stacks.py). Called by the supervisor on a stall, on
a start-up past start_timeout_s, and for tasks that ignored a stop past their grace period.
"""

from __future__ import annotations

import logging
import os
import re
import time
from dataclasses import dataclass, field, replace
from typing import Any

from launcher.common.errors import InterruptedLaunchError
from launcher.common.masking import redact
from launcher.common.private_files import make_private_dir
from launcher.plan import TaskLaunch
from launcher.supervise.gang import TaskStatus
from launcher.supervise.policy import Decision
from launcher.supervise.stacks import TaskStacks, laggards, name_the_hang, parse, render, stack_path
from launcher.transport.base import Transport
from worker.files import write_atomic

log = logging.getLogger(__name__)


@dataclass
class Hang:
    """What was learnt of one attempt's hang: the laggard named, and each task's stack file or why none."""

    named: str = ""
    files: dict[str, str] = field(default_factory=dict)  # task -> its stack file
    missing: dict[str, str] = field(default_factory=dict)  # task -> why no stack was taken
    laggard: str | None = None  # the first task named behind

    def to_json(self) -> dict[str, Any]:
        return {"named": self.named, "stack_files": self.files, "no_stack": self.missing}


def take(transport: Transport, launches: list[TaskLaunch]) -> dict[str, TaskStacks]:
    """Every thread's stack of these tasks, as their agents took them; a transport that cannot says why."""
    try:
        taken = transport.stacks(launches)
    except InterruptedLaunchError:  # the user's stop comes first
        raise
    except Exception as error:  # noqa: BLE001 - naming a hang must never stop the stop that follows
        log.warning("cannot take the tasks' stacks: %s", error)
        taken = {launch.name: {"via": None, "why": str(error)} for launch in launches}
    unanswered = {"why": "no answer came for it"}
    return {launch.name: parse(launch.name, taken.get(launch.name) or unanswered) for launch in launches}


def write(stacks: dict[str, TaskStacks], launches: list[TaskLaunch], at: float) -> Hang:
    """Each task's stack file beside its log; the Hang lists them (and why a task has none)."""
    hang = Hang()
    for launch in launches:
        found = stacks.get(launch.name)
        if found is None:
            continue
        path = stack_path(launch.log_path)
        try:
            make_private_dir(os.path.dirname(path))
            write_atomic(path, redact(render(found, launch.host, at)))
            hang.files[launch.name] = path
        except OSError as error:
            log.warning("cannot write %s: %s", path, error)
        if found.via is None:
            hang.missing[launch.name] = found.why
    return hang


def name(transport: Transport, launches: list[TaskLaunch], statuses: list[TaskStatus], now: float) -> Hang:
    """Take the running tasks' stacks, write them, and name the task behind."""
    stacks = take(transport, launches)
    hang = write(stacks, launches, time.time())
    hang.named = redact(name_the_hang(statuses, stacks, now))  # a secret in a file or function name stays masked
    behind = laggards(statuses, stacks)
    hang.laggard = behind[0].name if behind else None
    return hang


def stacks_of(transport: Transport, launches: list[TaskLaunch]) -> Hang:
    """These tasks' stacks, written (tasks that ignored a stop), each named with its innermost frame of the
    user's code: where it was stuck."""
    stacks = take(transport, launches)
    found = write(stacks, launches, time.time())
    frames = {name: frame for name, got in stacks.items() if (frame := got.user_frame()) is not None}
    found.named = redact("; ".join(f"{name} in {frame.short()}" for name, frame in frames.items()))
    return found


def where(hang: Hang, attempt_dir: str) -> str:
    """Where a hang's stacks are, or why there are none."""
    if not hang.files or len(hang.missing) == len(hang.files):
        why = next(iter(hang.missing.values()), "no task was running")
        return f"no task's stack could be taken: {why}"
    text = f"the tasks' stacks, taken before the stop, are in {attempt_dir} (*.stack.txt)"
    if hang.missing:
        text += f"; none of {', '.join(hang.missing)}: {next(iter(hang.missing.values()))}"
    return text


def ignored_stop(names: str, grace: float, hang: Hang, trained: bool, attempt_dir: str) -> str:
    """What the launcher says of tasks that ignored SIGTERM past their grace period, from their stacks."""
    text = f"{names} did not exit within restart.grace_period_s={grace:g}s of SIGTERM: SIGKILL now"
    if hang.named:
        text += (
            f"; stuck {hang.named} (its stack is in {attempt_dir}): a task saves and leaves at its next step, "
            "and never got there"
        )
    else:
        text += (
            ". A training script should save and leave on SIGTERM (PreemptionCheckpointHandler: docs/your-script.md)"
        )
    return text + ("; what it trained since its last checkpoint is lost" if trained else "")


def merged(earlier: Hang | None, later: Hang) -> Hang:
    if earlier is None:
        return later
    earlier.files.update(later.files)
    earlier.missing.update(later.missing)
    return earlier


def named_in(decision: Decision, hang: Hang) -> Decision:
    """The decision with the task behind named after what happened, and made its cause."""
    if not hang.named or not decision.what:
        return decision
    what = re.sub(r"; \S+ was quiet longest$", "", decision.what)  # the task named says more
    reason = decision.reason.replace(decision.what, f"{what}: {hang.named}", 1)
    return replace(decision, reason=reason, cause=hang.laggard or decision.cause)
