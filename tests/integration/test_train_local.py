"""Real TensorFlow workers on this machine: train, agree, checkpoint, resume, fail cleanly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, launch_cmd, local_spec, processes_mentioning, run_launch, write_spec

pytestmark = pytest.mark.tf


def results(run_dir: Path, attempt: int) -> dict[str, dict[str, Any]]:
    return {
        p.name.split(".")[0]: json.loads(p.read_text()) for p in (run_dir / f"attempt-{attempt}").glob("*.result.json")
    }


def assert_agree(found: dict[str, dict[str, Any]], tasks: int, step: int) -> None:
    assert len(found) == tasks, sorted(found)
    assert {r["step"] for r in found.values()} == {step}
    assert len({r["fingerprint"] for r in found.values()}) == 1, found
    for result in found.values():
        if result.get("temp_checkpoint_dir"):
            assert not os.path.exists(result["temp_checkpoint_dir"]), "a worker's temp checkpoint dir was left"


def test_two_workers_train_checkpoint_and_resume(work: Path) -> None:
    spec = local_spec("two", 2, work / "runs", kind="builtin", steps=40, checkpoint_every=20, log_every=10)
    path = write_spec(work, spec)
    proc = run_launch(["--cluster", str(path)], work)
    assert proc.returncode == 0, proc.stderr + proc.stdout[-3000:]
    run_dir = work / "runs" / "two"
    first = results(run_dir, 0)
    assert_agree(first, 2, 40)
    assert first["worker-0"]["loss"] < first["worker-0"]["first_loss"], "loss did not fall"
    assert (run_dir / "checkpoints" / "ckpt-40.index").exists()
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir() if p.is_dir()) == []
    assert "[worker:1]" in proc.stdout and "[worker:0]" in proc.stdout
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert metrics[-1]["step"] == 40 and all({"loss", "steps_per_s"} <= set(m) for m in metrics)
    assert (run_dir / "model" / "model.keras").exists()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["final_step"] == 40 and summary["state"] == "succeeded"
    assert {t["exit_code"] for t in summary["attempts"][0]["tasks"]} == {0}

    spec["training"]["steps"] = 60
    write_spec(work, spec)
    again = run_launch(["--cluster", str(path)], work)
    assert again.returncode == 0, again.stderr
    second = results(run_dir, 1)  # a new launch gets the next attempt directory
    assert_agree(second, 2, 60)
    assert {r["start_step"] for r in second.values()} == {40}, "the second launch did not resume"
    assert (run_dir / "attempt-0" / "worker-0.log").exists(), "evidence of the first launch was overwritten"


def test_example_spec_three_workers(work: Path) -> None:
    proc = run_launch(["--cluster", str(REPO / "cluster.example.json"), "--run-root", str(work / "runs")], work)
    assert proc.returncode == 0, proc.stderr
    run_dir = work / "runs" / "example"
    assert_agree(results(run_dir, 0), 3, 300)
    assert "every replica has weights" in proc.stderr


def test_worker_exit_mid_training_stops_everyone_fast(work: Path) -> None:
    path = write_spec(work, local_spec("crash", 3, work / "runs", kind="builtin", steps=100000, checkpoint_every=1000))
    log = work / "launch.out"
    with open(log, "w") as handle:
        proc = subprocess.Popen(
            launch_cmd("--cluster", str(path), "--inject", "exit=3:worker:1@step=30"),
            cwd=work,
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
        code = proc.wait(timeout=240)
    text = log.read_text()
    assert code == 1, text[-3000:]
    assert "root cause: worker:1 on localhost" in text and "exit code 3" in text
    summary = json.loads((work / "runs" / "crash" / "summary.json").read_text())
    assert summary["first_failure"]["known_cause"]["see"].endswith("#an-injected-fault"), summary["first_failure"]
    tasks = {t["name"]: t for t in summary["attempts"][0]["tasks"]}
    failed_at = tasks["worker:1"]["ended_at"]
    last_exit = max(t["ended_at"] for t in tasks.values())
    assert last_exit - failed_at < 5, f"the gang took {last_exit - failed_at:.1f}s to stop"
    assert not processes_mentioning(str(work))


def test_sigint_during_training_stops_every_worker(work: Path) -> None:
    path = write_spec(work, local_spec("int", 2, work / "runs", kind="builtin", steps=100000, checkpoint_every=1000))
    log = work / "launch.out"
    with open(log, "w") as handle:
        proc = subprocess.Popen(launch_cmd("--cluster", str(path)), cwd=work, stdout=handle, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while "step 20/" not in log.read_text():
            assert time.monotonic() < deadline and proc.poll() is None, log.read_text()[-2000:]
            time.sleep(0.1)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
    assert code == 130
    assert time.monotonic() - sent < 5 + 3  # grace_period_s (5) + SIGKILL and reaping
    assert not processes_mentioning(str(work))


def test_user_function_target_runs_inside_the_strategy(work: Path) -> None:
    spec = local_spec("fn", 2, work / "runs", kind="function", target="user_fns:tiny", steps=5)
    proc = run_launch(["--cluster", str(write_spec(work, spec))], work)
    assert proc.returncode == 0, proc.stderr
    found = results(work / "runs" / "fn", 0)
    assert {r["replicas_summed"] for r in found.values()} == {2.0}
    assert [found[k]["is_chief"] for k in sorted(found)] == [True, False]


def test_uncaught_exception_is_the_named_root_cause(work: Path) -> None:
    spec = local_spec("boom", 2, work / "runs", kind="function", target="user_fns:boom")
    proc = run_launch(["--cluster", str(write_spec(work, spec))], work)
    assert proc.returncode == 1
    assert "root cause: worker:1 on localhost" in proc.stderr
    assert "ValueError: bad batch shape (7, 3)" in proc.stderr
    error = json.loads((work / "runs" / "boom" / "attempt-0" / "worker-1.error.json").read_text())
    assert error["type"] == "ValueError" and "user_fns.py" in error["traceback"] and error["time"] > 0
    summary = json.loads((work / "runs" / "boom" / "summary.json").read_text())
    assert summary["first_failure"]["error"]["message"] == "bad batch shape (7, 3)"


def test_bad_function_target_is_fatal_exit_2(work: Path) -> None:
    """A function the preflight cannot rule out (a star import may bring it) and that is not there."""
    (work / "star_fns.py").write_text("from user_fns import *\n")
    spec = local_spec("nofn", 1, work / "runs", kind="function", target="star_fns:missing")
    spec["restart"]["max_restarts"] = 3
    proc = run_launch(["--cluster", str(write_spec(work, spec))], work)
    assert proc.returncode == 1
    summary = json.loads((work / "runs" / "nofn" / "summary.json").read_text())
    assert len(summary["attempts"]) == 1 and summary["attempts"][0]["kind"] == "fatal"
    assert "training.target: cannot load 'star_fns:missing'" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and "File " not in proc.stderr  # none of the frames are the user's


def test_sigint_just_after_the_gang_joined_saves_and_leaves_without_the_grace_period(work: Path) -> None:
    """A stop between the strategy's start and the training loop's preemption handler (TensorFlow's own
    notifier records the SIGTERM and nothing acts on it) used to train on until SIGKILL."""
    spec = local_spec("early", 2, work / "runs", kind="builtin", steps=100000, checkpoint_every=1000, log_every=100)
    spec["restart"]["grace_period_s"] = 60
    path = write_spec(work, spec)
    proc = subprocess.Popen(
        launch_cmd("--cluster", str(path), "--plain", "-v"),
        cwd=work,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    said = []
    for line in proc.stdout:  # the first task's "joined" line: the strategy is up, training not yet begun
        said.append(line)
        if "joined:" in line:
            break
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    said += proc.stdout.readlines()
    code = proc.wait(timeout=90)
    text = "".join(said)
    assert code == 130, text[-3000:]
    assert time.monotonic() - sent < 30, "the tasks were left to their grace period and SIGKILL"
    assert text.count("preempted; checkpoint saved, leaving with exit code 42") == 2, text[-3000:]
    assert "SIGTERM came before training started" in text
    assert not processes_mentioning(str(work))
