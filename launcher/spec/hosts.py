"""One host of a cluster spec and the tasks it runs (HostSpec, TaskSpec, SshSpec), with the rules
between a host's own fields. Frozen pydantic models that reject unknown keys; the addresses, paths,
secrets and GPU placement they check are the pure modules beside this one."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from launcher.common.masking import without_password
from launcher.spec import placement
from launcher.spec.addresses import (
    IP_LIKE,
    is_this_machine,
    machine_key,
    parse_ip,
    plain_ip,
)
from launcher.spec.limits import MAX_WORKERS_PER_HOST
from launcher.spec.secrets import check_env
from worker.training_spec import (
    StrictModel,
)

_HOST_PATTERN = r"^(?:[A-Za-z0-9](?:[A-Za-z0-9.\-]{0,251}[A-Za-z0-9])?|[0-9A-Fa-f:]{2,39})$"


Port = Annotated[int, Field(ge=0, le=65535)]


class CrossFieldProblems(ValueError):
    """Raised by model validators: several problems, each with a path relative to the model."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{path}: {message}" for path, message in problems))


class SshSpec(StrictModel):
    """How to reach a remote host. Unset fields fall back to ~/.ssh/config, then to defaults."""

    user: str | None = Field(
        None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_.\-]{0,31}$",
        description="SSH user name (default: ~/.ssh/config, then the local user).",
    )
    port: int | None = Field(None, ge=1, le=65535, description="SSH port (default: ~/.ssh/config, then 22).")
    identity_file: str | None = Field(
        None, min_length=1, description="Private key file (default: ~/.ssh/config, the SSH agent, ~/.ssh/id_*)."
    )
    known_hosts: str | None = Field(
        None, min_length=1, description="known_hosts file to trust (default: ~/.ssh/known_hosts)."
    )
    connect_timeout_s: float = Field(
        10.0, gt=0, le=300, description="Seconds to wait for the TCP connection and SSH handshake."
    )
    accept_unknown_host_keys: bool = Field(
        False, description="Trust and record host keys never seen before. Off by default: unknown keys are rejected."
    )
    liveness_timeout_s: float = Field(
        15.0,
        ge=1,
        le=300,
        description="This host's own liveness timeout; the same as restart.liveness_timeout_s (which applies to every "
        "host, over SSH and Slurm alike) and kept for specs that set it here. When set, it wins for this host.",
    )


TaskType = Literal["chief", "worker", "evaluator"]


class TaskSpec(StrictModel):
    """One task written out explicitly (the alternative to a host's `workers` count)."""

    type: TaskType = Field(
        description="Task type: 'chief' (at most one), 'worker', or 'evaluator' (at most one side-car that scores "
        "checkpoints)."
    )
    index: int = Field(
        ge=0, le=4095, description="Task index within its type; indices of a type run 0..n-1 across all hosts."
    )
    port: Port = Field(0, description="TF gRPC port of this task; 0 picks a free port at launch (local hosts only).")
    gpus: list[Annotated[int, Field(ge=0, le=255)]] | None = Field(
        None,
        min_length=1,
        max_length=256,
        description="GPU ids of this task alone (its CUDA_VISIBLE_DEVICES), shared with no other task; then every "
        "training task of the host lists its own. Default: the host's gpus split evenly among its training tasks.",
    )


class HostSpec(StrictModel):
    """One machine and the tasks it runs."""

    address: str = Field(
        pattern=_HOST_PATTERN, description="Host name or IP address that every other host can reach this host by."
    )
    transport: Literal["auto", "local", "ssh"] = Field(
        "auto",
        description="'local' starts tasks on this machine, 'ssh' over SSH; 'auto' is local for "
        "localhost/127.0.0.1/::1.",
    )
    workers: int | None = Field(
        None,
        ge=0,
        le=MAX_WORKERS_PER_HOST,
        description="Number of worker tasks on this host (default 1). Indices are given in host order.",
    )
    chief: bool = Field(False, description="Run the chief task on this host (in addition to its workers).")
    evaluator: bool = Field(
        False,
        description="Run the evaluator side-car on this host: it scores each new checkpoint and does not count "
        "toward the gang's success.",
    )
    ports: list[Port] | None = Field(
        None,
        max_length=258,
        description="TF port per task on this host: chief first, then workers, then the evaluator; 0 picks a free "
        "port (local hosts only). Default: all 0.",
    )
    tasks: list[TaskSpec] | None = Field(
        None,
        min_length=1,
        max_length=257,
        description="Explicit tasks with type, index and port, instead of workers/chief/ports.",
    )
    gpus: list[Annotated[int, Field(ge=0, le=255)]] | None = Field(
        None,
        max_length=256,
        description="GPU ids this host's training tasks use, as CUDA_VISIBLE_DEVICES: split evenly across them (one "
        "worker gets them all), or one each with worker_per_gpu. The count must divide evenly (no GPU left idle, none "
        "shared); an evaluator on the host gets none. [] hides every GPU from the host's tasks.",
    )
    worker_per_gpu: bool = Field(
        False, description="With gpus: one worker per listed GPU (workers defaults to the number of GPUs)."
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="Environment variables for this host's tasks (override the cluster's)."
    )
    python: str | None = Field(
        None, min_length=1, description="Python executable on this host (default: the cluster's)."
    )
    workdir: str | None = Field(
        None, min_length=1, description="Working directory on this host (default: the cluster's)."
    )
    ssh: SshSpec | None = Field(None, description="SSH settings for a remote host.")

    @field_validator("address", mode="before")
    @classmethod
    def _address_forms_of_other_tools(cls, value: Any) -> Any:
        """What ssh or a URL would take, said with where each part goes here."""
        if not isinstance(value, str):
            return value
        if "@" in value:
            host = value.rpartition("@")[2]
            raise ValueError(
                f"{without_password(value)!r} holds a user: give the address alone ({host!r}) and the user in ssh.user"
                + (" (logins use keys, never a password)" if ":" in value.rpartition("@")[0] else "")
            )
        if re.fullmatch(r"[^:\[\]]+:\d+|\[[^\]]*\]:\d+", value):
            host = value.rpartition(":")[0].strip("[]")
            raise ValueError(
                f"{value!r} holds a port: give the address alone ({host!r}), the SSH port in ssh.port and the "
                "tasks' TF ports in ports"
            )
        if value.startswith("[") and value.endswith("]"):
            raise ValueError(f"{value!r}: write an IPv6 address without brackets ({value[1:-1]!r})")
        if value.endswith(".") and len(value) > 1:
            raise ValueError(f"{value!r}: write the name without its final dot ({value.rstrip('.')!r})")
        return value

    @field_validator("address")
    @classmethod
    def _address_is_valid(cls, value: str) -> str:
        if IP_LIKE.fullmatch(value) and parse_ip(value) is None:
            raise ValueError(
                f"{value!r} looks like an IP address but is not a valid one; write it as 10.1.2.3 or fd00::3"
            )
        ip = plain_ip(value)
        if ip is not None and ip.is_unspecified:
            raise ValueError(
                f"{value!r} is the unspecified address, which no host can reach; give the address or name "
                "that the other hosts reach this host by (localhost for this machine alone)"
            )
        return value

    @model_validator(mode="after")
    def _check(self) -> HostSpec:
        problems: list[tuple[str, str]] = []
        if self.tasks is not None:
            for key in ("workers", "ports"):
                if getattr(self, key) is not None:
                    problems.append((key, "give either 'tasks' or 'workers'/'chief'/'ports', not both"))
            for key in ("chief", "evaluator"):
                if getattr(self, key):
                    problems.append((key, f"with 'tasks', declare the {key} as a task of type '{key}'"))
        elif self.ports is not None and len(self.ports) != self.task_count:
            problems.append(
                (
                    "ports",
                    f"has {len(self.ports)} entries but this host runs {self.task_count} task(s) (chief first, then "
                    f"workers); give one port per task",
                )
            )
        if self.tasks is None and self.task_count == 0:
            problems.append(("workers", "this host runs no task; set workers >= 1 or chief: true, or remove the host"))
        if self.gpus is not None and len(set(self.gpus)) != len(self.gpus):
            problems.append(("gpus", "lists a GPU id twice"))
        if self.worker_per_gpu:
            if not self.gpus:
                problems.append(("worker_per_gpu", "needs a gpus list"))
            elif self.workers is not None and self.workers != len(self.gpus):
                problems.append(
                    (
                        "workers",
                        f"is {self.workers} but worker_per_gpu with {len(self.gpus)} GPUs means {len(self.gpus)} "
                        f"workers; drop workers or fix it",
                    )
                )
        gpus = self.placement()
        problems += placement.task_gpu_problems(gpus)
        split = placement.split_problem(gpus)
        if split is not None:
            problems.append(("gpus", split))
        problems += check_env(self.env, "env")
        if problems:
            raise CrossFieldProblems(problems)
        return self

    @property
    def worker_count(self) -> int:
        if self.workers is not None:
            return self.workers
        return len(self.gpus) if self.worker_per_gpu and self.gpus else 1

    @property
    def task_count(self) -> int:
        if self.tasks is not None:
            return len(self.tasks)
        return self.worker_count + (1 if self.chief else 0) + (1 if self.evaluator else 0)

    @property
    def gpu_ids(self) -> list[int] | None:
        """Every GPU this host's tasks use: `gpus`, else the union of the tasks' own lists; None: not set."""
        return placement.gpu_ids(self.placement())

    def gpu_shares(self) -> list[list[int] | None]:
        """Each task's GPU ids, in the order of `ClusterSpec.task_entries`; None: CUDA_VISIBLE_DEVICES is not set
        (launcher/spec/placement.py)."""
        return placement.shares(self.placement())

    def placement(self) -> placement.HostGpus:
        """This host as GPU placement sees it: plain data."""
        if self.tasks is not None:
            seats = [placement.Seat(t.type, t.index, t.gpus) for t in self.tasks]
        else:  # every task counted, whatever `ports` holds (a wrong length is a problem of its own)
            kinds = ["chief"] * self.chief + ["worker"] * self.worker_count + ["evaluator"] * self.evaluator
            seats = [placement.Seat(kind, -1) for kind in kinds]
        listed = self.tasks is not None
        return placement.HostGpus(
            self.gpus, seats, listed, self.chief, self.worker_per_gpu, machine_key(self.address), self.address
        )

    @property
    def is_local(self) -> bool:
        if self.transport == "auto":
            return is_this_machine(self.address)
        return self.transport == "local"
