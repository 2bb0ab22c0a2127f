"""Decide what the gang does next from one status snapshot. Pure: no clocks, no processes.

Exit classes: the preemption code means "checkpointed and left on request" (restart, does not
use up max_restarts); a fatal code means "retrying cannot help" (fail now); anything else that
is not 0, or death by a signal, is retryable (restart while restarts remain).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from launcher.spec.restart import RestartSpec
from launcher.supervise.gang import GangStatus, TaskStatus


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
    signature: str | None = None  # the root cause in a form that compares equal when it repeats
    what: str = ""  # what went wrong, without what is done about it (a restart's count, a failure's verdict)


KEEP_GOING = Decision(Action.KEEP_GOING)
PREEMPTED_SAYS = "preempted; resumes from its checkpoint"  # after how a preempted task ended


def ended(task: TaskStatus) -> str:
    """How a task ended, as a decision's reason begins: `worker:1 on h exit code 3 (ValueError: ...)`."""
    assert task.exit is not None
    what = f"{task.name} on {task.host} {task.exit.describe()}"
    if task.error is not None:
        what += f" ({task.error[0]}: {short_message(task.error[1])})"
    return what


NOT_RETRYING = "the same failure twice; not retrying"


_UNHEALTHY = re.compile(r"unhealthy|stopped sending heartbeats", re.IGNORECASE)
_TF_TASK = re.compile(r"/job:(\w+)/replica:\d+/task:(\d+)")


_NOISE = ("File ", "Detected at node", "Graph execution error", "[[", "Traceback")


def short_message(message: str, limit: int = 200) -> str:
    """The line of an exception message that says what went wrong (TensorFlow wraps it in frames)."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    meaningful = [line for line in lines if not line.startswith(_NOISE)]
    text = (meaningful or lines or [""])[0]
    return text if len(text) <= limit else text[: limit - 3] + "..."


def peers_blamed(task: TaskStatus) -> list[str]:
    """Tasks that TensorFlow's coordination service named as unhealthy in this task's error, if any.

    A task whose collectives were aborted because a peer stopped sending heartbeats did nothing
    wrong itself: the peer (a frozen process, a partitioned host) is the cause."""
    if task.error is None or not _UNHEALTHY.search(task.error[1]):
        return []
    named = [f"{job}:{index}" for job, index in _TF_TASK.findall(task.error[1])]
    return [name for name in dict.fromkeys(named) if name != task.name]


def failure_signature(task: TaskStatus) -> str | None:
    """What makes a failure repeatable: its task type with its exception, or an exit code before any step.

    None for what may well go away on a retry: a signal, a lost host, an exit after training began
    without an error file.
    """
    task_type = task.name.split(":")[0]
    if peers_blamed(task):
        return None  # a consequence of another task's trouble, not a failure of its own
    if task.error is not None:
        return f"{task_type}: {task.error[0]}: {task.error[1]}"
    exit = task.exit
    if exit is not None and exit.code is not None and exit.lost is None and task.step is None:
        return f"{task_type}: exit code {exit.code} before the first step"
    return None


RUNTIME_CRASH_GRACE_S = 0.0  # the built-in runtime (builtin, fit): TensorFlow swallows SIGTERM, nothing to save
CODE_CRASH_GRACE_S = 0.1  # a user's function or command may handle SIGTERM


def default_crash_grace_s(training_kind: str) -> float:
    """`restart.crash_grace_s` when the spec leaves it unset."""
    return RUNTIME_CRASH_GRACE_S if training_kind in ("builtin", "fit") else CODE_CRASH_GRACE_S


DEFAULT_STALL_FLOOR_S = 600.0
DEFAULT_STALL_STEPS = 50
RUNTIME_STEPS = ("builtin", "fit")  # the training kinds whose steps the runtime reports, not the user's code


def default_stall_s(status: GangStatus, steps_itself: bool = False) -> float | None:
    """The stall timeout when the spec sets none: max(10 minutes, 50 times the slowest task's mean step
    time), once every running task reported a step. Before that, where the runtime reports the steps
    itself (`steps_itself`: the builtin and fit kinds), 10 minutes from joining (and from its restore): a
    data loader stuck before the first step is a hang too. Else None (not judged): a function or script
    that never calls `report` may train for hours without a word."""
    running = [t for t in status.tasks if t.running]
    if status.step_time_s is None or any(t.step is None for t in running):
        joined = steps_itself and status.reports_progress and bool(running) and all(t.joined for t in running)
        return DEFAULT_STALL_FLOOR_S if joined else None
    return max(DEFAULT_STALL_FLOOR_S, DEFAULT_STALL_STEPS * status.step_time_s)


IDLE_PREEMPTIONS = 3  # preemptions in a row before any step that are restarted, when max_restarts is lower


@dataclass(frozen=True)
class RestartPolicy:
    spec: RestartSpec
    training_kind: str = "command"  # what an unset crash_grace_s depends on

    def classify(self, task: TaskStatus) -> FailureKind:
        exit = task.exit
        if exit is None or exit.ok:
            return FailureKind.NONE
        if exit.code == self.spec.preemption_exit_code:
            return FailureKind.PREEMPTED
        if exit.code is not None and exit.code in self.spec.fatal_exit_codes:
            return FailureKind.FATAL
        return FailureKind.RETRYABLE

    def grace_s(self, decision: Decision) -> tuple[float, bool]:
        """How to stop what still runs after `decision`: (seconds before SIGKILL, send SIGTERM first).

        After a crash, hang or missed start the survivors' collectives are broken and they cannot
        save: a short grace, none for the built-in runtime's kinds (unless the spec sets one).
        Preempted workers are saving and leave by themselves, as do side-cars finishing their last
        checkpoint after a success: no SIGTERM (it could land mid-exit), just a deadline. An
        interrupted launcher gives tasks the full grace period to save.
        """
        if decision.action is Action.SUCCEED or decision.kind is FailureKind.PREEMPTED:
            return self.spec.grace_period_s, False
        if decision.kind is FailureKind.NONE:
            return self.spec.grace_period_s, True
        grace = self.spec.crash_grace_s
        if grace is None:
            grace = default_crash_grace_s(self.training_kind)
        return grace, True

    def decide(self, status: GangStatus) -> Decision:
        if status.all_succeeded:
            return Decision(Action.SUCCEED, reason="every task exited 0")
        failures = status.failures
        if failures:
            first = failures[0]
            kind = self.classify(first)
            assert first.exit is not None
            what = ended(first)
            blamed = peers_blamed(first)
            if blamed:
                hosts = {t.name: t.host for t in status.tasks}
                named = ", ".join(f"{name} on {hosts[name]}" if name in hosts else name for name in blamed)
                what += f"; TensorFlow reports {named} stopped sending heartbeats"
            if kind is FailureKind.FATAL:
                return Decision(Action.FAIL, kind, first.name, f"{what} (a fatal exit code: not restarted)")
            if kind is FailureKind.PREEMPTED:
                looping = self._preempted_in_a_loop(status)
                if looping is not None:
                    return Decision(Action.FAIL, kind, first.name, f"{what}: {looping}")
                return Decision(Action.RESTART, kind, first.name, f"{what} ({PREEMPTED_SAYS})")
            return self._restart_or_fail(status, kind, first.name, what, failure_signature(first))
        hung = self._stopped_too_long(status)
        if hung is not None:
            return hung
        if status.unjoined and status.reports_progress:
            return self._start_deadline(status)
        return self._stall(status)

    def _preempted_in_a_loop(self, status: GangStatus) -> str | None:
        """Why preemptions in a row are not restarted any more: more than max_restarts (at least IDLE_PREEMPTIONS)
        attempts in a row left
        with the preemption exit code before any training step, where steps are reported (the built-in
        runtime, a function). Preemptions do not count as restarts, but nothing trained in any of these:
        most likely the script exits with that code for a reason of its own."""
        if not status.reports_progress or any(t.step is not None for t in status.tasks):
            return None
        if status.idle_attempts < max(self.spec.max_restarts, IDLE_PREEMPTIONS):
            return None
        code = self.spec.preemption_exit_code
        return (
            f"{status.idle_attempts + 1} attempts in a row left with the preemption exit code {code} before any "
            f"training step; not restarted again. If {code} is an exit code of the training's own, set "
            "restart.preemption_exit_code to another"
        )

    def _stopped_too_long(self, status: GangStatus) -> Decision | None:
        """A task frozen by SIGSTOP or Ctrl-Z is hung now; waiting for a deadline would only cost time."""
        limit = self.spec.stopped_timeout_s
        if limit is None:
            return None
        stopped = [
            t
            for t in status.tasks
            if t.running and t.stopped_since is not None and status.now - t.stopped_since >= limit
        ]
        if not stopped:
            return None
        first = min(stopped, key=lambda t: t.stopped_since or 0.0)
        return self._restart_or_fail(
            status,
            FailureKind.STALLED,
            first.name,
            f"{first.name} on {first.host} has been stopped (SIGSTOP or Ctrl-Z) for "
            f"{limit:g}s or more (stopped_timeout_s): hung",
            None,
        )

    def _start_deadline(self, status: GangStatus) -> Decision:
        late = [t for t in status.unjoined if status.now - t.started_mono >= self.spec.start_timeout_s]
        if not late:
            return KEEP_GOING
        # Every task blocks until all have joined; the ones that got least far are the culprits,
        # the rest were waiting for them.
        lowest = min(t.start_rank for t in late)
        behind = [t for t in late if t.start_rank == lowest]
        waiting = [t.name for t in late if t not in behind]
        where = behind[0].milestone if lowest > 0 else None
        reason = (
            f"{', '.join(t.name for t in behind)} did not join within start_timeout_s={self.spec.start_timeout_s:g}s"
            f" ({'last reported ' + repr(where) if where else 'its runtime never reported'})"
        )
        if waiting:
            reason += f"; {', '.join(waiting)} started and waited for it"
        signature = f"start timeout: {', '.join(t.name for t in behind)} at {where or 'nothing reported'}"
        return self._restart_or_fail(status, FailureKind.START_TIMEOUT, behind[0].name, reason, signature)

    def _stall(self, status: GangStatus) -> Decision:
        setting = "stall_timeout_s"
        given = self.spec.stall_timeout_s
        if given is None:
            steps_itself = self.training_kind in RUNTIME_STEPS
            given, setting = (
                default_stall_s(status, steps_itself),
                "the default stall timeout: max(600 s, 50 step times)",
            )
        if given is None:
            return KEEP_GOING
        stall: float = given
        running = [t for t in status.tasks if t.running]

        def quiet_for_too_long(task: TaskStatus) -> bool:
            # Restoring and tracing before the first step is start-up, not a stall.
            limit = (
                stall if task.step is not None or not status.reports_progress else max(stall, self.spec.start_timeout_s)
            )
            return status.now - task.last_progress >= limit

        if running and all(quiet_for_too_long(t) for t in running):
            slowest = min(running, key=lambda t: t.last_progress)
            what = "reported no step" if status.reports_progress else "printed nothing"
            if status.reports_progress and any(t.step is None for t in running) and self.spec.start_timeout_s > stall:
                stall, setting = self.spec.start_timeout_s, "start_timeout_s, before a task's first step"
            return self._restart_or_fail(
                status,
                FailureKind.STALLED,
                slowest.name,
                f"the gang {what} for {stall:g}s ({setting}); {slowest.name} was quiet longest",
                None,
            )
        return KEEP_GOING

    def _restart_or_fail(
        self, status: GangStatus, kind: FailureKind, cause: str, what: str, signature: str | None
    ) -> Decision:
        earlier = status.earlier_causes
        if signature is not None and earlier and all(e == signature for e in earlier):
            return Decision(
                Action.FAIL, kind, cause, f"{what}: {NOT_RETRYING} (attempts so far failed alike)", signature, what
            )
        if status.restarts < self.spec.max_restarts:
            return Decision(
                Action.RESTART,
                kind,
                cause,
                f"{what}; restart {status.restarts + 1} of {self.spec.max_restarts}",
                signature,
                what,
            )
        return Decision(
            Action.FAIL,
            kind,
            cause,
            f"{what}; no restarts left (max_restarts={self.spec.max_restarts})",
            signature,
            what,
        )

    def backoff_s(self, restarts: int) -> float:
        """Wait before restart number `restarts + 1`."""
        return min(self.spec.backoff_s * (2**restarts), self.spec.max_backoff_s)
