"""The plan is a pure function: golden TF_CONFIGs, per-task env, argv and files."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from launcher.plan import PlanInputs, build_plan, task_slots
from launcher.spec.load import parse_spec
from worker.contract import ENV_PREFIX, UMASK_VAR, TaskEnv

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
INPUTS = PlanInputs(run_dir="/runs/g", attempt=0, launcher_python="/usr/bin/python3", launcher_cwd="/work")

CASES: dict[str, dict[str, Any]] = {
    "1-worker": {"name": "g", "hosts": [{"address": "localhost", "ports": [5000]}]},
    "2-workers": {"name": "g", "hosts": [{"address": "localhost", "workers": 2, "ports": [5000, 5001]}]},
    "3-workers": {"name": "g", "hosts": [{"address": "localhost", "workers": 3, "ports": [5000, 5001, 5002]}]},
    "chief-1-worker": {
        "name": "g",
        "hosts": [{"address": "localhost", "chief": True, "workers": 1, "ports": [5000, 5001]}],
    },
    "chief-2-workers-2-hosts": {
        "name": "g",
        "hosts": [
            {"address": "node-a", "chief": True, "workers": 1, "ports": [6000, 6001]},
            {"address": "node-b", "workers": 1, "ports": [6000]},
        ],
    },
    "explicit-tasks-3": {
        "name": "g",
        "hosts": [
            {
                "address": "node-a",
                "tasks": [{"type": "worker", "index": 1, "port": 7001}, {"type": "chief", "index": 0, "port": 7000}],
            },
            {"address": "node-b", "tasks": [{"type": "worker", "index": 0, "port": 7000}]},
        ],
    },
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_tf_configs(case: str) -> None:
    plan = build_plan(parse_spec(CASES[case]), INPUTS)
    actual = {task.name: task.tf_config for task in plan.tasks}
    path = GOLDEN / f"{case}.json"
    if UPDATE:
        path.write_text(json.dumps(actual, indent=2, sort_keys=True) + "\n")
    assert actual == json.loads(path.read_text())
    clusters = {json.dumps(task.tf_config["cluster"], sort_keys=True) for task in plan.tasks}
    assert len(clusters) == 1, "every task must see the same cluster"
    for task in plan.tasks:
        assert json.loads(task.task_env["TF_CONFIG"]) == task.tf_config


def test_plan_is_pure_and_repeatable() -> None:
    spec = parse_spec(CASES["chief-2-workers-2-hosts"])
    assert build_plan(spec, INPUTS) == build_plan(spec, INPUTS)


def test_port_zero_takes_the_chosen_port_and_must_be_resolved() -> None:
    spec = parse_spec({"name": "g", "hosts": [{"address": "localhost", "workers": 2}]})
    with pytest.raises(ValueError, match="worker:0, worker:1"):
        build_plan(spec, INPUTS)
    plan = build_plan(spec, PlanInputs("/runs/g", 0, "/py", "/work", {"worker:0": 4100, "worker:1": 4101}))
    assert plan.tasks[1].tf_config["cluster"]["worker"] == ["localhost:4100", "localhost:4101"]


def test_env_argv_and_files_per_task() -> None:
    spec = parse_spec(
        {
            "name": "g",
            "env": {"A": "1", "B": "cluster"},
            "checkpoint_dir": "ckpt",
            "hosts": [{"address": "localhost", "workers": 2, "ports": [5000, 5001], "env": {"B": "host"}}],
        }
    )
    plan = build_plan(spec, PlanInputs("/runs/g", 3, "/venv/bin/python", "/work"))
    task = plan.tasks[1]
    assert task.argv == ["/venv/bin/python", "-P", "-m", "worker"]
    assert task.env["A"] == "1" and task.env["B"] == "host"
    assert task.env["TFLAUNCH_ATTEMPT"] == "3"
    assert task.env["TFLAUNCH_TASK"] == "worker:1"
    assert task.env["TFLAUNCH_CHECKPOINT_DIR"] == "/work/ckpt"
    assert task.log_path == "/runs/g/attempt-3/worker-1.log"
    assert task.result_path == "/runs/g/attempt-3/worker-1.result.json"
    assert task.cwd == "/work"


def test_each_tasks_contract_variables_are_those_task_env_derives() -> None:
    """The plan derives what the tasks share once and names each task in it: the result must be
    TaskEnv.for_task's, in its order."""
    spec = parse_spec(
        {
            "name": "g",
            "training": {"kind": "builtin", "steps": 7},
            "hosts": [
                {"address": "node-a", "chief": True, "workers": 2, "ports": [6000, 6001, 6002]},
                {"address": "node-b", "workers": 1, "evaluator": True, "ports": [6000, 6001]},
            ],
        }
    )
    inputs = PlanInputs("/runs/g", 2, "/py", "/work", faults={"worker:1": "kill:5:1"})
    plan = build_plan(spec, inputs)
    for task in plan.tasks:
        expected = TaskEnv.for_task(
            run_name="g",
            run_dir="/runs/g",
            attempt=2,
            task=task.name,
            checkpoint_dir=plan.checkpoint_dir,
            training=spec.training.model_dump(mode="json"),
            preemption_exit_code=spec.restart.preemption_exit_code,
            fault=inputs.faults.get(task.name),
        ).to_env()
        ours = [(k, v) for k, v in task.env.items() if k.startswith(ENV_PREFIX) and k != UMASK_VAR]
        assert ours == list(expected.items()), task.name
        assert task.env[UMASK_VAR] == "077"  # read by the host's agent, not by the task


def test_user_command_replaces_bare_python_with_the_hosts_python() -> None:
    spec = parse_spec(
        {
            "name": "g",
            "python": "/opt/py/bin/python",
            "training": {"kind": "command", "argv": ["python", "train.py", "--python"]},
            "hosts": [{"address": "localhost", "ports": [5000]}],
        }
    )
    plan = build_plan(spec, INPUTS)
    assert plan.tasks[0].argv == ["/opt/py/bin/python", "train.py", "--python"]


def test_remote_defaults_and_labels() -> None:
    spec = parse_spec(CASES["chief-2-workers-2-hosts"])
    plan = build_plan(spec, INPUTS)
    assert [t.label for t in plan.tasks] == ["chief:0@node-a", "worker:0@node-a", "worker:1@node-b"]
    assert plan.tasks[0].argv[0] == "python3"


@pytest.mark.parametrize(
    "gpus, tasks, expected",
    [
        ([0, 1, 2, 3], 2, ["0,1", "2,3"]),
        ([0, 1, 2, 3], 4, ["0", "1", "2", "3"]),
        ([4, 5], 1, ["4,5"]),
    ],
)
def test_gpus_are_split_evenly_and_disjointly(gpus: list[int], tasks: int, expected: list[str]) -> None:
    spec = parse_spec(
        {
            "name": "g",
            "hosts": [
                {"address": "localhost", "workers": tasks, "gpus": gpus, "ports": list(range(5000, 5000 + tasks))}
            ],
        }
    )
    plan = build_plan(spec, INPUTS)
    assert [t.env["CUDA_VISIBLE_DEVICES"] for t in plan.tasks] == expected


def test_slots_order_chief_first_then_workers_by_index() -> None:
    spec = parse_spec(CASES["explicit-tasks-3"])
    assert [s.name for s in task_slots(spec)] == ["chief:0", "worker:0", "worker:1"]


def test_evaluator_gets_a_tf_config_of_its_own_and_stays_out_of_the_cluster() -> None:
    spec = parse_spec(
        {"name": "g", "hosts": [{"address": "localhost", "workers": 2, "evaluator": True, "ports": [5000, 5001, 5002]}]}
    )
    plan = build_plan(spec, INPUTS)
    evaluator = plan.tasks[-1]
    assert evaluator.name == "evaluator:0" and evaluator.sidecar
    assert evaluator.tf_config == {
        "cluster": {"evaluator": ["localhost:5002"]},
        "task": {"type": "evaluator", "index": 0},
    }
    assert all(t.tf_config["cluster"] == {"worker": ["localhost:5000", "localhost:5001"]} for t in plan.tasks[:2])
    assert not any(t.sidecar for t in plan.tasks[:2])


def test_one_worker_per_gpu_or_one_worker_with_all_gpus() -> None:
    per_gpu = parse_spec(
        {
            "name": "g",
            "hosts": [
                {
                    "address": "localhost",
                    "gpus": [0, 1, 2],
                    "worker_per_gpu": True,
                    "evaluator": True,
                    "ports": [5000, 5001, 5002, 5003],
                }
            ],
        }
    )
    plan = build_plan(per_gpu, INPUTS)
    assert [t.env["CUDA_VISIBLE_DEVICES"] for t in plan.tasks] == ["0", "1", "2", ""]
    all_gpus = parse_spec({"name": "g", "hosts": [{"address": "localhost", "gpus": [0, 1, 2, 3], "ports": [5000]}]})
    assert build_plan(all_gpus, INPUTS).tasks[0].env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    cpu = parse_spec({"name": "g", "hosts": [{"address": "localhost", "ports": [5000]}]})
    assert "CUDA_VISIBLE_DEVICES" not in build_plan(cpu, INPUTS).tasks[0].env


def test_fit_mode_selects_legacy_keras() -> None:
    spec = parse_spec({"name": "g", "training": {"kind": "fit"}, "hosts": [{"address": "localhost", "ports": [5000]}]})
    assert build_plan(spec, INPUTS).tasks[0].env["TF_USE_LEGACY_KERAS"] == "1"


def test_a_tilde_in_run_root_and_checkpoint_dir_is_the_launchers_home_not_a_directory_named_tilde(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOME", "/home/someone")
    hosts = [{"address": "localhost", "ports": [5000]}]
    spec = parse_spec({"name": "g", "hosts": hosts, "run_root": "~/runs", "checkpoint_dir": "~/ckpt/g"})
    assert spec.run_root == "/home/someone/runs"
    assert build_plan(spec, INPUTS).checkpoint_dir == "/home/someone/ckpt/g"
    relative = parse_spec({"name": "g", "hosts": hosts, "checkpoint_dir": "ckpt/~g"})  # only a leading ~ is a home
    assert build_plan(relative, INPUTS).checkpoint_dir == "/work/ckpt/~g"
