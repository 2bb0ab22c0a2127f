"""NCCL and TensorFlow GPU settings in the spec's env reach every task unchanged, on every transport.

The plan merges the cluster's env and the host's; each host's agent gets it in the commands sent
over its channel (for the task and its warm spare), whatever the medium. None of it ever reaches
a command line.
"""

from __future__ import annotations

import pytest

from launcher.agent.bootstrap import remote_command
from launcher.agent.main import _gpu_slots
from launcher.plan import LaunchPlan, PlanInputs, build_plan
from launcher.spec.load import parse_spec
from launcher.transport.payload import standby_command, start_command

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


def _agent_env(command: dict, entry: dict) -> dict:
    """What an agent puts together for one task from a start or standby command."""
    return {**command["env"], **entry["env"]}


def test_agents_get_them_over_the_channel_and_never_on_the_command_line() -> None:
    plan = fleet_plan()
    for host in ("gpu-a", "gpu-b"):
        tasks = [task for task in plan.tasks if task.host == host]
        start = start_command(tasks, list(range(len(tasks))), {})
        spares = standby_command(tasks, list(range(len(tasks))))  # a warm spare starts with them already set
        for task, entry, spare in zip(tasks, start["tasks"], spares["tasks"], strict=True):
            expected = {key: task.env[key] for key in GPU_ENV}
            assert {key: _agent_env(start, entry)[key] for key in GPU_ENV} == expected
            assert {key: _agent_env(spares, spare)[key] for key in GPU_ENV} == expected
            assert _agent_env(start, entry).get("CUDA_VISIBLE_DEVICES") == task.env.get("CUDA_VISIBLE_DEVICES")
        command = remote_command(tasks[0].python)
        assert not any(value in command for value in GPU_ENV.values() if len(value) > 1)


def test_a_slurm_step_maps_gpu_slots_through_its_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    task = fleet_plan().tasks[3]  # worker:2 on gpu-b, GPU slot 1
    assert task.name == "worker:2" and task.env["CUDA_VISIBLE_DEVICES"] == "1"
    monkeypatch.setenv("SLURM_STEP_ID", "0")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6,7")
    env = dict(task.env)
    _gpu_slots(env)
    assert env["CUDA_VISIBLE_DEVICES"] == "7"
    assert {key: env[key] for key in GPU_ENV} == {**GPU_ENV, "NCCL_SOCKET_IFNAME": "ens5"}
