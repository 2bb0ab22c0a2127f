"""The cluster spec's top model: what a user writes in cluster.json, and the rules between its fields
(each host's own are launcher/spec/hosts.py).

This step only reads and checks. It never opens a socket, starts a process or touches the
environment. Every model is frozen and rejects unknown keys; cross-field rules live in model
validators and report every problem with its JSON path at once (see launcher/spec/load.py).
Addresses, paths, secrets, GPU placement and Slurm's options are checked by the modules beside
this one, which know nothing of pydantic."""

from __future__ import annotations

import os
from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from launcher.spec import placement
from launcher.spec.addresses import (
    SCHEME_SLIP,
    URL_SLIP,
    check_store_url,
    host_port,
    is_loopback,
    localhost_hint,
    machine_key,
    not_a_url,
)
from launcher.spec.elastic import ElasticSpec, elastic_problems, spare_problems
from launcher.spec.hosts import CrossFieldProblems, HostSpec, Port, TaskSpec, TaskType
from launcher.spec.limits import MAX_HOSTS, MAX_WORKERS_PER_HOST
from launcher.spec.paths import MAX_PATH_BYTES, all_visible, brief, path_that_fits
from launcher.spec.placement import CHIEF_WITH_GPUS, uneven_node_split
from launcher.spec.python_script import option_without_value, runs_nothing
from launcher.spec.restart import RestartSpec
from launcher.spec.secrets import check_env, check_secrets
from launcher.spec.slurm_options import SBATCH_OPTION, SBATCH_OWN, SBATCH_REFUSED, SLURM_TIME, SRUN_OWN
from worker.contract import DEFAULT_RUN_ROOT, is_url
from worker.training_spec import (
    BuiltinTraining,
    CommandTraining,
    StrictModel,
    TrainingSpec,
)

_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._\-]{0,63}$"


HOSTS_LATER = "hosts_later"  # validation context: the hosts come from a Slurm allocation


class SlurmSpec(StrictModel):
    """Running on a Slurm allocation instead of a host list (`launch --slurm`, `launch slurm submit`)."""

    nodes: int = Field(1, ge=1, le=MAX_HOSTS, description="Nodes to allocate (`launch slurm submit`).")
    spare_nodes: int = Field(
        0,
        ge=0,
        le=MAX_HOSTS,
        description="Nodes to allocate beyond `nodes` as spare hosts (spare_hosts): one stands in for a node gone "
        "for good. Inside an allocation, the nodes beyond `nodes` (when set) are spares whatever this says.",
    )
    tasks_per_node: int | None = Field(
        None,
        ge=1,
        le=MAX_WORKERS_PER_HOST,
        description="Workers per node (default: SLURM_NTASKS_PER_NODE inside an allocation, else 1, or one per GPU "
        "with worker_per_gpu).",
    )
    gpus_per_node: int | None = Field(
        None, ge=0, le=64, description="GPUs to allocate per node (inside an allocation: SLURM_GPUS_ON_NODE)."
    )
    worker_per_gpu: bool = Field(False, description="One worker per GPU of the node instead of tasks_per_node.")
    chief: bool = Field(False, description="Run a chief on the first node in addition to its workers.")
    port: Port = Field(
        29500,
        ge=1,
        description="TF port of the first task on each node; a node's further tasks use the next ports. Checked "
        "free on every node before the start.",
    )
    partition: str | None = Field(None, pattern=r"^[A-Za-z0-9_.,\-]+$", description="sbatch --partition.")
    account: str | None = Field(None, pattern=r"^[A-Za-z0-9_.\-]+$", description="sbatch --account.")
    time_limit: str | None = Field(
        None, pattern=SLURM_TIME, description="sbatch --time, in Slurm's format (minutes, HH:MM:SS, D-HH:MM)."
    )
    signal_before_end_s: int = Field(
        120,
        ge=0,
        le=65535,
        description="Seconds before the time limit at which Slurm sends SIGTERM to the workers (sbatch "
        "--signal=TERM@N): they save and the job is requeued (0: no warning).",
    )
    requeue: bool = Field(
        True,
        description="Submitted jobs are requeueable: a preemption (every worker saved) requeues the job, which "
        "resumes from the checkpoint. Off: a preemption restarts inside the allocation.",
    )
    sbatch_options: list[Annotated[str, Field(pattern=SBATCH_OPTION)]] = Field(
        default_factory=list,
        max_length=64,
        description="Further sbatch options, one '--name=value' each (e.g. '--qos=high', '--constraint=a100').",
    )
    srun_options: list[Annotated[str, Field(pattern=SBATCH_OPTION)]] = Field(
        default_factory=list,
        max_length=64,
        description="Further options of the srun step that runs the tasks, one '--name=value' each.",
    )

    @model_validator(mode="after")
    def _check(self) -> SlurmSpec:
        """What the allocation would refuse, said before a job waits in the queue for its GPUs (the
        allocation checks again with the GPUs it got: SLURM_GPUS_ON_NODE when gpus_per_node is unset)."""
        gpus = self.gpus_per_node
        problems: list[tuple[str, str]] = []
        if gpus and self.chief:
            problems.append(("chief", f"a chief with GPUs: {CHIEF_WITH_GPUS}"))
        if gpus == 0 and self.worker_per_gpu:
            problems.append(("worker_per_gpu", "gpus_per_node is 0; ask for GPUs, or set tasks_per_node instead"))
        if self.nodes + self.spare_nodes > MAX_HOSTS:
            problems.append(("spare_nodes", f"nodes and spare_nodes together are over {MAX_HOSTS}; use fewer"))
        uneven = uneven_node_split(self.tasks_per_node, gpus) if self.tasks_per_node else None
        if uneven:
            problems.append(("tasks_per_node", uneven))
        for i, option in enumerate(self.sbatch_options):
            name = option[2:].split("=", 1)[0]
            if name in SBATCH_OWN:
                problems.append(
                    (f"sbatch_options[{i}]", f"the launcher writes --{name} from {SBATCH_OWN[name]}; set that")
                )
            elif name in SBATCH_REFUSED:
                problems.append((f"sbatch_options[{i}]", f"--{name}: {SBATCH_REFUSED[name]}"))
        for i, option in enumerate(self.srun_options):
            name = option[2:].split("=", 1)[0]
            if name in SRUN_OWN:
                problems.append(
                    (
                        f"srun_options[{i}]",
                        f"--{name} is the launcher's own for the step that runs the host agents (their channel "
                        "and placement); leave it out",
                    )
                )
        if problems:
            raise CrossFieldProblems(problems)
        return self


class ClusterSpec(StrictModel):
    """A whole training job: where its tasks run and what they run."""

    name: str = Field(
        pattern=_NAME_PATTERN,
        description=(
            "Run name: 1 to 64 ASCII letters, digits, '.', '_' or '-', the first a letter or digit; names the "
            "run directory."
        ),
    )
    hosts: list[HostSpec] = Field(
        default_factory=list,
        max_length=MAX_HOSTS,
        description="Machines and the tasks each runs. Not needed on Slurm (`launch --slurm`, `launch slurm "
        "submit`): there the allocation's nodes are the hosts.",
    )
    run_root: str = Field(
        DEFAULT_RUN_ROOT,
        min_length=1,
        description=(
            "Local directory under which <run_root>/<name> holds logs, results and the summary; a relative one "
            "is taken from the directory launch runs in (not the spec file's), and ~ is the launcher's home."
        ),
    )
    umask: str = Field(
        "077",
        pattern=r"^0?[0-7]{3}$",
        description="umask of every task (octal): 077, the default, makes what tasks write (checkpoints, exports, "
        "TensorBoard) readable by their user only; 027 lets the group read it. Others may never write: a "
        "checkpoint they could change would be restored.",
    )

    local_network: Literal["private", "host"] = Field(
        "private",
        description="Where a gang whose tasks all run on this machine listens. private (the default): in a "
        "network of its own, which no other machine can reach (TensorFlow's task servers listen on every interface "
        "and run what they are sent, unauthenticated); it goes out through slirp4netns, and reaches a service on "
        "this machine's loopback at 10.0.2.2. Where that cannot be made, as root, a firewall rule closes the ports; "
        "else the console says they are open. host: this machine's network, as tasks on remote hosts always are.",
    )

    @field_validator("umask")
    @classmethod
    def _others_never_write(cls, value: str) -> str:
        if not int(value, 8) & 0o002:
            raise ValueError(
                f"{value!r} lets every user of the host write the tasks' checkpoints, which a run would restore; "
                f"give one that takes write from others, such as {int(value, 8) | 0o022:03o}"
            )
        return value

    checkpoint_dir: str | None = Field(
        None,
        min_length=1,
        description="Shared checkpoint directory every host can read and write (default: <run dir>/checkpoints), or "
        "an object-store URL such as gs://bucket/run that TensorFlow reads and writes itself. Like run_root, a "
        "relative path is taken from the directory launch runs in and ~ is the launcher's home.",
    )
    workdir: str | None = Field(
        None,
        min_length=1,
        description="Working directory of every task (default: the launcher's working directory for local hosts, the "
        "SSH home for remote ones).",
    )
    python: str | None = Field(
        None,
        min_length=1,
        description="Python executable of the tasks (default: the launcher's own for local hosts, 'python3' for "
        "remote ones).",
    )
    env: dict[str, str] = Field(default_factory=dict, description="Environment variables for every task.")
    secrets: list[Annotated[str, Field(min_length=1, max_length=256)]] = Field(
        default_factory=list,
        description="Names of environment variables (or command-line flags, without dashes) whose values are "
        "secret, beyond those the launcher recognises by name (PASSWORD, TOKEN, KEY, ...) or form (private keys, "
        "known token formats): masked wherever the launcher shows or writes them.",
    )
    training: TrainingSpec = Field(default_factory=lambda: BuiltinTraining(), description="What every task runs.")
    restart: RestartSpec = Field(default_factory=lambda: RestartSpec(), description="Supervision settings.")
    slurm: SlurmSpec | None = Field(None, description="Settings for running on Slurm instead of a host list.")
    spare_hosts: list[HostSpec] = Field(
        default_factory=list,
        max_length=MAX_HOSTS,
        description="Machines that stand in for a host gone for good (unreachable, or the root cause of "
        "restart.exclude_host_after failed attempts in a row): each is written as a host with `workers` (and "
        "`ports`, `gpus`) and gets its agent and preflight at launch; it takes the lost host's tasks, names and "
        "data shards, and the gang restarts from its newest checkpoint. On Slurm, nodes beyond the hosts are spares.",
    )
    elastic: ElasticSpec | None = Field(
        None, description="Let the gang shrink when a host is gone and no spare is left (unset: it never shrinks)."
    )

    @field_validator("run_root")
    @classmethod
    def _run_root_is_local(cls, value: str) -> str:
        if is_url(value):
            raise ValueError(
                f"{brief(value)} is a URL; run_root is a directory on the launcher's machine (logs, summary)"
            )
        if SCHEME_SLIP.match(value):  # `gs:/b`, `gs:://b`, `://b`: a URL mistyped, not a directory meant
            raise ValueError(
                f"{brief(value)} looks like a URL; run_root is a directory on the launcher's machine (logs, "
                f"summary); for a local directory of that name, write {brief('./' + value)}"
            )
        return path_that_fits(os.path.expanduser(value))

    @field_validator("checkpoint_dir")
    @classmethod
    def _url_or_path(cls, value: str | None) -> str | None:
        slip = URL_SLIP.match(value or "")
        if slip is not None:  # `gs:/bucket` or `gs//bucket` would be a local directory named so
            scheme, rest = slip.group(1), (value[slip.end() :] if value else "").lstrip(":/")
            rest = rest if len(rest) <= 80 else rest[:77] + "..."
            raise ValueError(
                f"{brief(value or '')} looks like a {scheme}:// URL with a slash or colon missing (or one too "
                f"many), and would be taken as a local directory: write {scheme}://{rest}"
            )
        if value is not None and is_url(value):
            all_visible(value)
            size = len(value.encode("utf-8", "surrogatepass"))
            if size > MAX_PATH_BYTES:  # every task gets it in its environment
                raise ValueError(f"is {size} bytes long; give a URL of at most {MAX_PATH_BYTES}")
            check_store_url(value)
        if value is not None and "://" in value and not is_url(value):  # else a local directory named gs:
            raise ValueError(
                f"{brief(value)} looks like a URL but is not one ({not_a_url(value)}): write it as "
                "scheme://bucket/path, or give a directory path without '://'"
            )
        return value if value is None or is_url(value) else path_that_fits(os.path.expanduser(value))

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> ClusterSpec:
        problems = check_env(self.env, "env") + self._command_problems()
        envs = [("env", self.env), *((f"hosts[{i}].env", h.env) for i, h in enumerate(self.hosts))]
        envs += [(f"spare_hosts[{i}].env", h.env) for i, h in enumerate(self.spare_hosts)]
        problems += check_secrets(self.secrets, envs)
        if not self.hosts:
            if (info.context or {}).get(HOSTS_LATER):
                if self.elastic is not None and self.slurm is not None and self.elastic.min_hosts >= self.slurm.nodes:
                    problems.append(("elastic.min_hosts", f"give fewer than slurm.nodes ({self.slurm.nodes})"))
                if self.spare_hosts:
                    said = "on Slurm the allocation's nodes beyond slurm.nodes are the spares: set slurm.spare_nodes"
                    problems.append(("spare_hosts", said))
                if problems:
                    raise CrossFieldProblems(problems)
                return self  # the allocation's nodes become the hosts; checked again with them
            problems.append(
                (
                    "hosts",
                    "is required: the machines and the tasks each runs. On Slurm the allocation is the host list: "
                    "run `launch --slurm` inside an allocation or `launch slurm submit`",
                )
            )
            raise CrossFieldProblems(problems)
        entries = [self.task_entries(h) for h in self.hosts]  # once: every check below walks them
        problems += self._role_problems(entries) + self._port_problems(entries) + self._loopback_problems()
        problems += _tf_config_size_problems(self.hosts, entries) + self._gpu_problems()
        problems += spare_problems(self.hosts, self.spare_hosts)
        problems += elastic_problems(self.elastic, self.hosts, entries, self.training)
        if problems:
            raise CrossFieldProblems(problems)
        return self

    def _command_problems(self) -> list[tuple[str, str]]:
        """A python command that would read its program from standard input, or give an option no value."""
        if not isinstance(self.training, CommandTraining):
            return []
        argv, problems = self.training.argv, []
        if runs_nothing(argv):
            problems.append(
                (
                    "training.argv",
                    f"{argv[0]} is given no script, -m module or -c code (the command after --, or "
                    "training.argv): it would read its program from standard input, which a task does not have, "
                    f"and exit at once as if it had trained; give the script: {argv[0]} train.py",
                )
            )
        bare = option_without_value(argv)
        if bare is not None:
            what = "a module name (-m train)" if bare == "-m" else "the code to run (-c 'import ...')"
            problems.append(("training.argv", f"{bare} is given nothing after it: python would refuse it; give {what}"))
        return problems

    def _role_problems(self, entries: list[list[TaskSpec]]) -> list[tuple[str, str]]:
        """One form of host, at most one chief and one evaluator, indices 0..n-1, and a worker at least."""
        problems: list[tuple[str, str]] = []
        explicit = [h.tasks is not None for h in self.hosts]
        if any(explicit) and not all(explicit):
            problems.append(("hosts", "mix of hosts with 'tasks' and hosts with 'workers'; use one form on every host"))
        for kind in ("chief", "evaluator"):
            found = [i for i, tasks in enumerate(entries) for t in tasks if t.type == kind]
            if len(found) > 1:
                problems.append(
                    (
                        f"hosts[{found[1]}]",
                        f"a second {kind} (hosts[{found[0]}] already has one); a cluster has at most one {kind}",
                    )
                )
            if kind == "evaluator" and found and not isinstance(self.training, BuiltinTraining):
                problems.append(
                    (
                        f"hosts[{found[0]}]",
                        "the evaluator side-car runs with training.kind 'builtin' only; remove it or use the "
                        "built-in runtime",
                    )
                )
        if all(explicit):
            for kind in ("chief", "worker", "evaluator"):
                indices = sorted(t.index for h in self.hosts for t in h.tasks or [] if t.type == kind)
                if indices and indices != list(range(len(indices))):
                    problems.append(
                        ("hosts", f"{kind} indices are {indices}; they must be 0..{len(indices) - 1}, each once")
                    )
        if not any(t.type == "worker" for tasks in entries for t in tasks):
            problems.append(("hosts", "no worker task; MultiWorkerMirroredStrategy needs at least one worker"))
        return problems

    def _port_problems(self, entries: list[list[TaskSpec]]) -> list[tuple[str, str]]:
        """Port 0 only on local hosts (a remote host's peers dial its ports), and every host:port once."""
        problems: list[tuple[str, str]] = []
        seen: dict[tuple[str, int], int] = {}
        for i, host in enumerate(self.hosts):
            for j, task in enumerate(entries[i]):
                where = f"hosts[{i}].tasks[{j}].port" if host.tasks is not None else f"hosts[{i}].ports[{j}]"
                if task.port == 0:
                    if host.is_local:
                        continue
                    problems.append(_port_zero_problem(i, host, where))
                    break
                key = (machine_key(host.address), task.port)
                if key in seen:
                    problems.append(
                        (
                            where,
                            f"{host_port(host.address, task.port)} is used twice (also in hosts[{seen[key]}]); "
                            "every task needs its own host:port",
                        )
                    )
                seen[key] = i
        return problems

    def _loopback_problems(self) -> list[tuple[str, str]]:
        """A loopback address cannot be reached from the other hosts of a multi-host cluster."""
        if not self.is_multi_host or all(is_loopback(h.address) for h in self.hosts):
            return []
        return [
            (
                f"hosts[{i}].address",
                f"'{host.address}' cannot be reached from the other hosts of a multi-host cluster; use "
                f"this machine's name or network address",
            )
            for i, host in enumerate(self.hosts)
            if is_loopback(host.address)
        ]

    def _gpu_problems(self) -> list[tuple[str, str]]:
        """The placement's checks across hosts (launcher/spec/placement.py)."""
        hosts = [host.placement() for host in self.hosts]
        shares = [placement.shares(host) for host in hosts]  # each host's, once for the three checks
        visible = "CUDA_VISIBLE_DEVICES"
        return (
            placement.count_problems(hosts, shares)
            + placement.shared_across_entries(hosts, shares)
            + placement.visible_devices_problems(shares, [visible in h.env for h in self.hosts], visible in self.env)
        )

    @staticmethod
    def task_entries(host: HostSpec) -> list[TaskSpec]:
        """The tasks of one host; count-form hosts get index -1 (assigned in host order by plan)."""
        if host.tasks is not None:
            return list(host.tasks)
        ports = host.ports or [0] * host.task_count
        types: list[TaskType] = []
        if host.chief:
            types.append("chief")
        types += ["worker"] * host.worker_count
        if host.evaluator:
            types.append("evaluator")
        return [TaskSpec.model_construct(type=t, index=-1, port=p) for t, p in zip(types, ports, strict=False)]

    def liveness_of(self, host: HostSpec) -> tuple[float, str]:
        """The host's liveness timeout and the setting it came from (named in the loss message)."""
        if host.ssh is not None and "liveness_timeout_s" in host.ssh.model_fields_set:
            return host.ssh.liveness_timeout_s, "ssh.liveness_timeout_s"
        return self.restart.liveness_timeout_s, "restart.liveness_timeout_s"

    @property
    def is_multi_host(self) -> bool:
        """More than one machine (every spelling of loopback is this one machine)."""
        return len({machine_key(h.address) for h in self.hosts}) > 1


def _port_zero_problem(i: int, host: HostSpec, where: str) -> tuple[str, str]:
    """Port 0 (a free port picked at launch) on a remote host: its peers could not know what to dial."""
    given = bool(host.ports or host.tasks)
    if given:
        says = f"port 0 (pick a free one) only works for local hosts; give {host.address} explicit ports"
    else:
        says = f"a remote host needs explicit ports: give {host.address} one per task (its peers dial them)"
    return (where if given else f"hosts[{i}].ports", says + localhost_hint(host.address))


# Linux takes one environment string of at most 32 pages (MAX_ARG_STRLEN, "TF_CONFIG=" and its NUL
# included); a longer one fails every task's exec with E2BIG.
MAX_TF_CONFIG_BYTES = 32 * 4096 - len("TF_CONFIG=") - 1


def _tf_config_size_problems(hosts: list[HostSpec], entries: list[list[TaskSpec]]) -> list[tuple[str, str]]:
    """A cluster too large for TF_CONFIG: it lists every training task's `host:port`, and TensorFlow
    reads it from the environment only. Sized as the agents write it (a port 0 counted at 5 digits)."""
    size = 128  # the keys, the task part and the brackets around it all
    tasks = 0
    for host, host_tasks in zip(hosts, entries, strict=True):
        name = len(host.address) + (2 if ":" in host.address else 0)
        for task in host_tasks:
            if task.type != "evaluator":
                size += name + len(str(task.port or 65535)) + 5  # "host:port", with its quotes, comma and space
                tasks += 1
    if size <= MAX_TF_CONFIG_BYTES:
        return []
    return [
        (
            "hosts",
            f"{tasks} training tasks make each task's TF_CONFIG about {size // 1024} KiB, over the "
            f"{MAX_TF_CONFIG_BYTES // 1024} KiB Linux allows one environment variable (TensorFlow reads the "
            "cluster from there only): use fewer tasks (more devices per worker: devices_per_worker, or not "
            "worker_per_gpu), or shorter host addresses (IP addresses instead of long names)",
        )
    ]
