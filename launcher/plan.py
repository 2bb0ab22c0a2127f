"""Turn a validated ClusterSpec into one launch record per task.

A pure function of its inputs: no sockets, no processes, no reads of os.environ, no file
system access. Ports chosen at launch time (port 0 in the spec) come in through PlanInputs,
so the same inputs always give the same plan (tested against golden JSON).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from launcher.agent.cluster import address
from launcher.common.masking import redact, secret_arguments
from launcher.spec.hosts import HostSpec
from launcher.spec.models import ClusterSpec
from launcher.spec.paths import checkpoint_dir_of
from launcher.spec.python_script import split_python_command
from worker.contract import (
    ARGV_TRAMPOLINE,
    ARGV_VAR,
    ERROR_FILE_VAR,
    FAULT_VAR,
    RESULT_FILE_VAR,
    TASK_VAR,
    TF_CONFIG,
    UMASK_VAR,
    RunLayout,
    TaskEnv,
    task_stem,
    with_python,
)
from worker.training_spec import CommandTraining

WORKER_MODULE = "worker"


@dataclass(frozen=True)
class TaskSlot:
    """Where one task runs and which port it asked for (0: choose a free one at launch)."""

    task_type: str
    task_index: int
    host_index: int
    host: HostSpec
    requested_port: int
    gpus: tuple[int, ...] | None = None  # its CUDA_VISIBLE_DEVICES; None: not set

    @property
    def name(self) -> str:
        return f"{self.task_type}:{self.task_index}"


@dataclass(frozen=True)
class PlanInputs:
    """Everything outside the spec that a plan depends on."""

    run_dir: str
    attempt: int
    launcher_python: str
    launcher_cwd: str
    ports: Mapping[str, int] = field(default_factory=dict)
    faults: Mapping[str, str] = field(default_factory=dict)  # task name -> the fault rehearsed in attempt 0
    roster: Roster | None = None  # which machine holds each seat (None: every host its own; see `task_slots`)


@dataclass(frozen=True)
class TaskLaunch:
    """How to start one task: the exact environment additions, argv and files of one attempt."""

    name: str
    task_type: str
    task_index: int
    host: str
    host_index: int
    is_local: bool
    port: int
    python: str
    sidecar: bool  # the evaluator: outside the training gang, never decides its success
    # The trainers' `cluster` of TF_CONFIG: one object shared by every task of the plan, so a
    # fleet's plan grows with its tasks, not with their square. `tf_config` is derived from it.
    cluster: Mapping[str, list[str]]
    env: dict[str, str]  # what the task's environment gets, but TF_CONFIG (see `task_env`)
    argv: list[str]
    cwd: str
    log_path: str
    result_path: str
    error_path: str
    # What a warm spare for this task imports ahead of the next attempt; empty: no spare.
    preload: tuple[str, ...] = ()

    @property
    def file_stem(self) -> str:
        return task_stem(self.name)

    @property
    def address(self) -> str:
        """How peers reach this task's TF server."""
        return address(self.host, self.port)

    @property
    def command(self) -> list[str]:
        """The command as the spec gave it: secret-holding arguments travel in ARGV_VAR, not in argv."""
        if ARGV_VAR in self.env:
            return [self.argv[0], *json.loads(self.env[ARGV_VAR])]
        return list(self.argv)

    @property
    def tf_config(self) -> dict[str, Any]:
        """The task's TF_CONFIG. The evaluator is outside the coordination service: its cluster lists
        only itself."""
        own = {"evaluator": [self.address]} if self.sidecar else dict(self.cluster)
        return {"cluster": own, "task": {"type": self.task_type, "index": self.task_index}}

    @property
    def task_env(self) -> dict[str, str]:
        """Everything the launcher adds to the task's environment, TF_CONFIG included (the host's
        agent builds the same TF_CONFIG itself from the cluster)."""
        return {**self.env, TF_CONFIG: json.dumps(self.tf_config, sort_keys=True)}

    @property
    def label(self) -> str:
        """Console prefix: `worker:1` locally, `worker:1@host` for remote tasks."""
        return self.name if self.is_local else f"{self.name}@{self.host}"

    def to_json(self) -> dict[str, Any]:
        data = {k: v for k, v in self.__dict__.items() if k != "cluster"}
        data["tf_config"] = self.tf_config
        data["env"] = self.task_env
        data["label"] = self.label
        return data


@dataclass(frozen=True)
class LaunchPlan:
    """All tasks of one attempt, chief first, then workers by index."""

    run_name: str
    run_dir: str
    attempt: int
    attempt_dir: str
    checkpoint_dir: str
    tasks: tuple[TaskLaunch, ...]

    @property
    def outputs(self) -> dict[str, str]:
        return RunLayout(self.run_dir).outputs(self.checkpoint_dir)

    def to_json(self) -> dict[str, Any]:
        return {
            "run_name": self.run_name,
            "run_dir": self.run_dir,
            "attempt": self.attempt,
            "attempt_dir": self.attempt_dir,
            "checkpoint_dir": self.checkpoint_dir,
            "tasks": [task.to_json() for task in self.tasks],
        }


# Seat -> machine. A seat is a position of `hosts` (its tasks); a machine, a position of `hosts` then
# `spare_hosts` (where they run: its address, ports and GPUs). A seat left out is not in the gang.
Roster = Mapping[int, int]


def machines(spec: ClusterSpec) -> list[HostSpec]:
    """Every machine a task may run on, in the transport's order: the hosts, then the spare hosts."""
    return [*spec.hosts, *spec.spare_hosts]


def full_roster(spec: ClusterSpec) -> dict[int, int]:
    """Every host in its own seat: the gang as the spec writes it."""
    return {seat: seat for seat in range(len(spec.hosts))}


def task_slots(spec: ClusterSpec, roster: Roster | None = None) -> list[TaskSlot]:
    """Every task of the spec in launch order (chief, then workers by index), on the machines of `roster`.

    A seat keeps its tasks' roles wherever it sits; a spare in it gives them its address, ports and GPUs.
    Counted indices follow the seats in order, so a gang without a seat numbers its workers 0..n-1."""
    slots: list[TaskSlot] = []
    counters = {"chief": 0, "worker": 0, "evaluator": 0}
    everywhere = machines(spec)
    for seat, machine in sorted((roster or full_roster(spec)).items()):
        host = everywhere[machine]
        entries = spec.task_entries(spec.hosts[seat])
        ports = [entry.port for entry in entries] if machine == seat else host.ports or [0] * len(entries)
        for entry, port, gpus in zip(entries, ports, host.gpu_shares(), strict=True):
            index = entry.index
            if index < 0:  # count form: indices follow host order
                index = counters[entry.type]
                counters[entry.type] += 1
            share = tuple(gpus) if gpus is not None else None
            slots.append(TaskSlot(entry.type, index, machine, host, port, share))
    order = {"chief": 0, "worker": 1, "evaluator": 2}
    return sorted(slots, key=lambda s: (order[s.task_type], s.task_index))


def _cluster(slots: list[TaskSlot], ports: Mapping[str, int]) -> dict[str, list[str]]:
    """The trainers' `cluster` of TF_CONFIG (the evaluator is outside the coordination service)."""
    cluster: dict[str, list[str]] = {}
    for slot in slots:
        if slot.task_type != "evaluator":
            cluster.setdefault(slot.task_type, []).append(address(slot.host.address, ports[slot.name]))
    return cluster


def runtime_env(spec: ClusterSpec) -> dict[str, str]:
    """What every task's environment gets from the launcher whatever the spec's env says (the
    Kubernetes export sets the same)."""
    env = {"PYTHONUNBUFFERED": "1"}
    if spec.training.kind == "fit":
        env["TF_USE_LEGACY_KERAS"] = "1"  # tf-keras: Keras 3 fit is broken under MWMS
    return env


def _run_env(spec: ClusterSpec, inputs: PlanInputs, layout: RunLayout, checkpoint_dir: str) -> dict[str, str]:
    """The contract's variables as every task of the attempt shares them, the training settings
    dumped once for the whole fleet. The variables naming a task are placeholders here, set by
    `_task_env` (so a fleet's plan costs one JSON dump, not one per task)."""
    return TaskEnv.for_task(
        run_name=spec.name,
        run_dir=layout.run_dir,
        attempt=inputs.attempt,
        task="",
        checkpoint_dir=checkpoint_dir,
        training=spec.training.model_dump(mode="json"),
        preemption_exit_code=spec.restart.preemption_exit_code,
        spec_workers=spec_workers(spec),
    ).to_env()


def spec_workers(spec: ClusterSpec) -> int | None:
    """An elastic gang's training tasks as the spec gives them (a smaller gang is told, to train alike)."""
    if spec.elastic is None:
        return None
    return sum(1 for slot in task_slots(spec) if slot.task_type != "evaluator")


def _host_env(spec: ClusterSpec, host: HostSpec, run_env: Mapping[str, str]) -> dict[str, str]:
    """What every task of one host gets: the spec's env, the host's, the runtime's and the run's."""
    env = {**spec.env, **host.env}
    env.update(runtime_env(spec))
    env.update(run_env)
    env[UMASK_VAR] = spec.umask
    return env


def _task_env(
    host_env: Mapping[str, str], name: str, result_path: str, error_path: str, fault: str | None, gpus: str | None
) -> dict[str, str]:
    """The environment one task gets on top of its host's: its host's share, with the variables that
    name the task as `TaskEnv.for_task` derives them (TF_CONFIG follows from the cluster)."""
    env = dict(host_env)  # the keys below are in it already, so the order stays TaskEnv.to_env's
    env[TASK_VAR] = name
    env[RESULT_FILE_VAR] = result_path
    env[ERROR_FILE_VAR] = error_path
    if fault is not None:
        env[FAULT_VAR] = fault
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpus
    return env


def _preload(spec: ClusterSpec, sidecar: bool) -> tuple[str, ...]:
    """The modules a task's warm spare imports: TensorFlow, and the runtime path the task takes."""
    if isinstance(spec.training, CommandTraining):
        return ("tensorflow",)  # a user script: what it imports besides is its own business
    runtime = ("tensorflow", f"{WORKER_MODULE}.runtime")
    if sidecar:
        return (*runtime, f"{WORKER_MODULE}.evaluator")
    by_kind = {"builtin": (f"{WORKER_MODULE}.loop",), "fit": ("tf_keras", f"{WORKER_MODULE}.fit")}
    return (*runtime, *by_kind.get(spec.training.kind, ()))


def host_python(spec: ClusterSpec, host: HostSpec, launcher_python: str) -> str:
    """The python a host's agent and tasks run with: the host's, the spec's, else the launcher's own
    on this machine and `python3` (found on the host's PATH) elsewhere."""
    return host.python or spec.python or (launcher_python if host.is_local else "python3")


@dataclass(frozen=True)
class _HostShare:
    """What every task of one host has in common, worked out once per host rather than per task."""

    is_local: bool
    python: str
    cwd: str
    argv: tuple[str, ...]
    env: dict[str, str]


def _host_share(spec: ClusterSpec, host: HostSpec, inputs: PlanInputs, run_env: Mapping[str, str]) -> _HostShare:
    is_local = host.is_local
    python = host_python(spec, host, inputs.launcher_python)
    cwd = host.workdir or spec.workdir or (inputs.launcher_cwd if is_local else ".")
    env = _host_env(spec, host, run_env)
    if isinstance(spec.training, CommandTraining):
        argv = with_python(spec.training.argv, python)
        if secret_arguments(argv[1:], spec.secrets) or any(redact(arg) != arg for arg in argv[1:]):
            # only a python command can get here (request_spec); its own options stay on its command line
            options, program = split_python_command(argv)
            env[ARGV_VAR] = json.dumps(program)
            argv = [argv[0], *options, "-c", ARGV_TRAMPOLINE]
    else:
        argv = [python, "-P", "-m", WORKER_MODULE]  # -P: no file in the workdir can stand in for the runtime
    return _HostShare(is_local, python, cwd, tuple(argv), env)


def build_plan(spec: ClusterSpec, inputs: PlanInputs) -> LaunchPlan:
    """Derive every task's TF_CONFIG, environment, argv and files for one attempt.

    Linear in the tasks: what a whole run or a whole host shares is derived once (a fleet of
    thousands of tasks plans in well under a second, see bench/fleet.py)."""
    slots = task_slots(spec, inputs.roster)
    ports = {s.name: (s.requested_port or inputs.ports.get(s.name, 0)) for s in slots}
    missing = [name for name, port in ports.items() if port == 0]
    if missing:
        raise ValueError(f"no port chosen for {', '.join(missing)}; resolve port 0 before planning")
    cluster = _cluster(slots, ports)
    layout = RunLayout(inputs.run_dir)
    checkpoint_dir = checkpoint_dir_of(spec.checkpoint_dir, layout, inputs.launcher_cwd)
    run_env = _run_env(spec, inputs, layout, checkpoint_dir)
    preloads = {sidecar: _preload(spec, sidecar) if spec.restart.warm_spares else () for sidecar in (False, True)}

    shares: dict[int, _HostShare] = {}
    tasks: list[TaskLaunch] = []
    for slot in slots:
        host = slot.host
        share = shares.get(slot.host_index)
        if share is None:
            share = shares[slot.host_index] = _host_share(spec, host, inputs, run_env)
        sidecar = slot.task_type == "evaluator"
        # An even, disjoint split of the host's GPUs (HostSpec.gpu_shares); the evaluator gets none unless listed
        gpus = ",".join(str(g) for g in slot.gpus) if slot.gpus is not None else None
        stem = task_stem(slot.name)
        result_path = layout.result_file(inputs.attempt, stem)
        error_path = layout.error_file(inputs.attempt, stem)
        fault = inputs.faults.get(slot.name)
        tasks.append(
            TaskLaunch(
                name=slot.name,
                task_type=slot.task_type,
                task_index=slot.task_index,
                host=host.address,
                host_index=slot.host_index,
                is_local=share.is_local,
                port=ports[slot.name],
                python=share.python,
                sidecar=sidecar,
                cluster=cluster,
                env=_task_env(share.env, slot.name, result_path, error_path, fault, gpus),
                argv=list(share.argv),
                cwd=share.cwd,
                log_path=layout.log_file(inputs.attempt, stem),
                result_path=result_path,
                error_path=error_path,
                preload=preloads[sidecar],
            )
        )
    return LaunchPlan(
        spec.name, inputs.run_dir, inputs.attempt, layout.attempt_dir(inputs.attempt), checkpoint_dir, tuple(tasks)
    )
