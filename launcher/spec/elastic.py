"""The spec's answer to a host gone for good: `spare_hosts` that stand in for it, and `elastic`, which
lets the gang go on with fewer hosts. The model of `elastic` and the rules between these fields and the
rest of the spec; plain functions over the hosts, which the top model (models.py) calls."""

from __future__ import annotations

from pydantic import Field

from launcher.spec.addresses import is_loopback, machine_key
from launcher.spec.hosts import HostSpec, TaskSpec
from launcher.spec.limits import MAX_HOSTS
from worker.training_spec import StrictModel, TrainingSpec

Problems = list[tuple[str, str]]


class ElasticSpec(StrictModel):
    """The gang may shrink when a host is gone for good and no spare is left."""

    min_hosts: int = Field(
        ge=1,
        le=MAX_HOSTS,
        description="The fewest hosts of `hosts` the gang may train on (fewer than `hosts`). With a host gone for "
        "good and no spare left, the gang restarts from its newest checkpoint on the hosts that remain, as long as "
        "this many do; the built-in runtime keeps the spec's global batch. An excluded host rejoins once its "
        "cooldown (restart.host_cooldown_s) is over and it passes the preflight again, at most once per checkpoint "
        "interval (docs/supervision.md).",
    )


def shape_of(host: HostSpec) -> tuple[int, int]:
    """What a spare must match to stand in for a host: its number of tasks and of GPUs."""
    return host.task_count, len(host.gpu_ids or [])


def spare_problems(hosts: list[HostSpec], spares: list[HostSpec]) -> Problems:
    """Each spare: a machine of its own, in the `workers` form, the shape of a host it can stand in for,
    reachable the way the hosts are, with its ports given where it is remote."""
    problems: Problems = []
    if len(hosts) + len(spares) > MAX_HOSTS:
        problems.append(("spare_hosts", f"hosts and spare_hosts together are over {MAX_HOSTS}; use fewer"))
    seen = {machine_key(h.address): f"hosts[{i}]" for i, h in enumerate(hosts)}
    shapes = {shape_of(h) for h in hosts}
    all_loopback = all(is_loopback(h.address) for h in hosts)
    for i, spare in enumerate(spares):
        where = f"spare_hosts[{i}]"
        key = machine_key(spare.address)
        if key in seen:
            problems.append(
                (
                    f"{where}.address",
                    f"{spare.address!r} is also {seen[key]}: a spare is a machine the gang does not use until a host "
                    "is gone; remove it or give another machine",
                )
            )
        seen.setdefault(key, where)
        for field in ("tasks", "chief", "evaluator"):
            if getattr(spare, field):
                problems.append(
                    (
                        f"{where}.{field}",
                        "a spare takes the tasks of the host it stands in for (their names, roles and indices): give "
                        "it `workers` (and `ports`, `gpus`) only",
                    )
                )
        if shape_of(spare) not in shapes:
            tasks, gpus = shape_of(spare)
            wanted = ", ".join(f"{t} task(s) and {g} GPU(s)" for t, g in sorted(shapes))
            problems.append(
                (
                    where,
                    f"has {tasks} task slot(s) and {gpus} GPU(s), the shape of no host ({wanted}): a spare stands in "
                    "for a host with as many tasks and GPUs; set its workers (and gpus) to match one",
                )
            )
        if not spare.is_local and (not spare.ports or 0 in spare.ports):
            problems.append(
                (
                    f"{where}.ports",
                    f"a remote spare needs explicit ports (port 0, a free one picked at launch, only works for local "
                    f"hosts): give {spare.address} one per task (its peers dial them)",
                )
            )
        if is_loopback(spare.address) != all_loopback:
            problems.append(
                (
                    f"{where}.address",
                    f"{spare.address!r} and the hosts' addresses could not reach one another: use loopback "
                    "addresses for every host and spare of a simulation on this machine, or none",
                )
            )
    return problems


def elastic_problems(
    elastic: ElasticSpec | None, hosts: list[HostSpec], entries: list[list[TaskSpec]], training: TrainingSpec
) -> Problems:
    """What an elastic gang cannot do: run on more hosts than it has, move an evaluator, renumber tasks
    written out by index, or keep the global batch of a `fit` (which feeds batch_per_replica to every
    replica, so fewer replicas would mean a smaller global batch)."""
    if elastic is None:
        return []
    problems: Problems = []
    if len(hosts) < 2:
        problems.append(("elastic", "a gang of one host cannot go on with fewer: remove `elastic`"))
    elif elastic.min_hosts >= len(hosts):
        problems.append(
            (
                "elastic.min_hosts",
                f"is {elastic.min_hosts} of the {len(hosts)} hosts of `hosts`, so the gang could never shrink: give "
                f"fewer than {len(hosts)} (spare_hosts alone replace a lost host without shrinking)",
            )
        )
    evaluators = [i for i, tasks in enumerate(entries) for t in tasks if t.type == "evaluator"]
    if evaluators:
        problems.append(
            (
                f"hosts[{evaluators[0]}]",
                "runs the evaluator, which an elastic gang cannot keep when its host is gone (it scores the "
                "checkpoints apart from the gang): remove it, or remove `elastic`",
            )
        )
    if any(h.tasks is not None for h in hosts):
        problems.append(
            (
                "elastic",
                "shrinking renumbers the workers, which hosts written with `tasks` fix by index: give the hosts "
                "in the `workers` form, or remove `elastic`",
            )
        )
    if training.kind == "fit":
        problems.append(
            (
                "elastic",
                "training.kind 'fit' gives every replica batch_per_replica examples, so fewer hosts would train "
                "with a smaller global batch: use 'builtin' (which keeps it) or a script of your own that reads "
                "TFLAUNCH_SPEC_WORKERS, or remove `elastic`",
            )
        )
    return problems
