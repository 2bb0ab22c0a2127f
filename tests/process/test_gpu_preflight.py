"""GPU hosts as a user meets them: `launch --check` against a stand-in nvidia-smi, and GPU splits refused.

Several host entries on this machine, each with a python that makes its nvidia-smi print another
machine's outputs, stand for a fleet whose hosts differ.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conftest import HELPERS, run_launch, write_spec
from tests.labs.gpu_fakes import FAKE_VAR, install_nvidia_smi, outputs, path_with, python_seeing
from tests.process.test_refusals import snapshot

TASK = str(HELPERS / "task.py")


def gpu_spec(work: Path, hosts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"name": "gpu", "run_root": str(work / "runs"), "hosts": hosts, "restart": {"max_restarts": 0}}


def check(work: Path, path: Path, env: dict[str, str]) -> Any:
    return run_launch(["--cluster", str(path), "--check", "--", "python", TASK, "sleep"], work, timeout=120, env=env)


def test_check_passes_on_a_gpu_host_and_names_its_gpus(work: Path) -> None:
    install_nvidia_smi(work / "bin")
    spec = gpu_spec(work, [{"address": "localhost", "workers": 2, "gpus": [0, 1, 2, 3]}])
    path = write_spec(work, spec)
    before = snapshot(work)
    proc = check(work, path, {"PATH": path_with(work / "bin"), FAKE_VAR: outputs("h100x4-550")})
    assert proc.returncode == 0, proc.stderr
    assert "localhost: GPUs 0, 1, 2, 3 of 4 x NVIDIA H100 80GB HBM3 (driver 550.54.15, CUDA 12.4)" in proc.stdout
    assert "preflight passed" in proc.stdout
    assert snapshot(work) == before, "--check wrote something"


def test_check_names_every_gpu_problem_of_a_fleet_at_once(work: Path) -> None:
    install_nvidia_smi(work / "bin")
    pythons = work / "pythons"
    hosts = [
        {"address": "localhost", "workers": 1, "gpus": [0, 1], "python": str(python_seeing(pythons, "h100x4-550"))},
        {"address": "localhost", "workers": 1, "gpus": [2, 3], "python": str(python_seeing(pythons, "h100x4-535"))},
        # one machine in the spec's eyes: each entry has GPU ids of its own (two entries may not share one)
        {"address": "localhost", "workers": 1, "gpus": [4, 5], "python": str(python_seeing(pythons, "a100x2-535"))},
        {"address": "localhost", "workers": 1, "gpus": [6, 7], "python": str(python_seeing(pythons, "driver-down"))},
    ]
    proc = check(work, write_spec(work, gpu_spec(work, hosts)), {"PATH": path_with(work / "bin")})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    problems = [line for line in proc.stderr.splitlines() if line.startswith("  - ")]
    assert len(problems) == 4, proc.stderr
    assert "localhost: GPU 4, 5 of hosts[2].gpus does not exist there: nvidia-smi lists 2 GPU(s) (0, 1)" in proc.stderr
    assert "localhost: nvidia-smi failed (exit 9: NVIDIA-SMI has failed because it couldn't communicate" in proc.stderr
    assert "NVIDIA driver versions differ across hosts (535.183.01 on localhost; 550.54.15 on localhost)" in proc.stderr
    assert "CUDA versions differ across hosts (12.2 on localhost; 12.4 on localhost)" in proc.stderr


def test_check_without_nvidia_smi_on_a_gpu_host(work: Path) -> None:
    (work / "empty").mkdir()
    spec = gpu_spec(work, [{"address": "localhost", "workers": 1, "gpus": [0]}])
    proc = check(work, write_spec(work, spec), {"PATH": str(work / "empty")})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "localhost: nvidia-smi is not on PATH; install the NVIDIA driver" in proc.stderr, proc.stderr
    assert "(the spec gives this host GPUs 0)" in proc.stderr


def test_hosts_without_gpus_never_run_nvidia_smi(work: Path) -> None:
    (work / "empty").mkdir()
    spec = gpu_spec(work, [{"address": "localhost", "workers": 2}])
    proc = check(work, write_spec(work, spec), {"PATH": str(work / "empty")})
    assert proc.returncode == 0, proc.stderr
    assert "GPUs" not in proc.stdout


def test_an_uneven_gpu_split_is_refused_before_anything_runs(work: Path) -> None:
    spec = gpu_spec(work, [{"address": "localhost", "chief": True, "workers": 2, "gpus": [0, 1, 2, 3]}])
    path = write_spec(work, spec)
    before = snapshot(work)
    proc = run_launch(["--cluster", str(path), "--", "python", TASK, "sleep"], work, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert (
        "$.hosts[0].gpus: 4 GPUs do not divide evenly among this host's 3 training tasks (a chief and 2 workers)"
        in (proc.stderr)
    )
    assert "GPU 3 would stay idle" in proc.stderr and "set workers to 1 or 3" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert snapshot(work) == before, "a refused launch wrote something"


def test_dry_run_shows_each_tasks_gpus(work: Path) -> None:
    tasks = [
        {"type": "chief", "index": 0, "gpus": [0]},
        {"type": "worker", "index": 0, "gpus": [1]},
        {"type": "worker", "index": 1, "gpus": [2]},
        {"type": "evaluator", "index": 0, "gpus": [3]},
    ]
    spec = gpu_spec(work, [{"address": "localhost", "gpus": [0, 1, 2, 3], "tasks": tasks}])
    proc = run_launch(["--cluster", str(write_spec(work, spec)), "--dry-run", "--json"], work, timeout=60)
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert {t["name"]: t["env"]["CUDA_VISIBLE_DEVICES"] for t in plan["tasks"]} == {
        "chief:0": "0",
        "worker:0": "1",
        "worker:1": "2",
        "evaluator:0": "3",
    }
    text = run_launch(["--cluster", str(write_spec(work, spec)), "--dry-run"], work, timeout=60)
    assert "  CUDA_VISIBLE_DEVICES=3" in text.stdout
