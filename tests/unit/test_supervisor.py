"""The supervisor driven one step at a time against a fake transport."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from launcher.plan import TaskLaunch
from launcher.supervise.gang import LaunchState
from launcher.supervise.policy import IDLE_PREEMPTIONS, RestartPolicy
from launcher.supervise.supervisor import Supervisor
from tests.unit.fakes import FakeClock, FakeTransport, fake_planner, fake_spec


def make(
    tmp_path: Path,
    workers: int = 2,
    reports: bool = True,
    echoed: list[tuple[str, str]] | None = None,
    echoes: Callable[[TaskLaunch, str], bool] | None = None,
    **restart: object,
) -> tuple[Supervisor, FakeTransport, FakeClock, list[str]]:
    """A started supervisor; `echoed` gets every (task, line) it passes on to the console, which shows the lines
    `echoes` says (default: all)."""
    spec = fake_spec(workers, **restart)
    transport, clock, notices = FakeTransport(), FakeClock(), []
    supervisor = Supervisor(
        fake_planner(spec, str(tmp_path)),
        transport,
        RestartPolicy(spec.restart),
        reports,
        on_notice=notices.append,
        on_output=None if echoed is None else lambda launch, line: echoed.append((launch.name, line)),
        echoes=echoes,
        clock=clock,
        sleep=lambda s: None,
    )
    supervisor.start()
    return supervisor, transport, clock, notices


def join_all(transport: FakeTransport, count: int) -> None:
    for task in transport.current(count):
        task.say("joined")


def test_starting_then_running_once_all_joined(tmp_path: Path) -> None:
    sup, transport, _, _ = make(tmp_path)
    assert [t.launch.name for t in transport.started] == ["worker:0", "worker:1"]
    transport.started[0].say("joined")
    assert sup.step(0) is LaunchState.STARTING
    transport.started[1].say("joined")
    assert sup.step(0) is LaunchState.RUNNING


def test_all_zero_exits_succeed_without_signals(tmp_path: Path) -> None:
    sup, transport, _, _ = make(tmp_path)
    join_all(transport, 2)
    transport.started[0].exit(0)
    assert sup.step(0) is LaunchState.RUNNING  # one done, one running: not a failure
    transport.started[1].exit(0)
    assert sup.step(0) is LaunchState.SUCCEEDED
    assert all(t.signals == [] for t in transport.started)


def test_crash_stops_the_rest_at_once_and_restarts_everyone(tmp_path: Path) -> None:
    sup, transport, _, notices = make(tmp_path, workers=3, max_restarts=1)
    join_all(transport, 3)
    transport.started[1].exit(None, signal.SIGKILL)
    assert sup.step(0) is LaunchState.STARTING  # a new attempt is starting
    first = transport.started[:3]
    assert first[0].signals[0] == signal.SIGTERM and first[2].signals[0] == signal.SIGTERM
    assert len(transport.started) == 6 and sup.plan.attempt == 1 and sup.restarts == 1
    assert sup.plan.tasks[0].env["TFLAUNCH_ATTEMPT"] == "1"
    assert any("worker:1" in n and "SIGKILL" in n for n in notices)


def test_what_the_others_print_while_a_failure_stops_them_is_logged_not_echoed(tmp_path: Path) -> None:
    echoed: list[tuple[str, str]] = []
    sup, transport, _, notices = make(tmp_path, echoed=echoed, max_restarts=1)
    join_all(transport, 2)
    transport.started[0].last_words = ["Traceback (most recent call last):", "UnavailableError: peer lost"]
    transport.started[1].print("ValueError: the real cause")
    transport.started[1].exit(1)
    assert sup.step(0) is LaunchState.STARTING
    assert echoed == [("worker:1", "ValueError: the real cause")]
    assert any(n.startswith("2 line(s) the other tasks printed while they were stopped") for n in notices), notices
    transport.started[2].print("attempt 1 speaks again")  # a new attempt's tasks are heard
    sup.step(0)
    assert echoed[-1] == ("worker:0", "attempt 1 speaks again")


def test_no_line_is_said_hidden_when_the_console_would_not_have_shown_it(tmp_path: Path) -> None:
    """--quiet, a live table, or --show of another task: the stopped tasks' lines were not to be shown anyway."""
    sup, transport, _, notices = make(tmp_path, echoed=[], echoes=lambda launch, line: launch.name == "worker:1")
    join_all(transport, 2)
    transport.started[0].last_words = ["UnavailableError: peer lost"]
    transport.started[1].exit(1)
    assert sup.step(0) is LaunchState.STARTING
    assert not any("while they were stopped" in n for n in notices), notices


def test_what_tasks_print_while_they_save_at_a_preemption_is_echoed(tmp_path: Path) -> None:
    echoed: list[tuple[str, str]] = []
    # grace_period_s=0: the fake saves when its deadline's SIGKILL comes
    sup, transport, _, _ = make(tmp_path, echoed=echoed, max_restarts=1, grace_period_s=0)
    join_all(transport, 2)
    transport.started[0].last_words = ["preempted; checkpoint saved"]
    transport.started[1].exit(42)  # the default preemption exit code
    sup.step(0)
    assert echoed == [("worker:0", "preempted; checkpoint saved")]


def test_term_ignored_gets_sigkill(tmp_path: Path) -> None:
    sup, transport, _, _ = make(tmp_path, max_restarts=0, grace_period_s=0, crash_grace_s=0)
    transport.started[0].ignore_term = True
    transport.started[1].exit(1)
    assert sup.step(0) is LaunchState.FAILED
    assert transport.started[0].signals == [signal.SIGTERM, signal.SIGKILL]


def test_fatal_exit_code_fails_without_restart(tmp_path: Path) -> None:
    sup, transport, _, _ = make(tmp_path, max_restarts=5)
    transport.started[0].exit(2)
    assert sup.step(0) is LaunchState.FAILED
    assert len(transport.started) == 2
    assert sup.result is not None and sup.result.attempts[0].kind == "fatal"


def test_restarts_exhausted_fails_after_max_plus_one_attempts(tmp_path: Path) -> None:
    sup, transport, _, _ = make(tmp_path, max_restarts=2)
    for _ in range(3):
        transport.started[-1].say("step", step=5)  # failed after training began: may well pass next time
        transport.started[-1].exit(1)
        state = sup.step(0)
    assert state is LaunchState.FAILED
    assert len(transport.started) == 6
    assert sup.result is not None and [a.attempt for a in sup.result.attempts] == [0, 1, 2]


def test_preemption_restarts_without_using_a_restart(tmp_path: Path) -> None:
    sup, transport, _, _ = make(tmp_path, max_restarts=0)
    for task in transport.current(2):
        task.exit(42)
    assert sup.step(0) is LaunchState.STARTING
    assert (sup.restarts, sup.preemptions, sup.plan.attempt) == (0, 1, 1)
    assert all(t.signals == [] for t in transport.started[:2]), "preempted workers are saving: no SIGTERM"
    from launcher.rundir.report import failures

    assert sup.result is not None and all(t.preempted for t in sup.result.attempts[0].tasks)
    assert failures(sup.result) == [], "a preemption is not a failure (launch status showed 'first failure')"


def test_preemptions_in_a_row_before_any_step_back_off_then_end_the_run(tmp_path: Path) -> None:
    """A training that leaves with the preemption code before it trains (its own exit code taken for a
    preemption's) is not restarted at once for ever: it backs off as a crash loop does, and where steps are
    reported, more than max_restarts (at least 3) such attempts in a row end the run."""
    waits: list[float] = []
    sup, transport, _, notices = make(tmp_path, max_restarts=0, backoff_s=1.0, max_backoff_s=30.0)
    sup._sleep = waits.append  # type: ignore[method-assign]
    for _ in range(IDLE_PREEMPTIONS):
        for task in transport.current(2):
            task.exit(42)
        assert sup.step(0) is LaunchState.STARTING
    assert waits == [1.0, 2.0, 4.0] and sup.restarts == 0 and sup.preemptions == IDLE_PREEMPTIONS
    assert "3 preemptions in a row before any training step: if 42 is an exit code of the training's own" in notices[-1]
    for task in transport.current(2):
        task.exit(42)
    assert sup.step(0) is LaunchState.FAILED
    assert "4 attempts in a row left with the preemption exit code 42 before any training step" in notices[-1]
    assert "set restart.preemption_exit_code to another" in notices[-1]


def test_a_preemption_after_training_restarts_at_once_and_clears_the_count(tmp_path: Path) -> None:
    waits: list[float] = []
    sup, transport, _, _ = make(tmp_path, max_restarts=0, backoff_s=1.0)
    sup._sleep = waits.append  # type: ignore[method-assign]
    for round_ in range(2 * IDLE_PREEMPTIONS):
        for task in transport.current(2):
            if round_ % 2:
                task.say("step", step=round_)
            task.exit(42)
        assert sup.step(0) is LaunchState.STARTING
    assert waits == [1.0] * IDLE_PREEMPTIONS  # each idle one follows one that trained: never doubled


def test_a_script_that_reports_no_steps_is_preempted_with_a_growing_wait_only(tmp_path: Path) -> None:
    waits: list[float] = []
    sup, transport, _, _ = make(tmp_path, reports=False, max_restarts=0, backoff_s=1.0, max_backoff_s=8.0)
    sup._sleep = waits.append  # type: ignore[method-assign]
    for _ in range(6):
        for task in transport.current(2):
            task.exit(42)
        assert sup.step(0) is LaunchState.STARTING  # it cannot tell: a real preemption stays a preemption
    assert waits == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]


def test_start_timeout_restarts_naming_the_task_then_stops_when_it_repeats(tmp_path: Path) -> None:
    sup, transport, clock, notices = make(tmp_path, start_timeout_s=30, max_restarts=5)
    transport.started[0].say("joined")
    transport.started[1].say("starting")
    clock.now += 29
    assert sup.step(0) is LaunchState.STARTING
    clock.now += 2
    assert sup.step(0) is LaunchState.STARTING and sup.restarts == 1  # a missed start is retried
    assert "worker:1 did not join" in notices[-2] and "restart 1 of 5" in notices[-2]
    assert all(signal.SIGTERM in t.signals for t in transport.started[:2])
    transport.started[2].say("joined")
    transport.started[3].say("starting")
    clock.now += 31
    assert sup.step(0) is LaunchState.FAILED  # the same task stuck at the same point: not retried again
    assert "worker:1 did not join" in notices[-2] and "the same failure twice; not retrying" in notices[-2]


def test_a_stopped_task_is_hung_at_once(tmp_path: Path) -> None:
    sup, transport, clock, notices = make(tmp_path, start_timeout_s=300, max_restarts=1, stopped_timeout_s=5)
    transport.started[0].say("imported")
    transport.started[1].say("starting")
    transport.started[1].say("stopped")  # the helper saw the task in the stopped state
    assert sup.step(0) is LaunchState.STARTING
    clock.now += 4
    assert sup.step(0) is LaunchState.STARTING and sup.restarts == 0
    clock.now += 1
    assert sup.step(0) is LaunchState.STARTING and sup.restarts == 1
    assert "worker:1 on localhost has been stopped" in notices[-2]


def test_a_continued_task_is_not_hung(tmp_path: Path) -> None:
    sup, transport, clock, _ = make(tmp_path, stopped_timeout_s=5)
    transport.started[1].say("stopped")
    sup.step(0)
    clock.now += 3
    transport.started[1].say("continued")
    sup.step(0)
    clock.now += 10
    assert sup.step(0) is LaunchState.STARTING and sup.restarts == 0


def test_the_same_error_twice_is_not_retried(tmp_path: Path) -> None:
    sup, transport, _, notices = make(tmp_path, max_restarts=3)
    for _ in range(2):
        task = transport.started[-1]
        error = {"type": "TBNotInstalledError", "message": "TensorBoard is not installed", "time": 1.0}
        Path(task.launch.error_path).write_text(__import__("json").dumps(error))
        task.say("step", step=1)
        task.exit(1)
        state = sup.step(0)
    assert state is LaunchState.FAILED and len(sup.result.attempts) == 2  # type: ignore[union-attr]
    assert "the same failure twice; not retrying" in notices[-1] and "TBNotInstalledError" in notices[-1]


def test_stall_restarts_the_gang(tmp_path: Path) -> None:
    sup, transport, clock, _ = make(tmp_path, stall_timeout_s=60, max_restarts=1)
    join_all(transport, 2)
    for task in transport.current(2):
        task.say("step", step=10)
    sup.step(0)
    clock.now += 59
    assert sup.step(0) is LaunchState.RUNNING
    clock.now += 2
    assert sup.step(0) is LaunchState.STARTING
    assert sup.result is not None and sup.result.attempts[0].kind == "stalled"


def test_output_counts_as_progress_for_user_commands(tmp_path: Path) -> None:
    sup, transport, clock, _ = make(tmp_path, reports=False, stall_timeout_s=60, max_restarts=0)
    assert sup.step(0) is LaunchState.RUNNING  # user commands do not report joining
    clock.now += 50
    transport.started[0].print("epoch 1")
    sup.step(0)
    clock.now += 50
    assert sup.step(0) is LaunchState.RUNNING
    clock.now += 20
    assert sup.step(0) is LaunchState.FAILED


def test_events_of_an_old_attempt_are_ignored(tmp_path: Path) -> None:
    sup, transport, _, _ = make(tmp_path, max_restarts=1)
    old = transport.started[0]
    transport.started[1].exit(1)
    sup.step(0)
    old.say("step", step=999)
    sup.step(0)
    assert all(t.step is None for t in sup.status().tasks)


def test_shutdown_stops_running_tasks_and_marks_interrupted(tmp_path: Path) -> None:
    sup, transport, _, _ = make(tmp_path)
    sup.shutdown()
    assert sup.state is LaunchState.INTERRUPTED
    assert all(t.exited for t in transport.started)
    assert transport.closed
    sup.shutdown()  # idempotent


def test_hurry_skips_the_grace_period_but_not_the_wait_for_killed_tasks(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sup, transport, clock, _ = make(tmp_path, grace_period_s=3600)
    for task in transport.started:
        task.ignore_term = True
    sup.hurry = True
    sup.stop_all(3600)
    assert all(t.signals == [signal.SIGTERM, signal.SIGKILL] for t in transport.started)
    assert "survived" not in caplog.text  # they did not: their exits were awaited
    assert all(t.exit is not None for t in sup.status().tasks)


def test_run_returns_the_result_and_shuts_down(tmp_path: Path) -> None:
    spec = fake_spec(2)
    transport = FakeTransport()
    sup = Supervisor(fake_planner(spec, str(tmp_path)), transport, RestartPolicy(spec.restart), True, clock=FakeClock())

    original_start = transport.start

    def start_and_finish(launch, sink):  # type: ignore[no-untyped-def]
        task = original_start(launch, sink)
        task.exit(0)
        return task

    transport.start = start_and_finish  # type: ignore[method-assign]
    result = sup.run(poll_s=0)
    assert result.state is LaunchState.SUCCEEDED and transport.closed
    assert [t.exit_code for t in result.attempts[0].tasks] == [0, 0]


def test_an_unreachable_host_at_restart_is_a_lost_host_then_retried(tmp_path: Path) -> None:
    sup, transport, _, notices = make(tmp_path, workers=3, max_restarts=2)
    join_all(transport, 3)
    transport.unreachable.add("localhost")
    transport.started[0].exit(None, signal.SIGKILL)
    calls = transport.start_calls
    assert sup.step(0) is LaunchState.STARTING  # attempt 1: every start fails, nothing raised
    assert transport.start_calls == calls + 1, "one failed connection per host and attempt, not one per task"
    transport.unreachable.clear()
    assert sup.step(0) is LaunchState.STARTING  # attempt 1 lost its tasks: attempt 2 reaches the host
    assert any("cannot start: localhost: no answer" in n for n in notices), notices
    join_all(transport, 3)
    for task in transport.current(3):
        task.exit(0)
    assert sup.step(0) is LaunchState.SUCCEEDED
    assert sup.restarts == 2


def test_a_crash_loop_backs_off_but_a_failure_after_training_restarts_at_once(tmp_path: Path) -> None:
    spec = fake_spec(2, max_restarts=5, backoff_s=1, max_backoff_s=30)
    transport, waits = FakeTransport(), []
    sup = Supervisor(
        fake_planner(spec, str(tmp_path)), transport, RestartPolicy(spec.restart), True, sleep=waits.append
    )
    sup.start()
    for _ in range(3):  # crashes before any step: 1, 2, 4 s
        join_all(transport, 2)
        transport.current(2)[0].exit(None, signal.SIGKILL)
        sup.step(0)
    for task in transport.current(2):  # this attempt trains, then fails: no wait, and the doubling starts over
        task.say("joined")
        task.say("step", step=5)
    transport.current(2)[0].exit(None, signal.SIGKILL)
    sup.step(0)
    join_all(transport, 2)
    transport.current(2)[0].exit(None, signal.SIGKILL)
    sup.step(0)
    assert waits == [1, 2, 4, 1]
    assert sup.restarts == 5


def test_a_stop_that_takes_long_says_what_it_waits_for_and_how_to_cut_it_short(tmp_path: Path) -> None:
    spec = fake_spec(2, grace_period_s=1.5)
    for ignore_term, expected in (
        (False, []),
        (True, ["worker:0, worker:1 to exit, then SIGKILL; a second Ctrl-C (or `launch stop`) kills them now"]),
    ):
        transport, notices = FakeTransport(), []
        planner = fake_planner(spec, str(tmp_path))
        sup = Supervisor(planner, transport, RestartPolicy(spec.restart), True, on_notice=notices.append)
        sup.start()
        for task in transport.started:
            task.ignore_term = ignore_term
        stopping: list[bool] = []
        sup._on_drained = lambda sup=sup, seen=stopping: seen.append(sup.status().stopping)  # type: ignore[misc]
        sup.shutdown()
        waits = [n for n in notices if n.startswith("waiting up to")]
        assert len(waits) == len(expected) and all(e in w for e, w in zip(expected, waits, strict=True)), notices
        killed = [n for n in notices if "did not exit within restart.grace_period_s=1.5s of SIGTERM" in n]
        assert len(killed) == ignore_term and all("PreemptionCheckpointHandler" in n for n in killed), notices
        assert stopping and all(stopping) and not sup.status().stopping  # shown while it stops, and only then
        assert all(t.signals[-1] == (signal.SIGKILL if ignore_term else signal.SIGTERM) for t in transport.started)


def _gang_ignoring_sigterm(tmp_path: Path, grace_s: float) -> tuple[Supervisor, FakeTransport, list[str]]:
    """A started 2-task gang whose tasks ignore SIGTERM, and the notices its supervisor gives."""
    spec = fake_spec(2, grace_period_s=grace_s)
    transport, notices = FakeTransport(), []
    sup = Supervisor(
        fake_planner(spec, str(tmp_path)), transport, RestartPolicy(spec.restart), True, on_notice=notices.append
    )
    sup.start()
    for task in transport.started:
        task.ignore_term = True
    return sup, transport, notices


def test_a_stop_nobody_asked_for_does_not_blame_the_script_for_its_sigkill(tmp_path: Path) -> None:
    sup, transport, notices = _gang_ignoring_sigterm(tmp_path, 0.5)
    sup.shutdown(asked=False)  # the launcher's own error ends the run
    assert all(t.signals[-1] == signal.SIGKILL for t in transport.started)
    assert not [n for n in notices if "did not exit within" in n], notices


def test_a_second_interrupt_during_the_grace_period_says_it_kills_now(tmp_path: Path) -> None:
    sup, transport, notices = _gang_ignoring_sigterm(tmp_path, 3600)
    # the second Ctrl-C, once the first stop has said what it waits for
    sup._on_drained = lambda: setattr(sup, "hurry", any(n.startswith("waiting up to") for n in notices))
    sup.shutdown()
    assert any("waiting up to" in n and "a second Ctrl-C" in n for n in notices), notices
    assert "interrupted again: SIGKILL to 2 task(s) now" in notices[-1], notices
    assert all(t.signals == [signal.SIGTERM, signal.SIGKILL] for t in transport.started)


def test_only_a_death_by_the_launchers_own_signal_is_called_stopped_by_the_launcher(tmp_path: Path) -> None:
    sup, transport, _, _ = make(tmp_path, workers=3, max_restarts=0)
    join_all(transport, 3)
    first, killed, preempted = transport.current(3)
    preempted.ignore_term = True
    first.exit(1)  # a crash: the others are stopped
    # the third leaves by itself with the preemption code while it is given its grace period
    sup._on_drained = lambda: None if preempted.exited else preempted.exit(42)
    assert sup.step(0) is LaunchState.FAILED
    assert sup.result is not None
    shown = {t.name: t.describe_exit for t in sup.result.attempts[-1].tasks}
    assert shown == {
        "worker:0": "exit code 1",
        "worker:1": "killed by SIGTERM (stopped by the launcher)",
        "worker:2": "exit code 42",
    }


def _dies_printing(task: object, exception: str, code: int | None = 1, sig: int | None = None) -> None:
    """A script's death: its traceback in its log (no error file), then its exit."""
    launch = task.launch  # type: ignore[attr-defined]
    Path(launch.log_path).parent.mkdir(parents=True, exist_ok=True)
    Path(launch.log_path).write_text(f'Traceback (most recent call last):\n  File "train.py", line 9\n{exception}\n')
    task.exit(code, sig)  # type: ignore[attr-defined]


def test_a_script_that_dies_of_the_same_exception_twice_is_not_retried(tmp_path: Path) -> None:
    sup, transport, _, notices = make(tmp_path, max_restarts=3, backoff_s=0)
    join_all(transport, 2)
    _dies_printing(transport.started[1], "ValueError: bad batch: expected 32 rows, got 31")
    assert sup.step(0) is LaunchState.STARTING
    assert any("(ValueError: bad batch: expected 32 rows, got 31); restart 1 of 3" in n for n in notices), notices
    join_all(transport, 2)
    _dies_printing(transport.started[3], "ValueError: bad batch: expected 32 rows, got 31")
    assert sup.step(0) is LaunchState.FAILED
    assert "the same failure twice; not retrying" in notices[-1], notices


def test_a_script_killed_by_a_signal_is_retried_whatever_its_log_holds(tmp_path: Path) -> None:
    sup, transport, _, notices = make(tmp_path, max_restarts=3, backoff_s=0)
    for attempt in range(2):
        join_all(transport, 2)
        _dies_printing(transport.started[2 * attempt + 1], "ValueError: handled earlier", None, signal.SIGKILL)
        assert sup.step(0) is LaunchState.STARTING, notices
    assert sup.restarts == 2


def test_a_traceback_the_script_handled_is_not_why_it_exited(tmp_path: Path) -> None:
    sup, transport, _, notices = make(tmp_path, max_restarts=3, backoff_s=0)
    for attempt in range(2):
        join_all(transport, 2)
        transport.started[2 * attempt + 1].say("step", step=5)  # it trained: an exit code alone says nothing
        _dies_printing(transport.started[2 * attempt + 1], "ConnectionError: transient: retrying\ngiving up")
        assert sup.step(0) is LaunchState.STARTING, notices
    assert not any("ConnectionError" in n for n in notices), notices


def test_a_hung_causes_last_words_are_echoed_and_its_peers_are_not(tmp_path: Path) -> None:
    echoed: list[tuple[str, str]] = []
    sup, transport, clock, _ = make(tmp_path, echoed=echoed, max_restarts=1, stall_timeout_s=3)
    join_all(transport, 2)
    transport.started[0].say("step", step=1)
    sup.step(0)
    clock.now += 1
    transport.started[1].say("step", step=1)
    sup.step(0)
    for task in transport.started[:2]:
        task.last_words = [f"{task.launch.name}: stuck on the data loader's lock"]
    clock.now += 10
    assert sup.step(0) is LaunchState.STARTING
    assert echoed == [("worker:0", "worker:0: stuck on the data loader's lock")], echoed


def test_a_backoff_says_when_every_task_starts_again_and_only_while_it_lasts(tmp_path: Path) -> None:
    spec = fake_spec(2, max_restarts=2, backoff_s=7)
    transport, seen = FakeTransport(), []
    sup: Supervisor | None = None

    def sleep(seconds: float) -> None:
        assert sup is not None
        status = sup.status()
        seen.append((seconds, status.restart_at, [t.exit is not None for t in status.tasks]))

    sup = Supervisor(fake_planner(spec, str(tmp_path)), transport, RestartPolicy(spec.restart), True, sleep=sleep)
    sup.start()
    assert sup.status().restart_at is None
    before = time.time()
    transport.started[0].exit(3)  # no step yet: a crash loop backs off
    sup.step(0)
    ((seconds, restart_at, exited),) = seen
    assert seconds == 7 and restart_at is not None and before + 7 <= restart_at <= time.time() + 7
    assert exited == [True, True], "the attempt's tasks are shown ended while it backs off"
    assert sup.status().restart_at is None and sup.status().attempt == 1


def test_a_stop_during_a_backoff_leaves_the_restart_it_said_uncounted(tmp_path: Path) -> None:
    from launcher.common.errors import InterruptedLaunchError

    spec = fake_spec(1, max_restarts=2, backoff_s=7)
    transport = FakeTransport()

    def sleep(seconds: float) -> None:
        raise InterruptedLaunchError(signal.SIGINT, "`launch stop`")  # the stop comes while it backs off

    sup = Supervisor(fake_planner(spec, str(tmp_path)), transport, RestartPolicy(spec.restart), True, sleep=sleep)
    sup.start()
    transport.started[0].exit(3)
    with pytest.raises(InterruptedLaunchError):
        sup.step(0)
    sup.shutdown()
    assert sup.result is not None and sup.result.state is LaunchState.INTERRUPTED
    (attempt,) = sup.result.attempts
    assert attempt.reason.endswith("restart 1 of 2 (not made: stopped before it)"), attempt.reason
    assert sup.restarts == 0 and len(transport.started) == 1


def test_an_end_that_is_the_injected_fault_is_said_to_be_it() -> None:
    from launcher.supervise.tracked import as_injected
    from launcher.transport.base import ExitStatus

    class Launch:
        env = {"TFLAUNCH_FAULT": "kill:10:1"}

    killed = as_injected(Launch(), ExitStatus(None, signal.SIGKILL, oom_kills=0))  # type: ignore[arg-type]
    assert killed.describe() == "killed by SIGKILL (the injected fault: kill at step 10)"
    other = as_injected(Launch(), ExitStatus(3, None))  # type: ignore[arg-type]
    assert other.describe() == "exit code 3", "an end of another kind is the task's own"
    Launch.env = {"TFLAUNCH_FAULT": "exit:5:7"}
    assert as_injected(Launch(), ExitStatus(7, None)).describe() == "exit code 7 (the injected fault: exit at step 5)"  # type: ignore[arg-type]
    Launch.env = {"TFLAUNCH_FAULT": "term:12:1", "TFLAUNCH_PREEMPTION_EXIT_CODE": "42"}  # saved and left on it
    saved = as_injected(Launch(), ExitStatus(42, None))  # type: ignore[arg-type]
    assert saved.describe() == "exit code 42 (the injected fault: term at step 12)"
    assert as_injected(Launch(), ExitStatus(3, None)).injected is None  # type: ignore[arg-type]


def test_the_injected_faults_task_is_named_before_a_peer_that_left_first() -> None:
    """With `--inject term:worker:0@...` both workers save and leave with the preemption code; the one
    that left first is the peer, not the rehearsed fault's task."""
    from launcher.supervise.gang import GangStatus, TaskStatus
    from launcher.transport.base import ExitStatus

    def task(name: str, exit: ExitStatus) -> TaskStatus:
        return TaskStatus(name, "localhost", 1, True, 12, exit, 0.0, 0.0)

    peer = task("worker:1", ExitStatus(42, None, time=1.0))
    faulted = task("worker:0", ExitStatus(42, None, time=2.0, injected="term at step 12"))
    status = GangStatus(0, 0, 0, 3.0, True, (peer, faulted))
    assert [t.name for t in status.failures] == ["worker:0", "worker:1"]
    plain = task("worker:0", ExitStatus(42, None, time=2.0))
    assert [t.name for t in GangStatus(0, 0, 0, 3.0, True, (plain, peer)).failures] == ["worker:1", "worker:0"]


def test_a_script_that_reports_a_step_is_recorded_as_joined(tmp_path: Path) -> None:
    """A script reports no start-up milestones: its first step says it trains in the gang."""
    sup, transport, _, _ = make(tmp_path, reports=False)
    transport.started[0].say("step", step=3)
    sup.step(0)
    for task in transport.started:
        task.exit(0)
    assert sup.step(0) is LaunchState.SUCCEEDED and sup.result is not None
    assert [(t.name, t.joined, t.step) for t in sup.result.attempts[0].tasks] == [
        ("worker:0", True, 3),
        ("worker:1", False, None),
    ]


def test_a_rehearsed_term_is_recorded_as_the_preemptions_cause_when_a_peer_left_first(tmp_path: Path) -> None:
    from launcher.plan import LaunchPlan, PlanInputs, build_plan

    spec = fake_spec(2)
    transport, ticks = FakeTransport(), iter(range(1000, 100000))

    def clock() -> float:  # a second a look: the stop's grace runs out without real waiting
        return float(next(ticks))

    def planner(attempt: int) -> LaunchPlan:
        faults = {"worker:1": "term:10:1"} if attempt == 0 else {}
        return build_plan(spec, PlanInputs(str(tmp_path), attempt, "/py", "/work", faults=faults))

    sup = Supervisor(planner, transport, RestartPolicy(spec.restart), True, clock=clock, sleep=lambda s: None)
    sup.start()
    join_all(transport, 2)
    transport.started[0].exit(42, at=1.0)  # the peer saved and left first: decided on before the other left
    transport.started[1].signal = lambda signum: transport.started[1].exit(42, at=2.0)  # type: ignore[method-assign]
    sup.step(0)
    assert sup.result is not None
    attempt = sup.result.attempts[0]
    assert attempt.kind == "preempted" and attempt.cause == "worker:1", attempt
    assert "exit code 42 (the injected fault: term at step 10)" in attempt.reason, attempt.reason


def test_a_rehearsed_kill_is_recorded_as_the_cause_when_its_peer_s_error_came_in_first(tmp_path: Path) -> None:
    """`--inject kill:worker:0@...`: worker:1 fails at once on losing its peer, and its exit can reach the
    launcher before the killed task's own (its agent drains its pipes for a moment): the kill is the cause."""
    from launcher.plan import LaunchPlan, PlanInputs, build_plan

    spec = fake_spec(2, max_restarts=2)
    transport, ticks = FakeTransport(), iter(range(1000, 100000))

    def planner(attempt: int) -> LaunchPlan:
        faults = {"worker:0": "kill:10:1"} if attempt == 0 else {}
        return build_plan(spec, PlanInputs(str(tmp_path), attempt, "/py", "/work", faults=faults))

    sup = Supervisor(planner, transport, RestartPolicy(spec.restart), True, clock=lambda: float(next(ticks)))
    sup.start()
    join_all(transport, 2)
    transport.started[1].exit(1, at=2.0)  # the peer's error, in first
    transport.started[0].signal = lambda signum: transport.started[0].exit(None, signal.SIGKILL, at=1.0)  # type: ignore[method-assign]
    sup.step(0)
    assert sup.result is not None
    attempt = sup.result.attempts[0]
    assert attempt.kind == "retryable" and attempt.cause == "worker:0", attempt
    assert attempt.reason.startswith("worker:0 on localhost killed by SIGKILL (the injected fault: kill at step 10)")
    assert attempt.reason.endswith("; restart 1 of 2"), attempt.reason
