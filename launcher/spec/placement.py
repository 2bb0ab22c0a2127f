"""Where each task's GPUs come from: a host's GPU list split evenly among its training tasks, or
each task's own list, and what is wrong with a placement (uneven, shared, idle, mixed counts).

Pure: plain data in (GPU ids, each task's type and own list), shares and problems out. The spec's
validators and the Slurm allocation call it, and the plan hands its shares to the transports and the
Kubernetes layout; it imports no model."""

from __future__ import annotations

from dataclasses import dataclass

GPU_SHARING = (
    "each TensorFlow process takes nearly all the memory of every GPU it sees, and NCCL does not run two ranks on one "
    "GPU"
)


def gpus_named(ids: list[int]) -> str:
    """'GPU 3' or 'GPUs 1, 2'."""
    return f"GPU{'s' if len(ids) != 1 else ''} {', '.join(str(i) for i in ids)}"


def either(values: list[int]) -> str:
    words = [str(v) for v in values]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


CHIEF_WITH_GPUS = (
    "the first node would run one training task more than the others, and every training task needs the same "
    "number of GPUs; leave chief out (worker 0 then leads the gang)"
)


def uneven_node_split(workers: int, gpus: int | None) -> str | None:
    """Why `workers` tasks per node cannot share a node's `gpus` GPUs evenly; None when they can."""
    if not gpus or gpus % workers == 0:
        return None
    return (
        f"{workers} task(s) per node do not split a node's {gpus} GPUs evenly (one would stay idle or be "
        f"shared); set slurm.tasks_per_node to a divisor of {gpus}, or slurm.worker_per_gpu: true"
    )


@dataclass(frozen=True)
class Seat:
    """One task of a host as placement sees it: its type, its index (-1 in the count form) and the GPU
    ids it lists itself (None: it lists none)."""

    type: str
    index: int
    gpus: list[int] | None = None


@dataclass(frozen=True)
class HostGpus:
    """What placement needs of one host entry: its `gpus` list, its tasks in order, and how they were written."""

    gpus: list[int] | None
    seats: list[Seat]
    listed: bool = False  # tasks written out (`tasks`), not counted (`workers`, `chief`)
    chief: bool = False
    worker_per_gpu: bool = False
    machine: str = ""  # one key per machine (every spelling of this machine is one)
    address: str = ""

    @property
    def trainers(self) -> list[Seat]:
        return [seat for seat in self.seats if seat.type != "evaluator"]

    def trainers_text(self) -> str:
        """`worker:0, worker:1` in the listed form, else `a chief and 2 workers`."""
        if self.listed:
            return ", ".join(f"{seat.type}:{seat.index}" for seat in self.trainers)
        count = sum(seat.type == "worker" for seat in self.seats)
        workers = f"{count} worker{'s' if count != 1 else ''}"
        return f"a chief and {workers}" if self.chief else workers


def gpu_ids(host: HostGpus) -> list[int] | None:
    """Every GPU a host's tasks use: `gpus`, else the union of the tasks' own lists; None: not set."""
    if host.gpus is not None:
        return list(host.gpus)
    own = sorted({g for seat in host.seats for g in seat.gpus or []})
    return own or None


def shares(host: HostGpus) -> list[list[int] | None]:
    """Each task's GPU ids, in the order of its seats; None: CUDA_VISIBLE_DEVICES is not set.

    A task's own list wins; otherwise training tasks split the host's gpus evenly (the spec refuses
    uneven splits) and an evaluator gets none (it scores on CPU, leaving GPUs to training)."""
    ids = gpu_ids(host)
    if ids is None:
        return [None] * len(host.seats)
    trainers = len(host.trainers)
    each = len(ids) // trainers if trainers else 0
    found: list[list[int] | None] = []
    position = 0
    for seat in host.seats:
        if seat.gpus is not None:
            found.append(list(seat.gpus))
        elif seat.type == "evaluator":
            found.append([])
        else:
            found.append(ids[position * each : (position + 1) * each])
            position += 1
    return found


def _split_fix(host: HostGpus, gpus: int) -> str:
    """What to change so that a host's `gpus` GPUs divide evenly among its training tasks."""
    if host.listed:
        return "give each task its own GPUs (tasks[].gpus)"
    chief = 1 if host.chief else 0
    counts = [d - chief for d in range(1, gpus + 1) if gpus % d == 0 and d - chief >= 1]
    fix = f"set workers to {either(counts)}" if counts else "run the chief on another host"
    if host.worker_per_gpu and host.chief:
        return f"drop worker_per_gpu and {fix} (the chief trains too and needs a GPU of its own)"
    if chief:
        return fix + " (the chief trains too and needs GPUs of its own)"
    if not host.worker_per_gpu:
        return fix + ", or set worker_per_gpu: true (one worker per GPU)"
    return fix


def split_problem(host: HostGpus) -> str | None:
    """Why the host's gpus cannot be split evenly, one share per training task; None when they can."""
    trainers = len(host.trainers)
    if not host.gpus or trainers == 0 or any(seat.gpus for seat in host.seats):
        return None
    gpus = len(host.gpus)
    if gpus % trainers == 0:
        return None
    fix = _split_fix(host, gpus)
    if gpus > trainers:
        each = gpus // trainers
        idle = host.gpus[each * trainers :]
        return (
            f"{gpus} GPUs do not divide evenly among this host's {trainers} training tasks "
            f"({host.trainers_text()}): each would get {each} and {gpus_named(idle)} would stay idle. To use "
            f"every GPU, {fix}; or list only the GPUs to use"
        )
    return (
        f"{gpus} GPU(s) for this host's {trainers} training tasks ({host.trainers_text()}): tasks would share a "
        f"GPU, which fails at start ({GPU_SHARING}). Give each training task its own GPUs: {fix}; or list more "
        f"GPUs"
    )


def task_gpu_problems(host: HostGpus) -> list[tuple[str, str]]:
    """Per-task GPU lists: each a part of the host's gpus, no GPU in two tasks, every trainer with one."""
    listed = [(j, seat) for j, seat in enumerate(host.seats) if seat.gpus is not None]
    if not listed:
        return []
    problems: list[tuple[str, str]] = []
    owner: dict[int, int] = {}
    for j, seat in listed:
        assert seat.gpus is not None
        if len(set(seat.gpus)) != len(seat.gpus):
            problems.append((f"tasks[{j}].gpus", "lists a GPU id twice"))
        foreign = [g for g in seat.gpus if host.gpus is not None and g not in host.gpus]
        if foreign:
            problems.append(
                (
                    f"tasks[{j}].gpus",
                    f"{gpus_named(foreign)} not in this host's gpus {host.gpus}; add them there or remove them here",
                )
            )
        for gpu in seat.gpus:
            if gpu in owner and owner[gpu] != j:
                problems.append(
                    (
                        f"tasks[{j}].gpus",
                        f"GPU {gpu} is also given to tasks[{owner[gpu]}]; a GPU belongs to one task ({GPU_SHARING})",
                    )
                )
            owner.setdefault(gpu, j)
    return problems + _gpuless_and_idle(host, owner)


def _gpuless_and_idle(host: HostGpus, owner: dict[int, int]) -> list[tuple[str, str]]:
    """Where some tasks list their GPUs: a training task that lists none, and a GPU of the host no task has."""
    problems = [
        (
            f"tasks[{j}].gpus",
            f"{seat.type}:{seat.index} has no gpus while other tasks of this host list theirs; give every "
            f"training task its GPUs, or none (the host's gpus are then split evenly)",
        )
        for j, seat in enumerate(host.seats)
        if seat.gpus is None and seat.type != "evaluator"
    ]
    unused = [g for g in host.gpus or [] if g not in owner]
    if unused:
        problems.append(
            ("gpus", f"{gpus_named(unused)} given to no task, so idle; give each to a task or remove it from gpus")
        )
    return problems


def visible_devices_problems(
    found: list[list[list[int] | None]], host_envs: list[bool], cluster_env: bool
) -> list[tuple[str, str]]:
    """The GPUs a spec gives become CUDA_VISIBLE_DEVICES: one in env as well would be silently replaced.
    `host_envs[i]` and `cluster_env`: whether hosts[i].env and env set it."""
    key = "CUDA_VISIBLE_DEVICES"
    with_gpus = [i for i, host_shares in enumerate(found) if any(share is not None for share in host_shares)]
    problems = [
        (f"hosts[{i}].env.{key}", f"hosts[{i}] gives its tasks GPUs, which set {key} for each; remove it from env")
        for i in with_gpus
        if host_envs[i]
    ]
    if with_gpus and cluster_env:
        problems.append(
            (
                f"env.{key}",
                f"hosts[{with_gpus[0]}] gives its tasks GPUs, which set {key} for each; set it per host "
                "without gpus, or remove it",
            )
        )
    return problems


def shared_across_entries(hosts: list[HostGpus], found: list[list[list[int] | None]]) -> list[tuple[str, str]]:
    """A machine listed twice (two entries, or two spellings of it) gives each GPU to one entry only."""
    owner: dict[tuple[str, int], int] = {}
    problems: list[tuple[str, str]] = []
    for i, host in enumerate(hosts):
        ids = sorted({gpu for share in found[i] if share for gpu in share})
        for gpu in ids:
            first = owner.setdefault((host.machine, gpu), i)
            if first != i:
                problems.append(
                    (
                        f"hosts[{i}].gpus" if host.gpus is not None else f"hosts[{i}].tasks",
                        f"GPU {gpu} of {host.address} is also given to the tasks of hosts[{first}], the same "
                        "machine: tasks would share it; give each entry its own GPUs",
                    )
                )
                break
    return problems


def count_problems(hosts: list[HostGpus], found: list[list[list[int] | None]]) -> list[tuple[str, str]]:
    """Every training task whose GPUs the spec sets must get as many as the others: MWMS mirrors over the
    same number of devices in every worker (its all-reduce group is workers x devices per worker)."""
    counts: dict[int, list[str]] = {}
    for i, host in enumerate(hosts):
        for j, (seat, share) in enumerate(zip(host.seats, found[i], strict=True)):
            if share is not None and seat.type != "evaluator":
                where = f"hosts[{i}].tasks[{j}]" if host.listed else f"hosts[{i}]"
                places = counts.setdefault(len(share), [])
                if where not in places:
                    places.append(where)
    if len(counts) < 2:
        return []
    spread = "; ".join(f"{count} on {', '.join(places)}" for count, places in sorted(counts.items()))
    return [
        (
            "hosts",
            f"training tasks get different numbers of GPUs ({spread}). MultiWorkerMirroredStrategy mirrors over "
            f"the same number of devices in every worker (its all-reduce group is workers x devices per worker), "
            f"so give every training task the same number of GPUs",
        )
    ]
