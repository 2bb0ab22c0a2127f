"""Parse `--inject` fault specs for rehearsing recovery on a CPU simulation.

    --inject kill:worker:1@step=50     SIGKILL worker 1 when it reaches step 50
    --inject term:chief:0@step=20      SIGTERM (a preemption notice)
    --inject hang:worker:0@step=30     SIGSTOP (a hung worker)
    --inject exit=3:worker:2@step=10   exit with code 3

The fault is handed to that task of the first attempt only (TFLAUNCH_FAULT), so the restarted
gang runs clean. The built-in runtime fires it; user commands ignore it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from launcher.errors import UsageError

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
