"""Fire a fault injected by `launch --inject` when training reaches its step (rehearsal only)."""

from __future__ import annotations

import logging
import os
import signal
import sys

log = logging.getLogger(__name__)
FAULT_VAR = "TFLAUNCH_FAULT"  # worker.contract.FAULT_VAR


class FaultInjector:
    """Reads TFLAUNCH_FAULT ("kind:step:code") once; `at_step` fires it at most once."""

    def __init__(self, raw: str | None = None) -> None:
        raw = os.environ.get(FAULT_VAR) if raw is None else raw
        self.kind, self.step, self.code = None, -1, 1
        if raw:
            kind, step, code = raw.split(":")
            self.kind, self.step, self.code = kind, int(step), int(code)

    def at_step(self, step: int) -> None:
        if self.kind is None or step != self.step:
            return
        kind, self.kind = self.kind, None
        log.warning("injected fault: %s at step %d", kind, step)
        sys.stdout.flush()
        if kind == "exit":
            os._exit(self.code)
        signum = {"kill": signal.SIGKILL, "term": signal.SIGTERM, "hang": signal.SIGSTOP}[kind]
        os.kill(os.getpid(), signum)
