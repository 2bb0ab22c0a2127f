"""Simulated fleets: what planning a large fleet costs the launcher, and what it sends the hosts.

No processes and no sockets: the planner (launcher/spec/models.py, launcher/plan.py), the commands a
host's agent is sent (launcher/transport/payload.py) and the input of a Slurm step, for 256 hosts
x 8 tasks and 4,096 hosts x 1 task, and the byte counts for smaller fleets of both shapes.

- Planning runs in a fresh interpreter each time (bench/fleet_plan.py), so its memory is that run's
  alone: seconds to validate and to plan, peak RSS, and its growth over the same interpreter once it
  had imported the planner.
- Over SSH each host is sent the agent line (launcher/agent/bootstrap.py), then its `cluster` and
  `start` commands. Under Slurm every node's agent reads the one input of the step: the agent line
  once, then every node's commands, each addressed to its rank; so one node reads all of it.
- The preflight's probe requests (a few hundred bytes a host) are not counted.

Targets: validate + plan <= 1 s and <= 200 MiB for each of the two fleets; <= 1 MiB sent to one
host; total bytes linear in the tasks (the bytes each added task costs stay within 10%, whatever
the fleet's size).
"""

from __future__ import annotations

import itertools
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.common import ROOT, save, summarize, table
from launcher.agent.bootstrap import agent_line
from launcher.plan import LaunchPlan, PlanInputs, TaskLaunch, build_plan
from launcher.spec.load import parse_spec
from launcher.spec.models import ClusterSpec
from launcher.transport.payload import cluster_command, size, split_start, start_command

FLEETS = ((256, 8), (4096, 1))
SIZES = ((32, 8), (64, 8), (128, 8), (256, 8), (256, 1), (1024, 1), (4096, 1))
FIRST_PORT = 8888
RUN_ROOT = "/shared/runs"
PLAN_S = 1.0
PLAN_MIB = 200.0
HOST_BYTES = 2**20
LINEAR = 0.10  # largest spread of the bytes an added task costs, across the sizes of one shape


def fleet_spec(hosts: int, per_host: int) -> dict[str, Any]:
    """`hosts` remote hosts running `per_host` workers each on explicit ports: named node001,
    node002, ... when they run several tasks, addressed 10.0.x.y when they run one."""
    if per_host > 1:
        width = max(3, len(str(hosts)))
        addresses = [f"node{i:0{width}d}" for i in range(1, hosts + 1)]
    else:
        addresses = [f"10.0.{i // 256}.{i % 256}" for i in range(hosts)]
    ports = list(range(FIRST_PORT, FIRST_PORT + per_host))
    return {
        "name": f"fleet-{hosts}x{per_host}",
        "run_root": RUN_ROOT,
        "hosts": [{"address": address, "workers": per_host, "ports": ports} for address in addresses],
    }


def fleet_name(hosts: int, per_host: int) -> str:
    return f"{hosts:,} x {per_host}"


# ---- planning, in a fresh interpreter per run --------------------------------------------------


def _plan_once(path: Path) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.fleet_plan", str(path)], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return dict(json.loads(done.stdout.splitlines()[-1]))


def _planning(repeats: int) -> dict[str, list[dict[str, float]]]:
    """Every fleet planned `repeats` times, the fleets interleaved (A B A B ...)."""
    runs: dict[str, list[dict[str, float]]] = {fleet_name(*f): [] for f in FLEETS}
    with tempfile.TemporaryDirectory(prefix="tflaunch-bench-fleet-") as directory:
        paths = {}
        for hosts, per_host in FLEETS:
            paths[fleet_name(hosts, per_host)] = path = Path(directory) / f"fleet-{hosts}x{per_host}.json"
            path.write_text(json.dumps(fleet_spec(hosts, per_host), indent=2))
        for _ in range(repeats):
            for name, path in paths.items():
                runs[name].append(_plan_once(path))
    return runs


def planning_medians(runs: list[dict[str, float]]) -> tuple[float, float]:
    """The target's figures of one fleet's planning runs: median seconds to validate and plan, and
    median peak RSS in MiB."""
    plan_s = statistics.median(run["validate_s"] + run["build_s"] for run in runs)
    return plan_s, statistics.median(run["peak_kib"] / 1024 for run in runs)


def _planning_rows(name: str, runs: list[dict[str, float]]) -> list[tuple[str, dict[str, float], str]]:
    def of(key: str) -> list[float]:
        return [run[key] for run in runs]

    plan_s = [run["validate_s"] + run["build_s"] for run in runs]
    peak = [run["peak_kib"] / 1024 for run in runs]
    growth = [(run["peak_kib"] - run["imported_kib"]) / 1024 for run in runs]
    return [
        (f"{name}: import the planner (for scale)", summarize(of("import_s")), "s"),
        (f"{name}: read and decode the JSON file", summarize(of("decode_s")), "s"),
        (f"{name}: validate (parse_spec)", summarize(of("validate_s")), "s"),
        (f"{name}: build_plan", summarize(of("build_s")), "s"),
        (f"{name}: validate + build_plan", summarize(plan_s), "s"),
        (f"{name}: peak RSS of the interpreter", summarize(peak), "MiB"),
        (f"{name}: RSS growth over the imported planner", summarize(growth), "MiB"),
    ]


# ---- bytes on the wire -------------------------------------------------------------------------


@dataclass(frozen=True)
class Traffic:
    """Bytes sent to start one attempt of a fleet."""

    hosts: int
    tasks: int
    agent_line: int  # the agent line (over SSH: to every host; under Slurm: once)
    cluster: int  # one host's `cluster` command (the same for every host)
    largest_start: int  # the largest host's `start` command
    to_one_host: int  # over SSH: agent line + cluster + start, the largest host
    ssh_total: int
    slurm_input: int  # the step's input: the agent line, the cluster and shared settings once, each node's tasks


def _addressed(rank: int) -> int:
    """Bytes the Slurm channel adds to a command: `{"to": RANK, ` in place of its `{`
    (launcher/transport/slurm.py, SlurmMedium._channel)."""
    return len(b'{"to": %d, ' % rank) - 1


def by_host(plan: LaunchPlan) -> dict[int, list[TaskLaunch]]:
    hosts: dict[int, list[TaskLaunch]] = {}
    for launch in plan.tasks:
        hosts.setdefault(launch.host_index, []).append(launch)
    return dict(sorted(hosts.items()))


def traffic(spec: ClusterSpec, plan: LaunchPlan) -> Traffic:
    """What the transport sends for the plan's first attempt (no standbys yet), host by host."""
    (liveness,) = {spec.liveness_of(host)[0] for host in spec.hosts}
    ssh_line = len(agent_line(liveness))
    slurm_line = len(agent_line(liveness, addressed=True))
    first = plan.tasks[0]
    assert all(task.cluster is first.cluster for task in plan.tasks), "one cluster object for the whole plan"
    cluster = size(cluster_command(first))  # what every host is sent: computed once, as it is the same
    ids = itertools.count(1)
    starts = []
    slurm = slurm_line + cluster  # shared commands reach every agent of a step in one copy
    shared_sent: set[str] = set()
    for rank, launches in enumerate(by_host(plan).values()):
        common, start = split_start(start_command(launches, [next(ids) for _ in launches], {}))
        starts.append(size(common) + size(start))
        if common["id"] not in shared_sent:
            shared_sent.add(common["id"])
            slurm += size(common)
        slurm += size(start) + _addressed(rank)
    return Traffic(
        hosts=len(starts),
        tasks=len(plan.tasks),
        agent_line=ssh_line,
        cluster=cluster,
        largest_start=max(starts),
        to_one_host=ssh_line + cluster + max(starts),
        ssh_total=len(starts) * (ssh_line + cluster) + sum(starts),
        slurm_input=slurm,
    )


def _commands_time(plan: LaunchPlan, hosts: int) -> float:
    """Seconds to make the first `hosts` hosts' commands as AgentTransport.start_all does: the
    cluster packed once for all, then each host's start command, split into its shared part."""
    ids = itertools.count(1)
    began = time.perf_counter()
    cluster_command(plan.tasks[0])
    for launches in list(by_host(plan).values())[:hosts]:
        split_start(start_command(launches, [next(ids) for _ in launches], {}))
    return time.perf_counter() - began


def _pack_once_time(plan: LaunchPlan, repeats: int = 5) -> float:
    """Median seconds to make the one cluster command every host is sent."""
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        cluster_command(plan.tasks[0])
        times.append(time.perf_counter() - began)
    return statistics.median(times)


# ---- the report --------------------------------------------------------------------------------


def human_bytes(n: float) -> str:
    if n < 10 * 1024:
        return f"{n:,.0f} B"
    if n < 10 * 2**20:
        return f"{n / 1024:,.1f} KiB"
    return f"{n / 2**20:,.1f} MiB"


def _met(ok: bool) -> str:
    return "met" if ok else "**missed**"


def _marginal(rows: list[Traffic], key: str) -> list[float | None]:
    """Bytes each added task costs, from the previous (smaller) size of the same shape."""
    found: list[float | None] = [None]
    for smaller, larger in itertools.pairwise(rows):
        found.append((getattr(larger, key) - getattr(smaller, key)) / (larger.tasks - smaller.tasks))
    return found


def _spread(values: list[float | None]) -> float:
    known = [v for v in values if v is not None]
    return max(known) / min(known) - 1 if known else 0.0


def _traffic_table(shapes: dict[int, list[Traffic]]) -> tuple[str, dict[int, dict[str, float]]]:
    lines = [
        "### Simulated fleets: bytes to start an attempt (SSH: per host; Slurm: one step input that every node reads)",
        "",
        "| fleet | tasks | agent line | cluster command | largest start command | to one host (SSH, max) "
        "| SSH total | per task | per added task | Slurm step input | per task | per added task |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    spreads: dict[int, dict[str, float]] = {}
    for per_host, rows in shapes.items():
        ssh_added, slurm_added = _marginal(rows, "ssh_total"), _marginal(rows, "slurm_input")
        spreads[per_host] = {"ssh": _spread(ssh_added), "slurm": _spread(slurm_added)}
        for row, ssh_more, slurm_more in zip(rows, ssh_added, slurm_added, strict=True):
            lines.append(
                f"| {fleet_name(row.hosts, per_host)} | {row.tasks:,} | {human_bytes(row.agent_line)} "
                f"| {human_bytes(row.cluster)} "
                f"| {human_bytes(row.largest_start)} | {human_bytes(row.to_one_host)} | {human_bytes(row.ssh_total)} "
                f"| {row.ssh_total / row.tasks:,.0f} B | {'' if ssh_more is None else f'{ssh_more:,.0f} B'} "
                f"| {human_bytes(row.slurm_input)} | {row.slurm_input / row.tasks:,.0f} B "
                f"| {'' if slurm_more is None else f'{slurm_more:,.0f} B'} |"
            )
    lines += [
        "",
        "Per added task: (total of this size - total of the previous size) / (tasks added); constant when the "
        "total grows linearly (a fixed part, such as the Slurm step's one agent line, shows in the bytes per task "
        "of small fleets but not here). The cluster command of hosts named node001, node002, ... or addressed "
        "10.0.x.y packs to one run whatever their number. A Slurm step carries what every node needs (the agent, "
        "the cluster, the settings the tasks share) once, and then each node's own task entries.",
    ]
    return "\n".join(lines), spreads


def _targets_table(
    planning: dict[str, list[dict[str, float]]], big: dict[str, Traffic], spreads: dict[int, dict[str, float]]
) -> tuple[str, dict[str, bool]]:
    names = list(planning)
    lines = [
        "### Simulated fleets: targets",
        "",
        "| target | " + " | ".join(f"{name} ({big[name].tasks:,} tasks)" for name in names) + " |",
        "| --- |" + " --- |" * len(names),
    ]
    met: dict[str, bool] = {}
    plan_s = {n: planning_medians(planning[n])[0] for n in names}
    peak = {n: planning_medians(planning[n])[1] for n in names}
    cells = []
    for name in names:
        met[f"plan_s {name}"] = ok = plan_s[name] <= PLAN_S
        cells.append(f"**{plan_s[name]:.3f} s** (median) {_met(ok)}")
    lines.append(f"| validate + build_plan <= {PLAN_S:g} s | " + " | ".join(cells) + " |")
    cells = []
    for name in names:
        met[f"plan_mib {name}"] = ok = peak[name] <= PLAN_MIB
        cells.append(f"**{peak[name]:.1f} MiB** peak RSS {_met(ok)}")
    lines.append(f"| planning memory <= {PLAN_MIB:g} MiB | " + " | ".join(cells) + " |")
    cells = []
    for name in names:
        met[f"to_one_host {name}"] = ok = big[name].to_one_host <= HOST_BYTES
        cells.append(f"**{human_bytes(big[name].to_one_host)}** {_met(ok)}")
    lines.append("| bytes to one host (SSH) <= 1 MiB | " + " | ".join(cells) + " |")
    cells = []
    for name in names:
        per_host = big[name].tasks // big[name].hosts
        spread = spreads[per_host]
        met[f"linear {name}"] = ok = max(spread.values()) <= LINEAR
        cells.append(
            f"per added task within **{spread['ssh']:.1%}** (SSH), **{spread['slurm']:.1%}** (Slurm) "
            f"across the x {per_host} sizes {_met(ok)}"
        )
    lines.append(f"| total bytes linear in tasks (spread <= {LINEAR:.0%}) | " + " | ".join(cells) + " |")
    return "\n".join(lines), met


def run(quick: bool) -> str:
    repeats = 3 if quick else 7
    planning = _planning(repeats)

    shapes: dict[int, list[Traffic]] = {}
    plans: dict[str, LaunchPlan] = {}
    for hosts, per_host in SIZES:
        spec = parse_spec(fleet_spec(hosts, per_host))
        plan = build_plan(spec, PlanInputs(f"{RUN_ROOT}/{spec.name}", 0, "python3", "/home/user"))
        shapes.setdefault(per_host, []).append(traffic(spec, plan))
        if (hosts, per_host) in FLEETS:
            plans[fleet_name(hosts, per_host)] = plan
    big = {fleet_name(row.hosts, per_host): row for per_host, rows in shapes.items() for row in rows}
    big = {name: big[name] for name in planning}
    traffic_text, spreads = _traffic_table(shapes)
    targets_text, met = _targets_table(planning, big, spreads)

    commands: dict[str, dict[str, float]] = {}
    for name, plan in plans.items():
        hosts = big[name].hosts if not quick else min(big[name].hosts, 256)
        seconds = _commands_time(plan, hosts)
        commands[name] = {
            "hosts_timed": hosts,
            "per_host_s": seconds / hosts,
            "all_hosts_s": seconds / hosts * big[name].hosts,
            "pack_once_s": _pack_once_time(plan),
        }
    command_lines = [
        "### Simulated fleets: making every host's commands (CPU on the launcher, reported)",
        "",
        "| fleet | as start_all does it (cluster packed once) | per host | packing the cluster once |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, found in commands.items():
        timed = "" if found["hosts_timed"] == big[name].hosts else f" (from {found['hosts_timed']:.0f} hosts)"
        command_lines.append(
            f"| {name} | {found['all_hosts_s']:.2f} s{timed} | {found['per_host_s'] * 1000:.2f} ms "
            f"| {found['pack_once_s'] * 1000:.2f} ms |"
        )

    rows = [row for name, runs in planning.items() for row in _planning_rows(name, runs)]
    save(
        "fleet",
        {
            "planning": planning,
            "traffic": {str(per_host): [asdict(row) for row in rows] for per_host, rows in shapes.items()},
            "linearity_spread": {str(k): v for k, v in spreads.items()},
            "commands": commands,
            "targets_met": met,
        },
        quick,
    )
    title = f"Simulated fleets: planning in a fresh interpreter per run ({repeats} runs each, fleets interleaved)"
    return "\n\n".join([targets_text, table(title, rows), traffic_text, "\n".join(command_lines)])


if __name__ == "__main__":
    print(run("--quick" in sys.argv))
