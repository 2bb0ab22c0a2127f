"""How a host's GPUs are split among its tasks: evenly or per task, never leaving one idle or shared silently."""

from __future__ import annotations

from typing import Any

import pytest

from launcher.common.errors import SpecError, UsageError
from launcher.plan import PlanInputs, build_plan
from launcher.slurm.allocation import Allocation
from launcher.spec.load import parse_spec

INPUTS = PlanInputs(run_dir="/runs/g", attempt=0, launcher_python="/usr/bin/python3", launcher_cwd="/work")
PORTS = {f"{kind}:{i}": 6000 + 10 * k + i for k, kind in enumerate(("chief", "worker", "evaluator")) for i in range(8)}


def host(**fields: Any) -> dict[str, Any]:
    count = fields.pop("count", None) or (fields.get("workers") or 1) + bool(fields.get("chief"))
    return {"address": "localhost", "ports": list(range(5000, 5000 + count)), **fields}


def problems(*hosts: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as caught:
        parse_spec({"name": "g", "hosts": list(hosts)})
    return str(caught.value)


def visible(*hosts: dict[str, Any]) -> dict[str, str | None]:
    spec = parse_spec({"name": "g", "hosts": list(hosts)})
    plan = build_plan(spec, PlanInputs("/runs/g", 0, "/usr/bin/python3", "/work", PORTS))  # port 0: chosen
    return {t.name: t.env.get("CUDA_VISIBLE_DEVICES") for t in plan.tasks}


def test_a_chief_and_two_workers_on_four_gpus_is_refused_naming_the_idle_gpu() -> None:
    text = problems(host(chief=True, workers=2, gpus=[0, 1, 2, 3]))
    assert (
        "$.hosts[0].gpus: 4 GPUs do not divide evenly among this host's 3 training tasks (a chief and 2 workers): "
        "each would get 1 and GPU 3 would stay idle. To use every GPU, set workers to 1 or 3 (the chief trains too "
        "and needs GPUs of its own); or list only the GPUs to use"
    ) in text


def test_three_workers_on_eight_gpus_names_every_idle_gpu_and_worker_per_gpu() -> None:
    text = problems(host(workers=3, gpus=list(range(8))))
    assert "each would get 2 and GPUs 6, 7 would stay idle" in text
    assert "set workers to 1, 2, 4 or 8, or set worker_per_gpu: true (one worker per GPU)" in text


def test_fewer_gpus_than_training_tasks_is_refused_instead_of_shared() -> None:
    text = problems(host(workers=3, gpus=[0, 1]))
    assert "2 GPU(s) for this host's 3 training tasks (3 workers): tasks would share a GPU, which fails" in text
    assert "NCCL does not run two ranks on one GPU" in text and "set workers to 1 or 2" in text


def test_worker_per_gpu_with_a_chief_on_the_host_says_to_count_the_chief() -> None:
    text = problems(host(chief=True, worker_per_gpu=True, gpus=[0, 1, 2], count=4))
    assert "drop worker_per_gpu and set workers to 2 (the chief trains too and needs a GPU of its own)" in text


def test_explicit_tasks_without_their_own_gpus_get_the_same_rule() -> None:
    tasks = [{"type": "chief", "index": 0, "port": 5000}, {"type": "worker", "index": 0, "port": 5001}]
    text = problems({"address": "localhost", "tasks": [*tasks, {"type": "worker", "index": 1}], "gpus": [0, 1, 2, 3]})
    assert "(chief:0, worker:0, worker:1): each would get 1 and GPU 3 would stay idle" in text
    assert "give each task its own GPUs (tasks[].gpus)" in text


@pytest.mark.parametrize(
    "fields, expected",
    [
        ({"workers": 2, "gpus": [0, 1, 2, 3]}, ["0,1", "2,3"]),
        ({"chief": True, "workers": 1, "gpus": [4, 5, 6, 7]}, ["4,5", "6,7"]),
        ({"chief": True, "workers": 3, "gpus": [0, 1, 2, 3], "evaluator": True, "count": 5}, ["0", "1", "2", "3", ""]),
        ({"workers": 2, "gpus": []}, ["", ""]),
    ],
)
def test_even_splits_still_work(fields: dict[str, Any], expected: list[str]) -> None:
    assert list(visible(host(**fields)).values()) == expected


def test_each_task_may_name_its_own_gpus_and_the_evaluator_may_take_one() -> None:
    tasks = [
        {"type": "chief", "index": 0, "gpus": [3]},
        {"type": "worker", "index": 0, "gpus": [1]},
        {"type": "worker", "index": 1, "gpus": [0]},
        {"type": "evaluator", "index": 0, "gpus": [2]},
    ]
    assert visible({"address": "localhost", "tasks": tasks, "gpus": [0, 1, 2, 3]}) == {
        "chief:0": "3",
        "worker:0": "1",
        "worker:1": "0",
        "evaluator:0": "2",
    }
    # the host's gpus may be left out: then they are the tasks' together, and an unlisted evaluator gets none
    tasks[3] = {"type": "evaluator", "index": 0}
    assert visible({"address": "localhost", "tasks": tasks})["evaluator:0"] == ""


def test_per_task_gpus_must_be_the_hosts_each_to_one_task_and_all_used() -> None:
    tasks = [
        {"type": "chief", "index": 0, "gpus": [0]},
        {"type": "worker", "index": 0, "gpus": [0, 5]},
        {"type": "worker", "index": 1},
    ]
    text = problems({"address": "localhost", "tasks": tasks, "gpus": [0, 1, 2, 3]})
    assert "$.hosts[0].tasks[1].gpus: GPU 5 not in this host's gpus [0, 1, 2, 3]" in text
    assert "$.hosts[0].tasks[1].gpus: GPU 0 is also given to tasks[0]; a GPU belongs to one task" in text
    assert "$.hosts[0].tasks[2].gpus: worker:1 has no gpus while other tasks of this host list theirs" in text
    assert "$.hosts[0].gpus: GPUs 1, 2, 3 given to no task, so idle" in text
    assert "$.hosts[0].tasks[0].gpus" in problems(
        {"address": "localhost", "tasks": [{"type": "worker", "index": 0, "gpus": []}]}
    )


def test_every_training_task_of_the_cluster_gets_as_many_gpus() -> None:
    text = problems(
        {"address": "gpu-a", "workers": 1, "gpus": [0, 1], "ports": [5000]},
        {"address": "gpu-b", "workers": 2, "gpus": [0, 1], "ports": [5000, 5001]},
    )
    assert "$.hosts: training tasks get different numbers of GPUs (1 on hosts[1]; 2 on hosts[0])" in text
    assert "all-reduce group is workers x devices per worker" in text
    tasks = [{"type": "chief", "index": 0, "gpus": [0]}, {"type": "worker", "index": 0, "gpus": [1, 2]}]
    assert "(1 on hosts[0].tasks[0]; 2 on hosts[0].tasks[1])" in problems({"address": "localhost", "tasks": tasks})
    # a CPU-only host among GPU hosts: 0 GPUs is a different number too
    assert "(0 on hosts[1]; 1 on hosts[0])" in problems(
        {"address": "gpu-a", "workers": 1, "gpus": [0], "ports": [5000]},
        {"address": "gpu-b", "workers": 1, "gpus": [], "ports": [5000]},
    )
    # hosts that list no gpus are not counted: what their tasks see is the machine's business
    assert visible(
        {"address": "gpu-a", "workers": 1, "gpus": [0, 1], "ports": [5000]},
        {"address": "gpu-b", "workers": 1, "ports": [5000]},
    ) == {"worker:0": "0,1", "worker:1": None}


def test_slurm_nodes_whose_gpus_do_not_split_evenly_are_refused_in_slurm_words() -> None:
    node = Allocation("7", ["n1", "n2"], ["10.0.0.1", "10.0.0.2"], tasks_per_node=3, gpus_on_node=4, restart_count=0)
    with pytest.raises(UsageError, match="3 task.s. per node do not split a node's 4 GPUs evenly"):
        parse_spec({"name": "r", "slurm": {}}, hosts_from=node.hosts)
    with pytest.raises(UsageError, match="slurm.chief with GPUs"):
        parse_spec({"name": "r", "slurm": {"chief": True, "worker_per_gpu": True}}, hosts_from=node.hosts)
    spec = parse_spec({"name": "r", "slurm": {"tasks_per_node": 2}}, hosts_from=node.hosts)
    assert [t.env["CUDA_VISIBLE_DEVICES"] for t in build_plan(spec, INPUTS).tasks] == ["0,1", "2,3", "0,1", "2,3"]


def test_a_slurm_spec_that_its_gpus_would_refuse_is_refused_before_it_is_submitted() -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec({"name": "r", "slurm": {"nodes": 4, "gpus_per_node": 8, "chief": True, "tasks_per_node": 3}})
    assert sorted(p.path for p in caught.value.problems) == ["$.slurm.chief", "$.slurm.tasks_per_node"]
    with pytest.raises(SpecError, match=r"\$\.slurm\.worker_per_gpu: gpus_per_node is 0"):
        parse_spec({"name": "r", "slurm": {"gpus_per_node": 0, "worker_per_gpu": True}})
    parse_spec({"name": "r", "slurm": {"gpus_per_node": 8, "tasks_per_node": 4}}, hosts_from=lambda first: None)


def test_a_slurm_dry_run_says_its_nodes_are_reached_by_srun(capsys: pytest.CaptureFixture[str]) -> None:
    from launcher.cli.launch_command import dry_run

    node = Allocation("7", ["n1", "n2"], ["10.0.0.1", "10.0.0.2"], tasks_per_node=1, gpus_on_node=0, restart_count=0)
    plan = build_plan(parse_spec({"name": "r", "slurm": {}}, hosts_from=node.hosts), INPUTS)
    dry_run(plan, False, "srun")
    headers = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[worker")]
    assert len(headers) == 2 and all("(srun), port" in line for line in headers), headers


def test_a_machine_listed_twice_gives_each_gpu_to_one_entry() -> None:
    one = {"workers": 1, "gpus": [0]}
    hosts = [{"address": "h1", "ports": [5000], **one}, {"address": "H1", "ports": [5001], **one}]
    with pytest.raises(SpecError, match=r"\$\.hosts\[1\]\.gpus: GPU 0 of H1 is also given to the tasks of hosts\[0\]"):
        parse_spec({"name": "r", "hosts": hosts})
    hosts[1]["gpus"] = [1]
    parse_spec({"name": "r", "hosts": hosts})


def test_a_visible_devices_env_beside_the_gpus_that_set_it_is_refused() -> None:
    hosts = [
        {"address": "h1", "workers": 1, "ports": [5000], "gpus": [0], "env": {"CUDA_VISIBLE_DEVICES": "1"}},
        {"address": "h2", "workers": 1, "ports": [5000], "env": {"CUDA_VISIBLE_DEVICES": "2"}},  # no gpus: its own
    ]
    with pytest.raises(SpecError) as caught:
        parse_spec({"name": "r", "env": {"CUDA_VISIBLE_DEVICES": "3"}, "hosts": hosts})
    assert sorted(p.path for p in caught.value.problems) == [
        "$.env.CUDA_VISIBLE_DEVICES",
        "$.hosts[0].env.CUDA_VISIBLE_DEVICES",
    ]
    del hosts[0]["env"]
    assert visible(*hosts) == {"worker:0": "0", "worker:1": "2"}
