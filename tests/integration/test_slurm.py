"""`launch slurm submit` against a real Slurm: a controller and two node daemons, each node a
network namespace with its own address, so TF_CONFIG spans two addresses (tests/labs/slurm.py)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.conftest import launch_cmd, write_spec
from tests.integration.test_train_local import assert_agree, results
from tests.labs.sshd import python3_on_path

STEPS = 60


@pytest.fixture(scope="module")
def slurm() -> Iterator[Any]:
    from tests.labs.slurm import lab_or_skip

    yield from lab_or_skip(2)


@pytest.fixture
def cluster(slurm: Any) -> Iterator[Any]:
    """The module's cluster; after each test no job is left and nothing runs in a node."""
    yield slurm
    from tests.labs.slurm import cancel_left_jobs

    queued = cancel_left_jobs(slurm)
    assert not queued, f"jobs left in the queue: {queued}"
    deadline = time.monotonic() + 30
    while slurm.node_processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not slurm.node_processes(), f"processes left in the nodes: {slurm.node_processes()}"


def _spec(work: Path, name: str, log_every: int = 10, steps: int = STEPS, **slurm: Any) -> dict[str, Any]:
    return {
        "name": name,
        "run_root": str(work / "runs"),
        "env": {"TF_CPP_MIN_LOG_LEVEL": "2"},
        "training": {"kind": "builtin", "steps": steps, "checkpoint_every": 10, "log_every": log_every},
        "restart": {"max_restarts": 2, "backoff_s": 0, "start_timeout_s": 120},
        "slurm": {"nodes": 2, **slurm},
    }


def _submit(
    cluster: Any, work: Path, spec: dict[str, Any], *extra: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    path = write_spec(work, spec)
    return subprocess.Popen(
        launch_cmd("slurm", "submit", "--cluster", str(path), *extra),
        cwd=work,
        env={**cluster.env(), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _wait_output(proc: subprocess.Popen[str], seen: list[str], text: str, timeout: float = 180) -> None:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    for line in proc.stdout:
        seen.append(line)
        if text in line:
            return
        assert time.monotonic() < deadline, "".join(seen[-40:])
    raise AssertionError(f"{text!r} never came:\n" + "".join(seen[-60:]))


def _finish(proc: subprocess.Popen[str], seen: list[str]) -> str:
    assert proc.stdout is not None
    seen += proc.stdout.readlines()
    assert proc.wait(timeout=240) == 0, "".join(seen[-60:])
    return "".join(seen)


def _uninterrupted(cluster: Any, work: Path) -> str:
    proc = _submit(cluster, work, _spec(work, "straight"), "--wait")
    _finish(proc, [])
    found = results(work / "runs" / "straight", 0)
    assert_agree(found, 2, STEPS)
    return str(next(iter(found.values()))["fingerprint"])


def test_submit_trains_across_two_nodes(cluster: Any, work: Path) -> None:
    spec = _spec(work, "two")
    spec["python"] = "python3"  # a bare name, found on the job's PATH (here a wrapper of the project's python)
    path = {"PATH": f"{python3_on_path(work)}:{os.environ['PATH']}"}
    proc = _submit(cluster, work, spec, "--wait", env=path)
    text = _finish(proc, [])
    assert "submitted Slurm job" in text and "COMPLETED" in text, text[-3000:]
    run_dir = work / "runs" / "two"
    assert_agree(results(run_dir, 0), 2, STEPS)
    summary = json.loads((run_dir / "summary.json").read_text())
    hosts = {task["host"] for task in summary["attempts"][0]["tasks"]}
    assert hosts == {h.address for h in cluster.net.hosts}, "one task per node, each at its node's address"
    assert "joined: 2 task(s)" in (run_dir / "attempt-0" / "worker-1.log").read_text()
    assert (run_dir / "submit.sbatch").read_text().count("--nodes=2") == 1


def test_a_killed_worker_restarts_on_the_same_agents_and_ends_as_an_uninterrupted_run(cluster: Any, work: Path) -> None:
    expected = _uninterrupted(cluster, work)
    proc = _submit(cluster, work, _spec(work, "killed"), "--wait")
    seen: list[str] = []
    _wait_output(proc, seen, "step 20/")
    victims = [
        p
        for pid in cluster.net.hosts[1].task_pids()
        if (p := psutil.Process(pid)).cmdline()[-2:] == ["-m", "worker"] or "worker.main" in " ".join(p.cmdline())
    ]
    assert victims, f"no worker process on node2: {cluster.node_processes()}"
    for victim in victims:
        os.kill(victim.pid, signal.SIGKILL)
    text = _finish(proc, seen)
    run_dir = work / "runs" / "killed"
    assert "restarting every task" in text, text[-3000:]
    found = results(run_dir, 1)
    assert_agree(found, 2, STEPS)
    assert next(iter(found.values()))["fingerprint"] == expected
    assert len(list(run_dir.glob("slurm-hostfile-*"))) == 1, "one srun step of agents serves every attempt"


def test_a_preemption_saves_requeues_and_resumes_without_losing_a_step(cluster: Any, work: Path) -> None:
    # 600 steps: at about 120 steps/s the job must not finish before scancel reaches it (60 steps could)
    steps = 600
    proc = _submit(cluster, work, _spec(work, "preempted", log_every=1, steps=steps), "--wait")
    seen: list[str] = []
    _wait_output(proc, seen, "step 20/")
    job = next(line.split("job ")[1].split(":")[0] for line in seen if "submitted Slurm job" in line)
    cluster.run("scancel", "--signal=TERM", job)
    text = _finish(proc, seen)
    assert "requeueing Slurm job" in text and "requeued 1x" in text, text[-3000:]
    # the stock cred_expire holds the requeued job for 120 s: the follow says so, then that it runs
    held = text.index(f"job {job} is back in the queue")
    assert "cred_expire" in text[held:].splitlines()[0], text[held:][:500]
    assert text.index(f"job {job} is running again") > held
    run_dir = work / "runs" / "preempted"
    before = (run_dir / "attempt-0" / "worker-0.log").read_text()
    done_before = max(int(m) for m in re.findall(r"step (\d+)/", before))
    summary = json.loads((run_dir / "summary.json").read_text())  # the requeued launch's
    last_attempt = max(a["attempt"] for a in summary["attempts"])
    assert last_attempt >= 1, "the requeued job continued the attempt numbering"
    found = results(run_dir, last_attempt)
    assert_agree(found, 2, steps)
    assert done_before < steps, "the preemption came before the end"
    resumed_at = {r["start_step"] for r in found.values()}
    assert len(resumed_at) == 1 and resumed_at.pop() >= done_before, (done_before, found)  # 0 steps lost


def test_a_job_that_cannot_start_fails_by_start_timeout_with_slurms_reason(cluster: Any, work: Path) -> None:
    spec = _spec(work, "never", sbatch_options=["--begin=now+3600"])
    spec["restart"]["start_timeout_s"] = 3
    started = time.monotonic()
    proc = _submit(cluster, work, spec)
    text = _finish_failing(proc)
    assert time.monotonic() - started < 30
    assert "did not start within restart.start_timeout_s=3s" in text and "BeginTime" in text, text
    assert "Traceback" not in text


def _finish_failing(proc: subprocess.Popen[str]) -> str:
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1, out
    return out


def test_a_job_slurm_refuses_exits_2_with_slurms_words_and_queues_nothing(cluster: Any, work: Path) -> None:
    proc = _submit(cluster, work, _spec(work, "nopart", partition="no_such_partition"))
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2, out
    assert "sbatch refused the job" in out and "nvalid partition" in out and "check the spec's slurm section" in out
    assert "Traceback" not in out and "submitted Slurm job" not in out
