"""Decide what the gang does next from one status snapshot. Pure: no clocks, no processes.

Exit classes: the preemption code means "checkpointed and left on request" (restart, does not
use up max_restarts); a fatal code means "retrying cannot help" (fail now); anything else that
is not 0, or death by a signal, is retryable (restart while restarts remain).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from launcher.gang import GangStatus, TaskStatus
from launcher.spec import RestartSpec


class Action(str, Enum):
    KEEP_GOING = "keep_going"
    SUCCEED = "succeed"
    RESTART = "restart"
    FAIL = "fail"


class FailureKind(str, Enum):
    NONE = "none"
    PREEMPTED = "preempted"
    RETRYABLE = "retryable"
    FATAL = "fatal"
    START_TIMEOUT = "start_timeout"
    STALLED = "stalled"


@dataclass(frozen=True)
class Decision:
    action: Action
    kind: FailureKind = FailureKind.NONE
    cause: str | None = None  # the task that caused it
    reason: str = ""


KEEP_GOING = Decision(Action.KEEP_GOING)


@dataclass(frozen=True)
class RestartPolicy:
    spec: RestartSpec

    def classify(self, task: TaskStatus) -> FailureKind:
        exit = task.exit
        if exit is None or exit.ok:
            return FailureKind.NONE
        if exit.code == self.spec.preemption_exit_code:
            return FailureKind.PREEMPTED
        if exit.code is not None and exit.code in self.spec.fatal_exit_codes:
            return FailureKind.FATAL
        return FailureKind.RETRYABLE

    def decide(self, status: GangStatus) -> Decision:
        if status.all_succeeded:
            return Decision(Action.SUCCEED, reason="every task exited 0")
        failures = status.failures
        if failures:
            first = failures[0]
            kind = self.classify(first)
            assert first.exit is not None
            what = f"{first.name} on {first.host} {first.exit.describe()}"
            if kind is FailureKind.FATAL:
                return Decision(Action.FAIL, kind, first.name, f"{what} (a fatal exit code: not restarted)")
            if kind is FailureKind.PREEMPTED:
                return Decision(Action.RESTART, kind, first.name, f"{what} (preempted; resumes from its checkpoint)")
            return self._restart_or_fail(status, kind, first.name, what)
        if status.unjoined and status.reports_progress:
            late = [t for t in status.unjoined if status.now - t.started_mono >= self.spec.start_timeout_s]
            if late:
                # Every task blocks until all have joined; the ones whose runtime never even
                # came up are the culprits, the rest were waiting for them.
                silent = [t for t in late if not t.reported] or late
                waiting = [t.name for t in late if t not in silent]
                reason = f"{', '.join(t.name for t in silent)} did not join within start_timeout_s={self.spec.start_timeout_s:g}s"
                if waiting:
                    reason += f" ({', '.join(waiting)} started and waited for it)"
                return Decision(Action.FAIL, FailureKind.START_TIMEOUT, silent[0].name, reason)
            return KEEP_GOING
        stall = self.spec.stall_timeout_s
        if stall is not None:
            running = [t for t in status.tasks if t.running]

            def quiet_for_too_long(task: TaskStatus) -> bool:
                # Restoring and tracing before the first step is start-up, not a stall.
                limit = stall if task.step is not None or not status.reports_progress else max(stall, self.spec.start_timeout_s)
                return status.now - task.last_progress >= limit

            if running and all(quiet_for_too_long(t) for t in running):
                slowest = min(running, key=lambda t: t.last_progress)
                what = "reported no step" if status.reports_progress else "printed nothing"
                return self._restart_or_fail(status, FailureKind.STALLED, slowest.name,
                                             f"the gang {what} for {stall:g}s (stall_timeout_s); {slowest.name} was quiet longest")
        return KEEP_GOING

    def _restart_or_fail(self, status: GangStatus, kind: FailureKind, cause: str, what: str) -> Decision:
        if status.restarts < self.spec.max_restarts:
            return Decision(Action.RESTART, kind, cause, f"{what}; restart {status.restarts + 1} of {self.spec.max_restarts}")
        return Decision(Action.FAIL, kind, cause, f"{what}; no restarts left (max_restarts={self.spec.max_restarts})")

    def backoff_s(self, restarts: int) -> float:
        """Wait before restart number `restarts + 1`."""
        return min(self.spec.backoff_s * (2 ** restarts), self.spec.max_backoff_s)
