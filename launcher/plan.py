"""Turn a validated ClusterSpec into one launch record per task.

A pure function of its inputs: no sockets, no processes, no reads of os.environ, no file
system access. Ports chosen at launch time (port 0 in the spec) come in through PlanInputs,
so the same inputs always give the same plan (tested against golden JSON).
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, field
from typing import Any, Mapping

from launcher.spec import ENV_PREFIX, ClusterSpec, CommandTraining, HostSpec, is_url

WORKER_MODULE = "worker"
_BARE_PYTHON = frozenset({"python", "python3"})


@dataclass(frozen=True)
class TaskSlot:
    """Where one task runs and which port it asked for (0: choose a free one at launch)."""

    task_type: str
    task_index: int
    host_index: int
    host: HostSpec
    requested_port: int

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
    faults: Mapping[str, str] = field(default_factory=dict)  # task name -> TFLAUNCH_FAULT value


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
    tf_config: dict[str, Any]
    env: dict[str, str]
    argv: list[str]
    cwd: str
    log_path: str
    result_path: str
    error_path: str

    @property
    def file_stem(self) -> str:
        return f"{self.task_type}-{self.task_index}"

    @property
    def label(self) -> str:
        """Console prefix: `worker:1` locally, `worker:1@host` for remote tasks."""
        return self.name if self.is_local else f"{self.name}@{self.host}"

    def to_json(self) -> dict[str, Any]:
        data = {k: v for k, v in self.__dict__.items()}
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

    def to_json(self) -> dict[str, Any]:
        return {
            "run_name": self.run_name,
            "run_dir": self.run_dir,
            "attempt": self.attempt,
            "attempt_dir": self.attempt_dir,
            "checkpoint_dir": self.checkpoint_dir,
            "tasks": [task.to_json() for task in self.tasks],
        }


def task_slots(spec: ClusterSpec) -> list[TaskSlot]:
    """Every task of the spec in launch order (chief, then workers by index)."""
    slots: list[TaskSlot] = []
    counters = {"chief": 0, "worker": 0, "evaluator": 0}
    for host_index, host in enumerate(spec.hosts):
        for entry in spec.task_entries(host):
            index = entry.index
            if index < 0:  # count form: indices follow host order
                index = counters[entry.type]
                counters[entry.type] += 1
            slots.append(TaskSlot(entry.type, index, host_index, host, entry.port))
    order = {"chief": 0, "worker": 1, "evaluator": 2}
    return sorted(slots, key=lambda s: (order[s.task_type], s.task_index))


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _gpu_share(host: HostSpec, position: int, count: int) -> str | None:
    """The CUDA_VISIBLE_DEVICES of the position-th of `count` trainers on a host: an even, disjoint split."""
    if host.gpus is None:
        return None
    per_task = len(host.gpus) // count if count else 0
    if per_task == 0:
        return ",".join(str(g) for g in host.gpus)  # fewer GPUs than tasks: all share
    share = host.gpus[position * per_task:(position + 1) * per_task]
    return ",".join(str(g) for g in share)


def build_plan(spec: ClusterSpec, inputs: PlanInputs) -> LaunchPlan:
    """Derive every task's TF_CONFIG, environment, argv and files for one attempt."""
    slots = task_slots(spec)
    ports = {s.name: (s.requested_port or inputs.ports.get(s.name, 0)) for s in slots}
    missing = [name for name, port in ports.items() if port == 0]
    if missing:
        raise ValueError(f"no port chosen for {', '.join(missing)}; resolve port 0 before planning")
    cluster: dict[str, list[str]] = {}
    for slot in slots:
        if slot.task_type != "evaluator":  # the evaluator is outside the coordination service
            cluster.setdefault(slot.task_type, []).append(_address(slot.host.address, ports[slot.name]))
    trainers_on: dict[int, int] = {}
    for slot in slots:
        if slot.task_type != "evaluator":
            trainers_on[slot.host_index] = trainers_on.get(slot.host_index, 0) + 1

    run_dir = inputs.run_dir
    attempt_dir = posixpath.join(run_dir, f"attempt-{inputs.attempt}")
    checkpoint_dir = spec.checkpoint_dir or posixpath.join(run_dir, "checkpoints")
    if not posixpath.isabs(checkpoint_dir) and not is_url(checkpoint_dir):  # gs://... reaches TF untouched
        checkpoint_dir = posixpath.normpath(posixpath.join(inputs.launcher_cwd, checkpoint_dir))
    training = spec.training.model_dump(mode="json")

    positions: dict[int, int] = {}
    tasks: list[TaskLaunch] = []
    for slot in slots:
        host = slot.host
        sidecar = slot.task_type == "evaluator"
        python = host.python or spec.python or (inputs.launcher_python if host.is_local else "python3")
        cwd = host.workdir or spec.workdir or (inputs.launcher_cwd if host.is_local else ".")
        stem = f"{slot.task_type}-{slot.task_index}"
        own = {"evaluator": [_address(host.address, ports[slot.name])]} if sidecar else cluster
        tf_config = {"cluster": own, "task": {"type": slot.task_type, "index": slot.task_index}}
        result_path = posixpath.join(attempt_dir, f"{stem}.result.json")
        error_path = posixpath.join(attempt_dir, f"{stem}.error.json")
        env = {**spec.env, **host.env}
        env.update({
            "TF_CONFIG": json.dumps(tf_config, sort_keys=True),
            "PYTHONUNBUFFERED": "1",
            f"{ENV_PREFIX}RUN_NAME": spec.name,
            f"{ENV_PREFIX}RUN_DIR": run_dir,
            f"{ENV_PREFIX}ATTEMPT": str(inputs.attempt),
            f"{ENV_PREFIX}TASK": slot.name,
            f"{ENV_PREFIX}CHECKPOINT_DIR": checkpoint_dir,
            f"{ENV_PREFIX}RESULT_FILE": result_path,
            f"{ENV_PREFIX}ERROR_FILE": error_path,
            f"{ENV_PREFIX}METRICS_FILE": posixpath.join(run_dir, "metrics.jsonl"),
            f"{ENV_PREFIX}EXPORT_DIR": posixpath.join(run_dir, "model"),
            f"{ENV_PREFIX}TRAINING": json.dumps(training, sort_keys=True),
            f"{ENV_PREFIX}PREEMPTION_EXIT_CODE": str(spec.restart.preemption_exit_code),
        })
        if slot.name in inputs.faults:
            env[f"{ENV_PREFIX}FAULT"] = inputs.faults[slot.name]
        if spec.training.kind == "fit":
            env["TF_USE_LEGACY_KERAS"] = "1"  # tf-keras: Keras 3 fit is broken under MWMS
        if sidecar:
            if host.gpus is not None:
                env["CUDA_VISIBLE_DEVICES"] = ""  # the evaluator scores on CPU, leaving GPUs to training
        else:
            position = positions.get(slot.host_index, 0)
            positions[slot.host_index] = position + 1
            gpus = _gpu_share(host, position, trainers_on[slot.host_index])
            if gpus is not None:
                env["CUDA_VISIBLE_DEVICES"] = gpus
        if isinstance(spec.training, CommandTraining):
            argv = [python if arg in _BARE_PYTHON and i == 0 else arg for i, arg in enumerate(spec.training.argv)]
        else:
            argv = [python, "-m", WORKER_MODULE]
        tasks.append(TaskLaunch(
            name=slot.name,
            task_type=slot.task_type,
            task_index=slot.task_index,
            host=host.address,
            host_index=slot.host_index,
            is_local=host.is_local,
            port=ports[slot.name],
            python=python,
            sidecar=sidecar,
            tf_config=tf_config,
            env=env,
            argv=argv,
            cwd=cwd,
            log_path=posixpath.join(attempt_dir, f"{stem}.log"),
            result_path=result_path,
            error_path=error_path,
        ))
    return LaunchPlan(spec.name, run_dir, inputs.attempt, attempt_dir, checkpoint_dir, tuple(tasks))
