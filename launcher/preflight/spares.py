"""The preflight of the spare hosts: each is checked as it would run, in the first seat of its shape,
with the same checks as the hosts in use (launcher/preflight/check.py). A spare that fails is not a
reason to refuse the run: it is kept out until it passes again, and the console says why."""

from __future__ import annotations

from dataclasses import replace

from launcher.plan import LaunchPlan, PlanInputs, Roster, build_plan, full_roster
from launcher.preflight.check import run_preflight
from launcher.preflight.ports import choose_free_ports
from launcher.spec.elastic import shape_of
from launcher.spec.models import ClusterSpec
from launcher.transport.base import Transport


def seated(spec: ClusterSpec, inputs: PlanInputs, roster: Roster, seat: int) -> LaunchPlan:
    """The plan of `roster` with only the tasks of the machine it puts in `seat`, as they would run there."""
    ports = {**inputs.ports, **choose_free_ports(spec, roster)}
    plan = build_plan(spec, replace(inputs, roster=roster, ports=ports, faults={}))
    return replace(plan, tasks=tuple(task for task in plan.tasks if task.host_index == roster[seat]))


def spare_plan(spec: ClusterSpec, inputs: PlanInputs) -> LaunchPlan:
    """Every spare's tasks as they would run in the first seat of its shape (one plan per spare, merged)."""
    seats: dict[tuple[int, int], int] = {}
    for seat, host in enumerate(spec.hosts):
        seats.setdefault(shape_of(host), seat)
    plans = []
    for offset, spare in enumerate(spec.spare_hosts):
        seat = seats[shape_of(spare)]
        plans.append(seated(spec, inputs, {**full_roster(spec), seat: len(spec.hosts) + offset}, seat))
    assert plans, "spare_plan needs a spare"
    return replace(plans[0], tasks=tuple(task for plan in plans for task in plan.tasks))


def check_spares(spec: ClusterSpec, plan: LaunchPlan, transport: Transport) -> dict[int, str]:
    """Each spare that fails its preflight (by machine index), with its problems; {} when none has.
    `plan`: the spares' (`spare_plan`)."""
    if not spec.spare_hosts:
        return {}
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
    report = run_preflight(spec, seated(spec, inputs, roster, seat), transport)
    return "; ".join(report.problems) if report.problems else None
