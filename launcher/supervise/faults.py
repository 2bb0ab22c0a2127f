"""Parse `--inject` fault specs for rehearsing recovery on a CPU simulation.

    --inject kill:worker:1@step=50     SIGKILL worker 1 when it reaches step 50
    --inject term:chief:0@step=20      SIGTERM (a preemption notice)
    --inject hang:worker:0@step=30     SIGSTOP (a hung worker)
    --inject exit=3:worker:2@step=10   exit with code 3

The fault is handed to that task of the first attempt only (TFLAUNCH_FAULT), so the restarted
gang runs clean. The built-in runtime fires it at its step; a script of the user's fires it from
`tflaunch.report("step", step=N)`, at the first step it reports at or past the fault's (one that
never reports steps cannot fire it, and the launcher says so when that task ends well).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from launcher.common.errors import UsageError

if TYPE_CHECKING:
    from launcher.supervise.gang import TaskResult

_FAULT = re.compile(
    r"^(?P<kind>kill|term|hang|exit(?:=(?P<code>\d{1,3}))?):(?P<task>(?:chief|worker):\d+)@step=(?P<step>\d+)$"
)


@dataclass(frozen=True)
class Fault:
    kind: str
    task: str
    step: int
    code: int = 1

    def to_env(self) -> str:
        return f"{self.kind}:{self.step}:{self.code}"

    @property
    def text(self) -> str:
        """As written after --inject."""
        kind = f"exit={self.code}" if self.kind == "exit" else self.kind
        return f"{kind}:{self.task}@step={self.step}"


def parse_fault(text: str) -> Fault:
    match = _FAULT.match(text.strip())
    if not match:
        raise UsageError(
            f"Got --inject {text!r}: write KIND:TASK@step=N, e.g. kill:worker:1@step=50 "
            "(KIND is kill, term, hang or exit=CODE)."
        )
    kind = match["kind"].split("=")[0]
    code = int(match["code"]) if match["code"] else 1
    if kind == "exit" and not 0 < code < 256:
        raise UsageError(f"Got --inject {text!r}: the exit code must be 1..255.")
    return Fault(kind, match["task"], int(match["step"]), code)


def unfired(faults: Iterable[Fault], first_attempt: Iterable[TaskResult]) -> list[str]:
    """What to say of each fault whose task ended well in the first attempt without reaching the
    fault's step (a rehearsal that rehearsed nothing must not read as a recovery that worked)."""
    tasks = {task.name: task for task in first_attempt}
    said = []
    for fault in faults:
        task = tasks.get(fault.task)
        if task is None or task.exit_code != 0 or task.injected:
            continue
        if task.step is None:
            reached = "it reported no step"
        elif task.step < fault.step:
            reached = f"the last step it reported was {task.step}"
        else:  # a step it started or ended at (a run resumed past the fault's step), not one it trained
            reached = f"it trained no step from {fault.step} on (it was at step {task.step}: resumed past it?)"
        said.append(
            f"--inject {fault.text} did not fire: {fault.task} exited 0 and {reached} (a script of your own "
            f'fires it by calling tflaunch\'s report("step", step=n) at step {fault.step} or later)'
        )
    return said
