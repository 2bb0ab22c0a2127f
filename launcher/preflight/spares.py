"""The preflight of the spare hosts: each is checked as it would run, in the first seat of its shape,
with the same checks as the hosts in use (launcher/preflight/check.py). A spare that fails is not a
reason to refuse the run: it is kept out until it passes again, and the console says why."""

from __future__ import annotations

from dataclasses import replace

from launcher.plan import LaunchPlan, PlanInputs, Roster, TaskLaunch, build_plan, full_roster
from launcher.preflight.check import run_preflight
from launcher.preflight.ports import choose_free_ports
from launcher.spec.elastic import shape_of
from launcher.spec.models import ClusterSpec
from launcher.transport.base import Transport


def spare_plan(spec: ClusterSpec, inputs: PlanInputs) -> LaunchPlan:
    """Every spare's tasks as they would run in the first seat of its shape (one plan per spare, merged)."""
    seats: dict[tuple[int, int], int] = {}
    for seat, host in enumerate(spec.hosts):
        seats.setdefault(shape_of(host), seat)
    tasks: list[TaskLaunch] = []
    first = None
    for offset, spare in enumerate(spec.spare_hosts):
        machine = len(spec.hosts) + offset
        roster = {**full_roster(spec), seats[shape_of(spare)]: machine}
        ports = {**inputs.ports, **choose_free_ports(spec, roster)}
        plan = build_plan(spec, replace(inputs, roster=roster, ports=ports, faults={}))
        first = first or plan
        tasks += [task for task in plan.tasks if task.host_index == machine]
    assert first is not None, "spare_plan needs a spare"
    return replace(first, tasks=tuple(tasks))


def check_spares(spec: ClusterSpec, inputs: PlanInputs, transport: Transport) -> dict[int, str]:
    """Each spare that fails its preflight (by machine index), with its problems; {} when none has."""
    if not spec.spare_hosts:
        return {}
    plan = spare_plan(spec, inputs)
    report = run_preflight(spec, plan, transport)
    failed: dict[int, str] = {}
    for offset, spare in enumerate(spec.spare_hosts):
        mine = [p for p in report.problems if p.startswith((f"{spare.address}: ", f"{spare.address} "))]
        if mine:
            failed[len(spec.hosts) + offset] = "; ".join(mine)
    if report.problems and not failed:  # a problem that names no spare (the checkpoint directory's, say)
        failed = {len(spec.hosts) + i: "; ".join(report.problems) for i in range(len(spec.spare_hosts))}
    return failed


def check_seat(spec: ClusterSpec, inputs: PlanInputs, transport: Transport, roster: Roster, seat: int) -> str | None:
    """The preflight of the machine that `roster` puts in `seat`, as it would run there; None when it passes."""
    machine = roster[seat]
    ports = {**inputs.ports, **choose_free_ports(spec, roster)}
    plan = build_plan(spec, replace(inputs, roster=roster, ports=ports, faults={}))
    mine = replace(plan, tasks=tuple(task for task in plan.tasks if task.host_index == machine))
    report = run_preflight(spec, mine, transport)
    return "; ".join(report.problems) if report.problems else None
