"""NCCL and TensorFlow GPU settings in the spec's env reach every task unchanged, on every transport.

The plan merges the cluster's env and the host's; SSH hosts get it in the header sent over the
channel (the task's and its warm spare's), and Slurm steps in the table on the step's stdin.
None of it ever reaches a command line.
"""

from __future__ import annotations

import json

import pytest

from launcher.agent import task_runner
from launcher.agent.bootstrap import remote_command
from launcher.plan import LaunchPlan, PlanInputs, build_plan
from launcher.spec import parse_spec
from launcher.transport.standby import standby_header, task_header

GPU_ENV = {
    "NCCL_SOCKET_IFNAME": "eth0",
    "NCCL_DEBUG": "INFO",
    "NCCL_DEBUG_SUBSYS": "INIT,NET",
    "NCCL_IB_HCA": "mlx5_0:1,mlx5_1:1",
    "NCCL_IB_DISABLE": "0",
    "NCCL_IB_GID_INDEX": "3",
    "TF_FORCE_GPU_ALLOW_GROWTH": "true",
}
INPUTS = PlanInputs(run_dir="/runs/g", attempt=0, launcher_python="/usr/bin/python3", launcher_cwd="/work")


def fleet_plan() -> LaunchPlan:
    spec = parse_spec(
        {
            "name": "g",
            "env": GPU_ENV,
            "hosts": [
                {"address": "gpu-a", "chief": True, "workers": 1, "gpus": [0, 1], "ports": [6000, 6001]},
                {
                    "address": "gpu-b",
                    "workers": 2,
                    "evaluator": True,
                    "gpus": [0, 1],
                    "ports": [6000, 6001, 6002],
                    "env": {"NCCL_SOCKET_IFNAME": "ens5"},  # this host names its interface otherwise
                },
            ],
        }
    )
    return build_plan(spec, INPUTS)


def test_every_task_gets_the_gpu_settings_with_the_hosts_own_winning() -> None:
    plan = fleet_plan()
    for task in plan.tasks:
        expected = {**GPU_ENV, "NCCL_SOCKET_IFNAME": "ens5" if task.host == "gpu-b" else "eth0"}
        assert {key: task.env[key] for key in GPU_ENV} == expected, task.name


def test_ssh_sends_them_over_the_channel_and_never_on_the_command_line() -> None:
    for task in fleet_plan().tasks:
        header = task_header(task, 15.0)
        assert {key: header["env"][key] for key in GPU_ENV} == {key: task.env[key] for key in GPU_ENV}
        spare = standby_header(task, 15.0)["standby"]["env"]  # a warm spare starts with them already set
        assert {key: spare[key] for key in GPU_ENV} == {key: task.env[key] for key in GPU_ENV}
        assert "CUDA_VISIBLE_DEVICES" not in spare, "a spare learns its GPUs with its task"
        command = remote_command(task.python, stdlib_only=True)
        assert not any(value in command for value in GPU_ENV.values() if len(value) > 1)


def test_a_slurm_step_keeps_them_and_maps_gpu_slots_through_its_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    tasks = fleet_plan().tasks
    table = json.loads(json.dumps({"tasks": [{"argv": t.argv, "cwd": t.cwd, "env": t.env} for t in tasks]}))
    monkeypatch.setenv("SLURM_PROCID", "3")  # worker:2 on gpu-b, GPU slot 1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6,7")
    monkeypatch.delenv("SLURMD_NODENAME", raising=False)
    entry, rank = task_runner._own_header(table)
    assert rank == "3" and tasks[3].name == "worker:2"
    assert {key: entry["env"][key] for key in GPU_ENV} == {**GPU_ENV, "NCCL_SOCKET_IFNAME": "ens5"}
    assert entry["env"]["CUDA_VISIBLE_DEVICES"] == "7"
