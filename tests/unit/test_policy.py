"""The restart policy: every exit-code class and every timeout, from hand-made snapshots."""

from __future__ import annotations

import signal

import pytest

from launcher.spec.restart import RestartSpec
from launcher.supervise.gang import GangStatus, TaskStatus
from launcher.supervise.policy import Action, Decision, FailureKind, RestartPolicy, short_message
from launcher.transport.base import ExitStatus

POLICY = RestartPolicy(RestartSpec(max_restarts=2, fatal_exit_codes=[2, 7], start_timeout_s=30, stall_timeout_s=60))


def task(
    name: str,
    exit: ExitStatus | None = None,
    joined: bool = True,
    started: float = 0.0,
    progress: float = 0.0,
    reported: bool = True,
    milestone: str | None = None,
    step: int | None = None,
    error: tuple[str, str] | None = None,
    stopped_since: float | None = None,
) -> TaskStatus:
    return TaskStatus(
        name, "localhost", 1, joined, step, exit, started, progress, reported, milestone, stopped_since, error
    )


def status(
    *tasks: TaskStatus, now: float = 10.0, restarts: int = 0, reports: bool = True, earlier: tuple[str | None, ...] = ()
) -> GangStatus:
    return GangStatus(0, restarts, 0, now, reports, tasks, earlier)


def test_all_exit_zero_succeeds() -> None:
    decision = POLICY.decide(status(task("worker:0", ExitStatus(0, None)), task("worker:1", ExitStatus(0, None))))
    assert decision.action is Action.SUCCEED


def test_some_finished_others_running_keeps_going() -> None:
    assert POLICY.decide(status(task("worker:0", ExitStatus(0, None)), task("worker:1"))).action is Action.KEEP_GOING


@pytest.mark.parametrize(
    "exit, kind, action",
    [
        (ExitStatus(42, None), FailureKind.PREEMPTED, Action.RESTART),
        (ExitStatus(1, None), FailureKind.RETRYABLE, Action.RESTART),
        (ExitStatus(None, signal.SIGKILL), FailureKind.RETRYABLE, Action.RESTART),
        (ExitStatus(None, signal.SIGSEGV), FailureKind.RETRYABLE, Action.RESTART),
        (ExitStatus(2, None), FailureKind.FATAL, Action.FAIL),
        (ExitStatus(7, None), FailureKind.FATAL, Action.FAIL),
    ],
)
def test_exit_classes(exit: ExitStatus, kind: FailureKind, action: Action) -> None:
    decision = POLICY.decide(status(task("worker:0"), task("worker:1", exit)))
    assert (decision.kind, decision.action, decision.cause) == (kind, action, "worker:1")


def test_first_failure_by_time_is_the_cause() -> None:
    decision = POLICY.decide(
        status(task("worker:0", ExitStatus(1, None, time=5.0)), task("worker:1", ExitStatus(None, 9, time=4.0)))
    )
    assert decision.cause == "worker:1"


def test_retryable_fails_when_restarts_are_used_up() -> None:
    decision = POLICY.decide(status(task("worker:0", ExitStatus(1, None)), restarts=2))
    assert decision.action is Action.FAIL and "no restarts left" in decision.reason


def test_preemption_restarts_even_with_no_restarts_left() -> None:
    decision = POLICY.decide(status(task("worker:0", ExitStatus(42, None)), restarts=2))
    assert decision.action is Action.RESTART


def test_start_timeout_names_every_late_task_and_restarts() -> None:
    snapshot = status(task("worker:0"), task("worker:1", joined=False), task("worker:2", joined=False), now=31.0)
    decision = POLICY.decide(snapshot)
    assert decision.action is Action.RESTART and decision.kind is FailureKind.START_TIMEOUT
    assert "worker:1, worker:2" in decision.reason
    assert POLICY.decide(status(*snapshot.tasks, now=31.0, restarts=2)).action is Action.FAIL
    assert POLICY.decide(status(task("worker:1", joined=False), now=29.0)).action is Action.KEEP_GOING


def test_start_timeout_blames_the_tasks_whose_runtime_never_came_up() -> None:
    snapshot = status(task("worker:0", joined=False), task("worker:1", joined=False, reported=False), now=31.0)
    decision = POLICY.decide(snapshot)
    assert decision.cause == "worker:1"
    assert decision.reason.startswith("worker:1 did not join") and "worker:0 started and waited" in decision.reason


def test_start_timeout_blames_the_task_furthest_behind() -> None:
    # worker:1 was frozen while importing TensorFlow; the others imported it and wait in the join
    snapshot = status(
        task("worker:0", joined=False, milestone="imported"),
        task("worker:1", joined=False, milestone="starting"),
        task("worker:2", joined=False, milestone="imported"),
        now=31.0,
    )
    decision = POLICY.decide(snapshot)
    assert decision.cause == "worker:1" and decision.reason.startswith("worker:1 did not join")
    assert "last reported 'starting'" in decision.reason and "worker:0, worker:2 started and waited" in decision.reason


@pytest.mark.parametrize(
    "first, second, repeats",
    [
        (
            task("worker:1", ExitStatus(1, None), error=("ValueError", "bad")),
            task("worker:1", ExitStatus(1, None), error=("ValueError", "bad")),
            True,
        ),
        (
            task("worker:1", ExitStatus(1, None), error=("ValueError", "bad")),
            task("worker:2", ExitStatus(1, None), error=("ValueError", "bad")),
            True,
        ),
        (
            task("worker:1", ExitStatus(1, None), error=("ValueError", "bad")),
            task("chief:0", ExitStatus(1, None), error=("ValueError", "bad")),
            False,
        ),
        (
            task("worker:1", ExitStatus(1, None), error=("ValueError", "bad")),
            task("worker:1", ExitStatus(1, None), error=("ValueError", "other")),
            False,
        ),
        (task("worker:1", ExitStatus(3, None)), task("worker:0", ExitStatus(3, None)), True),  # same code, no step yet
        (task("worker:1", ExitStatus(3, None)), task("worker:0", ExitStatus(4, None)), False),
        (
            task("worker:1", ExitStatus(3, None), step=5),
            task("worker:0", ExitStatus(3, None), step=9),
            False,
        ),  # training ran
        (
            task("worker:1", ExitStatus(None, 9)),
            task("worker:1", ExitStatus(None, 9)),
            False,
        ),  # a signal: keep retrying
    ],
)
def test_the_same_root_cause_twice_is_not_retried(first: TaskStatus, second: TaskStatus, repeats: bool) -> None:
    earlier = POLICY.decide(status(task("worker:0"), first))
    assert earlier.action is Action.RESTART
    decision = POLICY.decide(status(task("worker:9"), second, restarts=1, earlier=(earlier.signature,)))
    assert (decision.action is Action.FAIL) is repeats
    assert ("the same failure twice; not retrying" in decision.reason) is repeats


def test_a_different_failure_in_between_keeps_retrying() -> None:
    policy = RestartPolicy(RestartSpec(max_restarts=5))
    bad = task("worker:1", ExitStatus(1, None), error=("ValueError", "bad"))
    signature = policy.decide(status(bad)).signature
    assert policy.decide(status(bad, restarts=2, earlier=(signature, None))).action is Action.RESTART
    assert policy.decide(status(bad, restarts=1, earlier=(signature,))).action is Action.FAIL


def test_a_task_stopped_for_too_long_is_hung() -> None:
    policy = RestartPolicy(RestartSpec(stopped_timeout_s=5, max_restarts=1))
    assert (
        policy.decide(status(task("worker:0"), task("worker:1", stopped_since=6.0), now=10.0)).action
        is Action.KEEP_GOING
    )
    decision = policy.decide(status(task("worker:0"), task("worker:1", stopped_since=5.0), now=10.0))
    assert (decision.action, decision.kind, decision.cause) == (Action.RESTART, FailureKind.STALLED, "worker:1")
    off = RestartPolicy(RestartSpec(stopped_timeout_s=None))
    assert off.decide(status(task("worker:1", stopped_since=0.0), now=1e6, reports=False)).action is Action.KEEP_GOING


def test_grace_depends_on_why_the_gang_stops() -> None:
    policy = RestartPolicy(RestartSpec(grace_period_s=10, crash_grace_s=0.1))
    assert policy.grace_s(Decision(Action.RESTART, FailureKind.RETRYABLE)) == (0.1, True)
    assert policy.grace_s(Decision(Action.RESTART, FailureKind.PREEMPTED)) == (10, False)
    assert policy.grace_s(Decision(Action.SUCCEED)) == (10, False)
    assert policy.grace_s(Decision(Action.FAIL, FailureKind.NONE)) == (10, True)


def test_after_a_crash_the_runtime_kinds_are_killed_at_once_and_code_gets_a_moment() -> None:
    crash = Decision(Action.RESTART, FailureKind.RETRYABLE)
    for kind in ("builtin", "fit"):  # TensorFlow swallows SIGTERM; the runtime has nothing to save
        assert RestartPolicy(RestartSpec(), kind).grace_s(crash) == (0.0, True)
    for kind in ("function", "command"):  # the user's own code may handle SIGTERM
        assert RestartPolicy(RestartSpec(), kind).grace_s(crash) == (0.1, True)
    assert RestartPolicy(RestartSpec(crash_grace_s=2), "builtin").grace_s(crash) == (2, True)  # the spec's word
    assert RestartPolicy(RestartSpec(crash_grace_s=0), "command").grace_s(crash) == (0, True)
    hang = Decision(Action.RESTART, FailureKind.STALLED)
    assert RestartPolicy(RestartSpec(), "builtin").grace_s(hang) == (0.0, True)


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


def test_without_stall_timeout_s_a_script_that_reports_no_step_is_not_judged() -> None:
    policy = RestartPolicy(RestartSpec())
    assert policy.decide(status(task("worker:0"), now=10_000.0, reports=False)).action is Action.KEEP_GOING
    assert (
        policy.decide(status(task("worker:0"), now=10_000.0)).action is Action.KEEP_GOING
    )  # a function: may say nothing
    builtin = RestartPolicy(RestartSpec(), "builtin")  # the runtime joined, and made no step for 10 minutes
    assert builtin.decide(status(task("worker:0"), now=599.0)).action is Action.KEEP_GOING
    joined = builtin.decide(status(task("worker:0"), now=600.0))
    assert joined.kind is FailureKind.STALLED and "no step for 600s" in joined.reason, joined


def test_backoff_doubles_up_to_the_cap() -> None:
    policy = RestartPolicy(RestartSpec(backoff_s=1, max_backoff_s=5))
    assert [policy.backoff_s(n) for n in range(5)] == [1, 2, 4, 5, 5]


UNHEALTHY = (
    "UnavailableError",
    "Collective ops is aborted by: Error reported from /job:worker/task:1: The following tasks are unhealthy "
    "(stopped sending heartbeats):\n/job:worker/replica:0/task:1\nThe tasks have crashed.",
)


def test_a_peer_named_unhealthy_by_tensorflow_is_named_and_is_no_repeatable_failure() -> None:
    victim = task("worker:0", ExitStatus(1, None), step=20, error=UNHEALTHY)
    decision = POLICY.decide(status(victim, task("worker:1")))
    assert decision.action is Action.RESTART
    assert "TensorFlow reports worker:1 on localhost stopped sending heartbeats" in decision.reason
    assert decision.signature is None  # twice in a row is still worth a retry: the peer was the trouble
    again = POLICY.decide(status(victim, task("worker:1"), restarts=1, earlier=(decision.signature,)))
    assert again.action is Action.RESTART


def test_a_tensorflow_error_is_summed_up_by_its_meaningful_line() -> None:
    wrapped = (
        "Graph execution error:\n\nDetected at node CollectiveReduceV2_1 defined at (most recent call last):\n"
        '  File "<frozen runpy>", line 198, in _run_module_as_main\n\n'
        "Collective ops is aborted by: the following tasks are unhealthy\n\t [[{{node CollectiveReduceV2_1}}]]"
    )
    assert short_message(wrapped) == "Collective ops is aborted by: the following tasks are unhealthy"
    assert short_message("x" * 500).endswith("...") and len(short_message("x" * 500)) == 200


@pytest.mark.parametrize(
    "step_time, quiet_for, stalled",
    [
        (0.1, 599.0, False),  # the floor: 10 minutes
        (0.1, 600.0, True),
        (20.0, 999.0, False),  # 50 step times of 20 s
        (20.0, 1000.0, True),
        (None, 599.0, False),  # no step time yet: the floor, counted from the last step
        (None, 600.0, True),
    ],
)
def test_without_stall_timeout_s_a_gang_that_stepped_stalls_after_the_default(
    step_time: float | None, quiet_for: float, stalled: bool
) -> None:
    from dataclasses import replace

    policy = RestartPolicy(RestartSpec(max_restarts=2), "builtin")
    gang = status(task("worker:0", step=40), task("worker:1", step=41), now=quiet_for)
    decision = policy.decide(replace(gang, step_time_s=step_time))
    assert (decision.action is Action.RESTART) is stalled, decision
    if stalled:
        assert decision.kind is FailureKind.STALLED and "the default stall timeout" in decision.reason
    # a task joined but not stepped yet (a data loader stuck before the first step): the floor, from its joining
    not_stepped = status(task("worker:0", step=40), task("worker:1"), now=quiet_for)
    decided = policy.decide(replace(not_stepped, step_time_s=step_time))
    assert (decided.action is Action.RESTART) is (quiet_for >= 600), decided
    unjoined = status(task("worker:0", step=40), task("worker:1", joined=False), now=quiet_for)
    assert policy.decide(replace(unjoined, step_time_s=step_time, reports_progress=False)).action is Action.KEEP_GOING
