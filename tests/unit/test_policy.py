"""The restart policy: every exit-code class and every timeout, from hand-made snapshots."""

from __future__ import annotations

import signal

import pytest

from launcher.gang import GangStatus, TaskStatus
from launcher.policy import Action, FailureKind, RestartPolicy
from launcher.spec import RestartSpec
from launcher.transport.base import TaskExit

POLICY = RestartPolicy(RestartSpec(max_restarts=2, fatal_exit_codes=[2, 7], start_timeout_s=30, stall_timeout_s=60))


def task(name: str, exit: TaskExit | None = None, joined: bool = True, started: float = 0.0, progress: float = 0.0,
         reported: bool = True) -> TaskStatus:
    return TaskStatus(name, "localhost", 1, joined, None, exit, started, progress, reported)


def status(*tasks: TaskStatus, now: float = 10.0, restarts: int = 0, reports: bool = True) -> GangStatus:
    return GangStatus(0, restarts, 0, now, reports, tasks)


def test_all_exit_zero_succeeds() -> None:
    decision = POLICY.decide(status(task("worker:0", TaskExit(0, None)), task("worker:1", TaskExit(0, None))))
    assert decision.action is Action.SUCCEED


def test_some_finished_others_running_keeps_going() -> None:
    assert POLICY.decide(status(task("worker:0", TaskExit(0, None)), task("worker:1"))).action is Action.KEEP_GOING


@pytest.mark.parametrize("exit, kind, action", [
    (TaskExit(42, None), FailureKind.PREEMPTED, Action.RESTART),
    (TaskExit(1, None), FailureKind.RETRYABLE, Action.RESTART),
    (TaskExit(None, signal.SIGKILL), FailureKind.RETRYABLE, Action.RESTART),
    (TaskExit(None, signal.SIGSEGV), FailureKind.RETRYABLE, Action.RESTART),
    (TaskExit(2, None), FailureKind.FATAL, Action.FAIL),
    (TaskExit(7, None), FailureKind.FATAL, Action.FAIL),
])
def test_exit_classes(exit: TaskExit, kind: FailureKind, action: Action) -> None:
    decision = POLICY.decide(status(task("worker:0"), task("worker:1", exit)))
    assert (decision.kind, decision.action, decision.cause) == (kind, action, "worker:1")


def test_first_failure_by_time_is_the_cause() -> None:
    decision = POLICY.decide(status(task("worker:0", TaskExit(1, None, time=5.0)), task("worker:1", TaskExit(None, 9, time=4.0))))
    assert decision.cause == "worker:1"


def test_retryable_fails_when_restarts_are_used_up() -> None:
    decision = POLICY.decide(status(task("worker:0", TaskExit(1, None)), restarts=2))
    assert decision.action is Action.FAIL and "no restarts left" in decision.reason


def test_preemption_restarts_even_with_no_restarts_left() -> None:
    decision = POLICY.decide(status(task("worker:0", TaskExit(42, None)), restarts=2))
    assert decision.action is Action.RESTART


def test_start_timeout_names_every_late_task() -> None:
    snapshot = status(task("worker:0"), task("worker:1", joined=False), task("worker:2", joined=False), now=31.0)
    decision = POLICY.decide(snapshot)
    assert decision.action is Action.FAIL and decision.kind is FailureKind.START_TIMEOUT
    assert "worker:1, worker:2" in decision.reason
    assert POLICY.decide(status(task("worker:1", joined=False), now=29.0)).action is Action.KEEP_GOING


def test_start_timeout_blames_the_tasks_whose_runtime_never_came_up() -> None:
    snapshot = status(task("worker:0", joined=False), task("worker:1", joined=False, reported=False), now=31.0)
    decision = POLICY.decide(snapshot)
    assert decision.cause == "worker:1"
    assert decision.reason.startswith("worker:1 did not join") and "worker:0 started and waited" in decision.reason


def test_stall_restarts_only_when_every_running_task_is_quiet() -> None:
    def stepped(name: str, progress: float) -> TaskStatus:
        return TaskStatus(name, "localhost", 1, True, 10, None, 0.0, progress, True)

    quiet = status(stepped("worker:0", 0.0), stepped("worker:1", 5.0), now=70.0)
    decision = POLICY.decide(quiet)
    assert decision.action is Action.RESTART and decision.kind is FailureKind.STALLED and decision.cause == "worker:0"
    busy = status(stepped("worker:0", 0.0), stepped("worker:1", 50.0), now=70.0)
    assert POLICY.decide(busy).action is Action.KEEP_GOING


def test_before_the_first_step_start_up_time_applies_not_the_stall_timeout() -> None:
    policy = RestartPolicy(RestartSpec(stall_timeout_s=2, start_timeout_s=30))
    restoring = status(task("worker:0", progress=0.0), now=10.0)  # joined, no step yet
    assert policy.decide(restoring).action is Action.KEEP_GOING
    assert policy.decide(status(task("worker:0", progress=0.0), now=31.0)).kind is FailureKind.STALLED


def test_stall_off_by_default() -> None:
    policy = RestartPolicy(RestartSpec())
    assert policy.decide(status(task("worker:0"), now=10_000.0)).action is Action.KEEP_GOING


def test_backoff_doubles_up_to_the_cap() -> None:
    policy = RestartPolicy(RestartSpec(backoff_s=1, max_backoff_s=5))
    assert [policy.backoff_s(n) for n in range(5)] == [1, 2, 4, 5, 5]
