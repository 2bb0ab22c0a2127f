"""Where a restart's time goes (pure), and when a spare may take an order (pure)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from launcher.agent.standby import spare_declines
from launcher.spec.restart import RestartSpec
from launcher.supervise.gang import LaunchState
from launcher.supervise.recovery import RestartTimes, restart_phases
from tests.unit.test_supervisor import join_all, make

TIMES = RestartTimes("retryable", failed_at=100.0, decided_at=100.5, stopped_at=101.0, started_at=101.0)


def test_phases_are_measured_to_the_slowest_task_and_add_up_to_the_total() -> None:
    tasks = [
        {"starting": 101.1, "imported": 101.2, "joined": 102.0, "restored": 102.5, "first_step": 104.0},
        {"starting": 101.3, "imported": 101.4, "joined": 102.1, "restored": 102.6, "first_step": 104.5},
    ]
    found = restart_phases(TIMES, tasks)
    assert found["phases_s"] == {
        "detect": 0.5,
        "stop": 0.5,
        "backoff": 0.0,
        "spawn": 0.3,
        "import": 0.1,
        "join": 0.7,
        "restore": 0.5,
        "first_step": 1.9,
    }
    assert found["total_s"] == 4.5 and found["after"] == "retryable"


def test_an_unknown_milestone_leaves_a_hole_and_the_next_phase_counts_from_the_last_known() -> None:
    tasks = [{"joined": 102.0, "first_step": 103.0}, {"joined": 102.5, "first_step": 103.5}]  # no restore report
    found = restart_phases(TIMES, tasks)
    assert found["phases_s"]["spawn"] is None and found["phases_s"]["import"] is None
    assert found["phases_s"]["join"] == 1.5 and found["phases_s"]["restore"] is None
    assert found["phases_s"]["first_step"] == 1.0
    assert found["total_s"] == pytest.approx(sum(v for v in found["phases_s"].values() if v is not None))


def test_a_hang_has_no_detect_phase_and_a_script_without_reports_no_total() -> None:
    hang = RestartTimes("stalled", None, 100.5, 101.0, 101.0)
    found = restart_phases(hang, [{}, {}])
    assert found["phases_s"]["detect"] is None and found["phases_s"]["stop"] == 0.5
    assert found["total_s"] is None


ENV = {"PATH": "/bin", "TF_CONFIG": "{old}", "TFLAUNCH_ATTEMPT": "0", "CUDA_VISIBLE_DEVICES": "0"}


@pytest.mark.parametrize(
    ("argv", "env", "why"),
    [
        (["/py", "train.py", "--lr", "1"], {**ENV, "TF_CONFIG": "{new}", "TFLAUNCH_ATTEMPT": "1"}, None),
        (["/py", "-m", "worker"], {**ENV, "CUDA_VISIBLE_DEVICES": "1"}, None),
        (["/py", "-P", "-m", "worker"], ENV, None),
        (["/py", "-P", "train.py"], ENV, "only `python SCRIPT"),
        (["/py", "-u", "train.py"], ENV, "only `python SCRIPT"),
        (["/py", "-m"], ENV, "only `python SCRIPT"),
        (["/py"], ENV, "only `python SCRIPT"),
        (["/other/py", "train.py"], ENV, "the spare's python (/py)"),
        (["bash", "run.sh"], ENV, "the spare's python"),
        (["/py", "train.py"], {**ENV, "PATH": "/usr/bin"}, "environment changed since the spare started (PATH)"),
        (["/py", "train.py"], {**ENV, "LD_PRELOAD": "x"}, "(LD_PRELOAD)"),
    ],
)
def test_a_spare_takes_only_what_starts_the_same_interpreter_the_same_way(
    argv: list[str], env: dict[str, str], why: str | None
) -> None:
    found = spare_declines("/py", ENV, argv, env)
    assert (found is None) if why is None else (found is not None and why in found), found


def test_spares_are_prepared_once_the_gang_runs_and_the_restart_is_broken_down(tmp_path: Path) -> None:
    sup, transport, clock, _ = make(tmp_path, max_restarts=1)
    assert transport.spares_for == []  # not while the gang starts: it needs the CPU
    join_all(transport, 2)
    assert sup.step(0) is LaunchState.RUNNING
    assert transport.spares_for == [], "not before the first step: restoring and tracing need the CPU too"
    transport.started[0].say("step", step=1)
    assert sup.step(0) is LaunchState.RUNNING and transport.spares_for == []
    transport.started[1].say("step", step=1)
    sup.step(0)
    assert transport.spares_for == [], "not in the first seconds either: a short job gains nothing from spares"
    clock.now += RestartSpec().warm_spares_after_s
    sup.step(0)
    assert transport.spares_for == [["worker:0", "worker:1"]]
    assert sup.status().spares == (0, 2)
    transport.started[1].exit(None, signal.SIGKILL)
    assert sup.step(0) is LaunchState.STARTING
    second = transport.current(2)
    second[0].say("warm", used=True, ready=True)
    second[1].say("warm", used=False, why="the environment changed since the spare started (X)")
    for event in ("starting", "imported", "joined", "restored"):
        for task in second:
            task.say(event)
    for task in second:
        task.say("step", step=1)
    assert sup.step(0) is LaunchState.RUNNING
    clock.now += RestartSpec().warm_spares_after_s
    sup.step(0)
    assert transport.spares_for[-1] == ["worker:0", "worker:1"], "fresh spares for every attempt"
    for task in second:
        task.exit(0)
    assert sup.step(0) is LaunchState.SUCCEEDED
    assert sup.result is not None
    first, restarted = sup.result.attempts
    assert first.recovery is None
    recovery = restarted.recovery
    assert recovery is not None and recovery["after"] == "retryable"
    assert recovery["warm_tasks"] == 1 and recovery["tasks"] == 2
    assert recovery["cold_because"] == {"worker:1": "the environment changed since the spare started (X)"}
    assert all(value is not None for value in recovery["phases_s"].values())
    assert recovery["total_s"] == pytest.approx(sum(recovery["phases_s"].values()), abs=0.01)


@pytest.mark.parametrize("both_stepped", [True, False])
def test_a_cold_restart_says_which_condition_for_spares_was_not_met(tmp_path: Path, both_stepped: bool) -> None:
    sup, transport, clock, _ = make(tmp_path, max_restarts=1)
    join_all(transport, 2)
    assert sup.step(0) is LaunchState.RUNNING
    transport.started[0].say("step", step=1)
    if both_stepped:
        transport.started[1].say("step", step=1)
    sup.step(0)
    clock.now += RestartSpec().warm_spares_after_s / 2
    transport.started[1].exit(None, signal.SIGKILL)
    assert sup.step(0) is LaunchState.STARTING
    assert transport.spares_for == []
    for task in transport.current(2):
        task.say("step", step=1)
        task.exit(0)
    sup.step(0)
    assert sup.result is not None
    recovery = sup.result.attempts[1].recovery
    assert recovery is not None
    why = set(recovery["cold_because"].values())
    ending = "the attempt ended sooner" if both_stepped else "and not every task had"
    assert len(why) == 1 and why.pop().endswith(ending), why


def test_no_spares_for_tasks_that_report_no_step_nor_for_tasks_that_ended(tmp_path: Path) -> None:
    sup, transport, clock, _ = make(tmp_path, workers=3, reports=False)
    clock.now += 10 * RestartSpec().warm_spares_after_s
    sup.step(0)
    assert transport.spares_for == [], "nothing says these tasks train: a spare would cost a TensorFlow import each"
    first, second, third = transport.current(3)
    for task in (first, second, third):
        task.say("step", step=1)
    third.exit(0)
    sup.step(0)
    clock.now += RestartSpec().warm_spares_after_s
    sup.step(0)
    assert transport.spares_for == [["worker:0", "worker:1"]], "the task that finished needs no spare"
