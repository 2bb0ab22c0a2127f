"""Fire a fault injected by `launch --inject` when a task reaches its step (rehearsal only).

The launcher hands the fault to one task of the first attempt (TFLAUNCH_FAULT, "kind:step:code").
The built-in runtime checks it at every step; a script of the user's has it fired by
`report("step", step=N)` at the first step reported at or past the fault's. One injector per
process (`injected()`), so a fault fires once however both ask. Standard library only.
"""

from __future__ import annotations

import os
import signal
import sys

FAULT_VAR = "TFLAUNCH_FAULT"  # worker.contract.FAULT_VAR
_SIGNALS = {"kill": signal.SIGKILL, "term": signal.SIGTERM, "hang": signal.SIGSTOP}


class FaultInjector:
    """Reads TFLAUNCH_FAULT once (a value it cannot read is no fault); `at_step` fires it at most once."""

    def __init__(self, raw: str | None = None) -> None:
        raw = os.environ.get(FAULT_VAR) if raw is None else raw
        self.kind: str | None = None
        self.step, self.code = -1, 1
        try:
            kind, step, code = (raw or "").split(":")
            if kind == "exit" or kind in _SIGNALS:
                self.kind, self.step, self.code = kind, int(step), int(code)
        except ValueError:  # not set, or not the launcher's: rehearsal only, never a crash
            pass

    def ends(self, code: int | None, signum: int | None, preempted: int | None = None) -> bool:
        """Whether a task that ended with exit code `code` or signal `signum` ended as this fault ends it;
        `preempted`: the preemption exit code, with which a task that handles SIGTERM leaves after it."""
        if self.kind == "exit":
            return code == self.code
        if self.kind == "term" and preempted is not None and code == preempted:
            return True
        return self.kind is not None and signum == _SIGNALS[self.kind]

    def at_step(self, step: int) -> None:
        if self.kind is None or step < self.step:
            return
        kind, self.kind = self.kind, None
        sys.stdout.flush()  # the lines before it first; then one line of its own, whatever logging is set up
        print(f"[tflaunch] injected fault: {kind} at step {step}", file=sys.stderr, flush=True)
        if kind == "exit":
            os._exit(self.code)
        os.kill(os.getpid(), _SIGNALS[kind])


_injected: list[FaultInjector] = []


def injected() -> FaultInjector:
    """This process's injector."""
    if not _injected:
        _injected.append(FaultInjector())
    return _injected[0]
