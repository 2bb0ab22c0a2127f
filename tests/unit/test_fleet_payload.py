"""A simulated fleet of 256 hosts x 8 tasks: what each host's agent is sent, with no process.

The packed cluster unpacks to the plan's, the agent rebuilds every task's TF_CONFIG as the plan has
it, one host is sent far less than 1 MiB, and the SSH traffic grows linearly with the tasks.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from launcher.agent.bootstrap import agent_line
from launcher.agent.cluster import tf_config, unpack
from launcher.plan import LaunchPlan, PlanInputs, TaskLaunch, build_plan
from launcher.spec.load import parse_spec
from launcher.spec.models import ClusterSpec
from launcher.transport.payload import cluster_command, size, start_command

PER_HOST = 8
INPUTS = PlanInputs(run_dir="/shared/runs/fleet", attempt=0, launcher_python="/usr/bin/python3", launcher_cwd="/work")


def fleet(hosts: int) -> ClusterSpec:
    """Hosts node001, node002, ... of 8 workers each on ports 8888-8895; the first host also runs
    the chief, the last one the evaluator."""
    entries: list[dict[str, Any]] = []
    for i in range(1, hosts + 1):
        chief, evaluator = i == 1, i == hosts
        ports = list(range(8888, 8888 + PER_HOST + chief + evaluator))
        entries.append(
            {"address": f"node{i:03d}", "workers": PER_HOST, "chief": chief, "evaluator": evaluator, "ports": ports}
        )
    return parse_spec({"name": "fleet", "hosts": entries})


def by_host(plan: LaunchPlan) -> list[list[TaskLaunch]]:
    hosts: dict[int, list[TaskLaunch]] = {}
    for launch in plan.tasks:
        hosts.setdefault(launch.host_index, []).append(launch)
    return [hosts[index] for index in sorted(hosts)]


def wire(command: dict[str, Any]) -> dict[str, Any]:
    """The command as the agent reads it: one JSON line."""
    decoded: dict[str, Any] = json.loads(json.dumps(command))
    return decoded


def ssh_bytes(spec: ClusterSpec, plan: LaunchPlan) -> list[int]:
    """Bytes each host is sent over SSH to start the plan: the agent line, its cluster and start
    commands. Every host has the same liveness timeout and the same cluster, so the same agent line
    and cluster command: each is made once."""
    (liveness,) = {spec.liveness_of(host)[0] for host in spec.hosts}
    shared = len(agent_line(liveness)) + size(cluster_command(plan.tasks[0]))
    ids = itertools.count(1)
    return [shared + size(start_command(host, [next(ids) for _ in host], {})) for host in by_host(plan)]


@pytest.fixture(scope="module")
def spec() -> ClusterSpec:
    return fleet(256)


@pytest.fixture(scope="module")
def plan(spec: ClusterSpec) -> LaunchPlan:
    return build_plan(spec, INPUTS)


def test_the_packed_cluster_unpacks_to_the_plans_cluster(plan: LaunchPlan) -> None:
    assert len(plan.tasks) == 256 * PER_HOST + 2
    cluster = plan.tasks[0].cluster
    assert all(task.cluster is cluster for task in plan.tasks), "one cluster object for the whole plan"
    assert unpack(wire(cluster_command(plan.tasks[0]))["packed"]) == cluster


def test_the_agent_rebuilds_every_tasks_tf_config(plan: LaunchPlan) -> None:
    launches = {task.name: task for task in plan.tasks}
    ids = itertools.count(1)
    rebuilt = set()
    cluster = unpack(wire(cluster_command(plan.tasks[0]))["packed"])  # every host gets this one
    for host in by_host(plan):
        for entry in wire(start_command(host, [next(ids) for _ in host], {}))["tasks"]:
            built = tf_config(cluster, entry["type"], entry["index"], entry.get("address"))
            assert json.loads(built) == launches[entry["name"]].tf_config, entry["name"]
            rebuilt.add(entry["name"])
    assert rebuilt == set(launches)
    assert "evaluator:0" in rebuilt and "chief:0" in rebuilt


def test_one_host_is_sent_less_than_a_mebibyte(spec: ClusterSpec, plan: LaunchPlan) -> None:
    assert max(ssh_bytes(spec, plan)) < 2**20


def test_ssh_traffic_grows_linearly_with_the_tasks(spec: ClusterSpec, plan: LaunchPlan) -> None:
    small_spec = fleet(64)
    small = build_plan(small_spec, INPUTS)
    per_task_small = sum(ssh_bytes(small_spec, small)) / len(small.tasks)
    per_task = sum(ssh_bytes(spec, plan)) / len(plan.tasks)
    assert abs(per_task / per_task_small - 1) < 0.10, (per_task_small, per_task)


def test_ipv4_fleets_pack_to_one_run_across_octets() -> None:
    from launcher.agent.cluster import pack, unpack

    addresses = [f"10.0.{i // 256}.{i % 256}:8888" for i in range(4096)]
    odd = ["10.0.16.0:1", "node1:5", "node2:5", "[::1]:7", "256.1.1.1:3", "01.2.3.4:3"]
    packed = pack({"worker": addresses + odd})
    assert len(packed["worker"]) == 6, "4,096 consecutive IPv4 addresses are one run"
    assert unpack(packed) == {"worker": addresses + odd}
