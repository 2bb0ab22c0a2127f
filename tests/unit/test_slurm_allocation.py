"""The allocation as a host list: what each node runs, and the errors outside an allocation."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from launcher.cli.main import main
from launcher.common.errors import UsageError
from launcher.slurm.allocation import Allocation, read_allocation
from launcher.slurm.submit import batch_script
from launcher.spec.load import parse_spec

NODES = Allocation("7", ["n1", "n2"], ["10.0.0.1", "10.0.0.2"], tasks_per_node=None, gpus_on_node=None, restart_count=0)


def test_outside_an_allocation_the_error_says_how_to_get_one(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UsageError, match="not inside a Slurm allocation.*launch slurm submit"):
        read_allocation({})
    assert main(["--cluster", "missing.json", "--slurm"]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_each_node_is_a_host_with_the_specs_layout() -> None:
    spec = parse_spec(
        {"name": "r", "slurm": {"tasks_per_node": 2, "chief": True, "port": 31000}}, hosts_from=NODES.hosts
    )
    assert [h.address for h in spec.hosts] == ["10.0.0.1", "10.0.0.2"]
    assert [h.task_count for h in spec.hosts] == [3, 2]  # the chief rides on the first node
    assert spec.hosts[0].ports == [31000, 31001, 31002] and spec.hosts[1].ports == [31000, 31001]


def test_one_worker_per_gpu_needs_gpus_in_the_allocation() -> None:
    with pytest.raises(UsageError, match="worker_per_gpu"):
        parse_spec({"name": "r", "slurm": {"worker_per_gpu": True}}, hosts_from=NODES.hosts)
    gpus = Allocation("7", ["n1"], ["10.0.0.1"], tasks_per_node=None, gpus_on_node=4, restart_count=0)
    spec = parse_spec({"name": "r", "slurm": {"worker_per_gpu": True}}, hosts_from=gpus.hosts)
    assert spec.hosts[0].worker_count == 4 and spec.hosts[0].gpus == [0, 1, 2, 3]


def test_the_batch_script_carries_the_slurm_section_and_no_secret() -> None:
    spec = parse_spec(
        {
            "name": "r",
            "env": {"API_TOKEN": "s3cret"},
            "slurm": {
                "nodes": 4,
                "gpus_per_node": 8,
                "worker_per_gpu": True,
                "partition": "gpu",
                "time_limit": "2:00:00",
                "sbatch_options": ["--qos=high"],
                "requeue": False,
            },
        },
        hosts_from=lambda first: None,
    )
    script = batch_script(
        spec, __import__("pathlib").Path("/runs/r/submitted-spec.json"), __import__("pathlib").Path("/runs/r")
    )
    for line in (
        "--nodes=4",
        "--ntasks-per-node=8",
        "--gpus-per-node=8",
        "--partition=gpu",
        "--time=2:00:00",
        "--qos=high",
        "--no-requeue",
        "--signal=TERM@120",
        "--slurm",
    ):
        assert line in script, line
    assert "s3cret" not in script


@pytest.mark.parametrize(
    "said, code, words",
    [
        ("sbatch: error: Batch job submission failed: Invalid partition name specified", 2, "check the spec's slurm"),
        ("sbatch: error: Batch job submission failed: Invalid account or account/partition combination", 2, "sinfo"),
        (
            "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)",
            1,
            "again",
        ),
        ("sbatch: error: Batch job submission failed: Resource temporarily unavailable", 1, "submit it again later"),
        (
            "sbatch: fatal: Could not establish a configuration source",
            1,
            "run `launch slurm submit` on a Slurm login node",
        ),
        (
            "sbatch: error: Batch job submission failed: Job violates accounting/QOS policy (job submit limit, user's "
            "size and/or time limits)",
            2,
            "a QOS submit limit clears as your queued jobs end",
        ),
    ],
)
def test_an_sbatch_refusal_of_the_spec_exits_2_and_a_busy_slurm_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, said: str, code: int, words: str
) -> None:
    from launcher.common.errors import LaunchError
    from launcher.slurm.submit import submit

    fake = tmp_path / "sbatch"  # stands in for Slurm's answer; the refusal of a real one is in tests/integration
    (tmp_path / "said.txt").write_text(said + "\n")
    fake.write_text(f"#!/bin/sh\ncat '{tmp_path / 'said.txt'}' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    with pytest.raises(LaunchError) as caught:
        submit(tmp_path / "job.sh")
    assert caught.value.exit_code == code and said in str(caught.value) and words in str(caught.value)
