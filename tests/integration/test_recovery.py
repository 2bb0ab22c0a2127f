"""Gang recovery with real TensorFlow workers: crash, preemption, hang, missed start, launcher death.

Every recovered run must end with exactly the weights of an uninterrupted run (the data is a pure
function of the step and checkpoints restore everything), at the configured last step.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.conftest import (
    HELPERS,
    launch_cmd,
    local_spec,
    processes_mentioning,
    run_launch,
    wait_until_gone,
    write_spec,
)
from tests.integration.test_train_local import assert_agree, results

pytestmark = pytest.mark.tf

STEPS, EVERY = 120, 25


def recovery_spec(work: Path, name: str, **restart: Any) -> Path:
    spec = local_spec(name, 2, work / "runs", kind="builtin", steps=STEPS, checkpoint_every=EVERY, log_every=20)
    # spares at once after the first step (by default 5 s later), so that early faults find them
    spec["restart"] = {"max_restarts": 2, "backoff_s": 0, "grace_period_s": 5, "warm_spares_after_s": 0, **restart}
    return write_spec(work, spec, f"{name}.json")


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The fingerprint an uninterrupted run reaches."""
    work = tmp_path_factory.mktemp("reference")
    proc = run_launch(["--cluster", str(recovery_spec(work, "ref"))], work)
    assert proc.returncode == 0, proc.stderr
    found = results(work / "runs" / "ref", 0)
    assert_agree(found, 2, STEPS)
    assert not wait_until_gone(str(work), 10)
    return found["worker-0"]["fingerprint"]


def summary(work: Path, name: str) -> dict[str, Any]:
    return json.loads((work / "runs" / name / "summary.json").read_text())


@pytest.mark.parametrize(
    ("victim", "spares_after_s"), [("worker:1", 0), ("worker:0", 60)], ids=["non-chief", "chief-before-spares-asked"]
)
def test_sigkill_restarts_the_gang_and_finishes_identically(
    work: Path, reference: str, victim: str, spares_after_s: float
) -> None:
    """Warm either way: in the standbys the launcher asked for, or (a fault before it asked) in the spares
    each task forked after its import."""
    kill_at = 70
    spec = recovery_spec(work, "kill", warm_spares_after_s=spares_after_s)
    proc = run_launch(["--cluster", str(spec), "--inject", f"kill:{victim}@step={kill_at}"], work)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = summary(work, "kill")
    assert len(run["attempts"]) == 2 and run["restarts"] == 1
    assert run["attempts"][0]["cause"] == victim and "SIGKILL" in run["attempts"][0]["reason"]
    assert f"killed by SIGKILL (the injected fault: kill at step {kill_at})" in run["attempts"][0]["reason"]
    assert run["final_step"] == STEPS
    found = results(work / "runs" / "kill", 1)
    assert_agree(found, 2, STEPS)
    assert found["worker-0"]["fingerprint"] == reference
    redone = kill_at - found["worker-0"]["start_step"]
    assert 0 <= redone <= EVERY
    # the step each task of attempt 0 reported last is at least the one it saved: not left at a step
    # reported half a second before a kill (step reports are sent at most every half second)
    reached = {task["name"]: task["step"] for task in run["attempts"][0]["tasks"]}
    assert all(step is not None and step >= found["worker-0"]["start_step"] for step in reached.values()), reached
    assert (work / "runs" / "kill" / "attempt-0" / "worker-1.log").exists()
    assert (work / "runs" / "kill" / "attempt-1" / "worker-1.log").exists()
    recovery = run["attempts"][1]["recovery"]  # the restart ran in the warm spares (on by default)
    assert recovery["warm_tasks"] == 2 and recovery["tasks"] == 2, recovery
    # forked by attempt 0's tasks after their import (worker/forked_spare.py), and training as a cold task would
    assert recovery["forked_tasks"] == 2, recovery
    assert all(recovery["phases_s"][phase] is not None for phase in ("detect", "stop", "join", "first_step"))
    assert recovery["total_s"] == pytest.approx(sum(v for v in recovery["phases_s"].values() if v), abs=0.01)


def test_sigterm_preempts_checkpoints_and_loses_no_step(work: Path, reference: str) -> None:
    proc = run_launch(
        ["--cluster", str(recovery_spec(work, "term", max_restarts=0)), "--inject", "term:worker:1@step=60"], work
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = summary(work, "term")
    assert run["preemptions"] == 1 and run["restarts"] == 0
    assert {t["exit_code"] for t in run["attempts"][0]["tasks"]} == {42}, "every worker leaves with the preemption code"
    # the cause is the task the fault was given, whichever of the two saving workers left first
    assert run["attempts"][0]["cause"] == "worker:1", run["attempts"][0]
    assert "(the injected fault: term at step 60)" in run["attempts"][0]["reason"], run["attempts"][0]["reason"]
    found = results(work / "runs" / "term", 1)
    assert_agree(found, 2, STEPS)
    assert {r["start_step"] for r in found.values()} == {61}, "the preemption checkpoint is the step after the notice"
    first = run["attempts"][0]["tasks"]
    assert {t["step"] for t in first} == {61}, "a preempted worker's last step is the one it saved"
    logs = [Path(t["log_path"]).read_text() for t in first]
    assert all("preempted" in log for log in logs), logs[0][-2000:]
    assert not any("total_run_calls" in log for log in logs), "TensorFlow's warning of its own deprecated property"
    assert found["worker-0"]["fingerprint"] == reference
    assert run["attempts"][1]["recovery"]["warm_tasks"] == 2, run["attempts"][1]["recovery"]


def test_hung_worker_is_caught_by_the_stall_timeout(work: Path, reference: str) -> None:
    spec = recovery_spec(work, "hang", stall_timeout_s=3, stopped_timeout_s=None)  # the stall timeout alone
    proc = run_launch(["--cluster", str(spec), "--inject", "hang:worker:1@step=40"], work)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = summary(work, "hang")
    assert run["attempts"][0]["kind"] == "stalled", run["attempts"][0]["reason"]
    found = results(work / "runs" / "hang", 1)
    assert_agree(found, 2, STEPS)
    assert found["worker-0"]["fingerprint"] == reference


def test_a_task_that_never_joins_fails_the_launch_by_the_deadline(work: Path) -> None:
    spec = local_spec("late", 1, work / "runs", kind="builtin", steps=50)
    spec["hosts"].append(
        {
            "address": "localhost",
            "workers": 1,
            "env": {"PYTHONPATH": str(HELPERS / "hang_at_start"), "TEST_HANG_AT_START": "1"},
        }
    )
    spec["restart"]["start_timeout_s"] = 15
    started = time.monotonic()
    proc = run_launch(["--cluster", str(write_spec(work, spec))], work)
    elapsed = time.monotonic() - started
    assert proc.returncode == 1
    assert "worker:1 did not join within start_timeout_s=15s (its runtime never reported)" in proc.stderr
    assert "never joined: worker:1" in proc.stderr and "stuck before joining" in proc.stderr
    assert "never joined: worker:0" not in proc.stderr
    assert 15 <= elapsed < 15 + 10


def test_a_repeating_failure_and_fatal_codes(work: Path) -> None:
    task = str(HELPERS / "task.py")
    spec = write_spec(
        work,
        {
            "name": "ex",
            "run_root": str(work / "runs"),
            "hosts": [{"address": "localhost", "workers": 2}],
            "restart": {"max_restarts": 2, "backoff_s": 0, "crash_grace_s": 0.1},
        },
    )
    proc = run_launch(["--cluster", str(spec), "--", "python", task, "fail-on", "worker:1", "1"], work)
    assert proc.returncode == 1
    run = summary(work, "ex")
    # the same exit code before any progress, twice: bound to repeat, so the third attempt is spared
    assert len(run["attempts"]) == 2 and "the same failure twice; not retrying" in run["attempts"][-1]["reason"]
    assert run["first_failure"]["task"] == "worker:1" and run["first_failure"]["attempt"] == 0
    assert "root cause: worker:1 on localhost" in proc.stderr and "attempts:" in proc.stderr

    fatal = run_launch(
        ["--cluster", str(spec), "--name", "fatal", "--", "python", task, "fail-on", "worker:0", "2"], work
    )
    assert fatal.returncode == 1
    run = summary(work, "fatal")
    assert len(run["attempts"]) == 1 and run["attempts"][0]["kind"] == "fatal"


def test_sigkill_of_the_launcher_takes_tf_workers_with_it(work: Path) -> None:
    spec = local_spec("orphan", 2, work / "runs", kind="builtin", steps=100000, checkpoint_every=10000, log_every=10)
    log = work / "launch.out"
    with open(log, "w") as handle:
        proc = subprocess.Popen(
            launch_cmd("--cluster", str(write_spec(work, spec))), cwd=work, stdout=handle, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 120
        while "step 20/" not in log.read_text():
            assert time.monotonic() < deadline and proc.poll() is None, log.read_text()[-2000:]
            time.sleep(0.1)
        assert len(processes_mentioning(str(work))) >= 2  # two workers (their host's agent need not mention it)
        proc.kill()
        proc.wait()
    assert not wait_until_gone(str(work), timeout=5), "workers outlived their launcher"


def _start_up_process(work: Path, task: str, attempt: str, timeout: float = 60) -> psutil.Process:
    """The runtime process of `task` in `attempt`, as soon as it exists."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in processes_mentioning(str(work)):
            try:
                env, cmdline = proc.environ(), proc.cmdline()
            except psutil.Error:  # exited meanwhile
                continue
            if (
                env.get("TFLAUNCH_TASK") == task
                and env.get("TFLAUNCH_ATTEMPT") == attempt
                and cmdline[-3:] == ["-P", "-m", "worker"]
            ):
                return proc
        time.sleep(0.02)
    raise AssertionError(f"{task} of attempt {attempt} never started")


def test_a_worker_stopped_during_start_up_is_named_and_the_gang_restarts(work: Path, reference: str) -> None:
    log = work / "launch.out"
    with open(log, "w") as handle:
        proc = subprocess.Popen(
            launch_cmd("--cluster", str(recovery_spec(work, "frozen"))),
            cwd=work,
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
        try:
            _start_up_process(work, "worker:1", "0").suspend()  # a real SIGSTOP, while TensorFlow is still loading
            assert proc.wait(timeout=240) == 0, log.read_text()[-3000:]
        finally:
            proc.kill()
    run = summary(work, "frozen")
    first = run["attempts"][0]
    assert first["cause"] == "worker:1" and "has been stopped" in first["reason"], first["reason"]
    assert not any(t["joined"] for t in first["tasks"]), "the stop landed after the strategy was built"
    assert run["restarts"] == 1 and run["final_step"] == STEPS
    found = results(work / "runs" / "frozen", 1)
    assert_agree(found, 2, STEPS)
    assert found["worker-0"]["fingerprint"] == reference
