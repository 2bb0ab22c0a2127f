"""What a spec becomes on Kubernetes, whichever engine runs it: groups of pods, their container,
storage and environment, and the spec's settings Kubernetes cannot keep.

Pure, like the plan: no cluster, no files, no environment. Hosts have no meaning on Kubernetes (the
scheduler places pods): the spec's hosts only say how many tasks of each type there are, the GPUs
each task gets and its environment, and every pod of a type must get the same of both (one pod
template per type). Each task listens on one port in its own pod. The pods compute their TF_CONFIG
themselves (`worker.pod`) from the layout written here and their index.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from launcher.common.errors import SpecError, SpecProblem, UsageError
from launcher.common.masking import Redactor, mask_value, secret_arguments
from launcher.k8s.names import (
    Toleration,
    check_label,
    check_namespace,
    check_object_name,
    check_quantity,
    check_shown,
)
from launcher.k8s.yaml_text import scalar
from launcher.plan import runtime_env, task_slots
from launcher.spec.masked import redactor_of
from launcher.spec.models import ClusterSpec
from worker.contract import JOB_COMPLETION_INDEX_VAR, POD_LAYOUT_VAR, POD_TASK_TYPE_VAR, RunLayout, is_url
from worker.pod import TASK_TYPES, PodLayout
from worker.training_spec import CommandTraining

FORMATS = ("jobset", "tfjob")
DEFAULT_PORT = 2222  # TFJob's default; every task has a pod, and so an address, of its own
CONTAINER = "tensorflow"  # the container name TFJob requires; the JobSet form uses it too
MOUNT_PATH = "/tflaunch"  # the run's storage in every pod: run directory, and checkpoints unless a URL
VOLUME = "run"
SHM_VOLUME = "dshm"  # a GPU pod's /dev/shm: the runtime's default is 64 MiB, and NCCL keeps buffers there
IMAGE_UID = 1000  # the project's image runs as uid/gid 1000 (docker/Dockerfile: USER 1000:1000)
IMAGE_GID = 1000  # the volume must be writable for that group
_DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_PROBE_PERIOD_S = 5
# Variables a controller sets in each pod, which the pods' entry point reads: a spec's value would
# stand in for the controller's (the Job controller only adds JOB_COMPLETION_INDEX when it is missing).
CONTROLLER_VARS = {
    JOB_COMPLETION_INDEX_VAR: "the Job controller sets it to each pod's index in its Indexed Job (the TFJob form, "
    "from the replica index); given here, every pod would get this value and be the same task",
}


@dataclass(frozen=True)
class ExportOptions:
    """What the command line adds to the spec for Kubernetes."""

    image: str
    format: str = "jobset"
    name: str | None = None  # default: the spec's name
    port: int = DEFAULT_PORT
    checkpoint_claim: str | None = None  # a ReadWriteMany PersistentVolumeClaim mounted at MOUNT_PATH
    claim_size: str | None = None  # also write that claim, of this size
    storage_class: str | None = None
    secret: str | None = None  # the Secret that holds every secret-looking value of the spec's env
    namespace: str | None = None  # every object's; default: kubectl's current namespace
    labels: tuple[tuple[str, str], ...] = ()  # on every object written (Kueue: kueue.x-k8s.io/queue-name)
    node_selector: tuple[tuple[str, str], ...] = ()  # every pod's
    tolerations: tuple[Toleration, ...] = ()  # every pod's
    cpu: str | None = None  # every pod's request
    memory: str | None = None  # every pod's request
    network_policy: bool = False  # also write a NetworkPolicy: the TF port open to the job's own pods only

    def check(self) -> None:
        """Refuse flags that cannot make a valid manifest, naming the flag."""
        check_shown("--image", self.image)
        if not self.image.strip() or any(c.isspace() for c in self.image):
            raise UsageError(f"Got --image {self.image!r}: give an image reference such as registry/tflaunch:0.1.0.")
        if self.format not in FORMATS:
            raise UsageError(f"Got --format {self.format!r}: use {' or '.join(FORMATS)}.")
        if not 1 <= self.port <= 65535:
            raise UsageError(f"Got --port {self.port}: a port is 1..65535.")
        for flag, value in (
            ("--checkpoint-claim", self.checkpoint_claim),
            ("--secret", self.secret),
            ("--storage-class", self.storage_class),
        ):
            if value is not None:
                check_object_name(flag, value)
        if self.claim_size is not None:
            if self.checkpoint_claim is None:
                raise UsageError("--claim-size writes the claim named by --checkpoint-claim; give that too.")
            check_quantity("--claim-size", self.claim_size, "storage")
        if self.storage_class is not None and self.claim_size is None:
            raise UsageError("--storage-class goes with --claim-size (the claim this command writes).")
        if self.namespace is not None:
            check_namespace(self.namespace)
        for flag, pairs in (("--label", self.labels), ("--node-selector", self.node_selector)):
            for key, value in pairs:
                check_label(flag, key, value)
        for toleration in self.tolerations:
            toleration.check()
        if self.cpu is not None:
            check_quantity("--cpu", self.cpu, "cpu")
        if self.memory is not None:
            check_quantity("--memory", self.memory, "memory")


@dataclass(frozen=True)
class TaskGroup:
    """The pods of one task type: one Indexed Job of the JobSet, or one replica spec of the TFJob."""

    task_type: str
    count: int
    gpus: int  # nvidia.com/gpu of each pod; 0: none
    hide_gpus: bool  # CUDA_VISIBLE_DEVICES="" (an evaluator on a GPU host scores on CPU, as in the plan)
    env: dict[str, str]  # the spec's env for these tasks: the cluster's, then their host's

    @property
    def sidecar(self) -> bool:
        return self.task_type == "evaluator"


@dataclass(frozen=True)
class Export:
    """Everything one export writes: manifests (file name, object) and what to tell the user."""

    manifests: tuple[tuple[str, dict[str, Any]], ...]
    comments: tuple[str, ...]  # the head of the YAML: what it needs and what it does not enforce
    warnings: tuple[str, ...]  # printed once: guarantees this engine cannot keep


def k8s_name(spec: ClusterSpec, options: ExportOptions, longest_suffix: str) -> str:
    """The name of the job's objects; its pods' names (name + suffix) must be DNS labels too."""
    name = options.name or spec.name
    where = "--name" if options.name else "the spec's name"
    if not _DNS_LABEL.fullmatch(name):
        hint = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
        hint = hint if hint[:1].isalpha() else f"run-{hint}".rstrip("-")
        raise UsageError(
            f"Got {name!r} ({where}): Kubernetes names are lowercase letters, digits and '-', starting with a "
            f"letter; give --name {hint}."
        )
    if len(name + longest_suffix) > 63:
        raise UsageError(
            f"Got {name!r} ({where}): its longest pod name, {name}{longest_suffix}, would pass the 63 characters "
            f"Kubernetes allows; give a --name of at most {63 - len(longest_suffix)} characters."
        )
    return name


def shared_url(path: str | None) -> bool:
    """An object store every pod reaches: a URL, but not file:// or ram://, which stay inside each pod."""
    return path is not None and is_url(path) and path.split("://", 1)[0].lower() not in ("file", "ram")


def task_groups(spec: ClusterSpec, source: str) -> list[TaskGroup]:
    """One group per task type, chief first; refused when tasks of a type differ in GPUs or env."""
    slots = task_slots(spec)
    groups: list[TaskGroup] = []
    problems: list[SpecProblem] = []
    for task_type in TASK_TYPES:
        members = [slot for slot in slots if slot.task_type == task_type]
        if not members:
            continue
        shapes = []
        for slot in members:  # slot.gpus: the host's share for this task, as the plan gives it
            env = {**spec.env, **slot.host.env}
            if slot.gpus is None:  # the host lists no GPUs: no request, and a CUDA_VISIBLE_DEVICES of the
                shapes.append((slot, 0, False, env))  # spec's env reaches the pod as written
                continue
            env.pop("CUDA_VISIBLE_DEVICES", None)  # the host's GPUs decide, as in the plan; in a pod, the device plugin
            shapes.append((slot, len(slot.gpus), not slot.gpus, env))
        first = shapes[0]
        for slot, gpus, hidden, env in shapes[1:]:
            if (gpus, hidden) != first[1:3]:
                problems.append(
                    SpecProblem(
                        f"$.hosts[{slot.host_index}].gpus",
                        f"{slot.name} would get {gpus} GPU(s) but {first[0].name} (hosts[{first[0].host_index}]) "
                        f"{first[1]}; every pod of a type gets the same resources on Kubernetes: give every "
                        f"{task_type} the same number of GPUs",
                    )
                )
                break
            if env != first[3]:
                problems.append(
                    SpecProblem(
                        f"$.hosts[{slot.host_index}].env",
                        f"{slot.name} would get another environment than {first[0].name} (hosts"
                        f"[{first[0].host_index}]); every pod of a type gets one environment on Kubernetes: move the "
                        f"values to the spec's env",
                    )
                )
                break
        groups.append(TaskGroup(task_type, len(members), first[1], first[2], first[3]))
    problems += _controller_vars(spec)
    problems += _written_secrets(spec)
    if spec.elastic is not None:
        problems.append(
            SpecProblem(
                "$.elastic",
                "a JobSet (or TFJob) runs a fixed number of pods and restarts them all on whatever nodes the "
                "scheduler finds, so the gang never shrinks there: remove elastic for the export "
                "(docs/kubernetes.md)",
            )
        )
    if problems:
        raise SpecError(source, problems)
    return groups


def _controller_vars(spec: ClusterSpec) -> list[SpecProblem]:
    """The spec's env may not set what a controller sets in each pod (CONTROLLER_VARS)."""
    envs = [("$.env", spec.env), *((f"$.hosts[{i}].env", host.env) for i, host in enumerate(spec.hosts))]
    return [
        SpecProblem(
            f"{where}.{key}", f"{CONTROLLER_VARS[key]}; remove it from the env of a spec exported to Kubernetes"
        )
        for where, env in envs
        for key in env
        if key in CONTROLLER_VARS
    ]


def _secret_strings(data: Any, path: str, hide: Redactor) -> list[str]:
    """JSON paths of the strings in `data` that the launcher masks wherever it shows them."""
    if isinstance(data, dict):
        return [found for key, value in data.items() for found in _secret_strings(value, f"{path}.{key}", hide)]
    if isinstance(data, list):
        return [found for i, value in enumerate(data) for found in _secret_strings(value, f"{path}[{i}]", hide)]
    return [path] if isinstance(data, str) and hide.text(data) != data else []


def _written_secrets(spec: ClusterSpec) -> list[SpecProblem]:
    """checkpoint_dir and training go into the manifest as they are (and checkpoint_dir into its head
    comments): a password in them would be written in plain text, where `--secret` cannot reach."""
    hide = redactor_of(spec)  # every value the launcher knows to be secret, a declared one's in any word too
    paths = _secret_strings(spec.checkpoint_dir, "$.checkpoint_dir", hide)
    paths += _secret_strings(spec.training.model_dump(mode="json"), "$.training", hide)
    if isinstance(spec.training, CommandTraining):  # `--token X`: the plan keeps it off the command line
        secret = set(secret_arguments(spec.training.argv[1:], spec.secrets))  # values: `--password=X` gives X
        paths += [
            f"$.training.argv[{i}]"
            for i, arg in enumerate(spec.training.argv)
            if i and any(value in arg for value in secret)
        ]
        paths = list(dict.fromkeys(paths))
    return [
        SpecProblem(
            path,
            "holds a secret (a password in a URL, a token), which a manifest would carry in plain text; leave it out "
            "and let the task read it from an env var of the spec, whose value comes from the Secret (--secret)",
        )
        for path in paths
    ]


def pod_layout(spec: ClusterSpec, groups: list[TaskGroup], name: str, host: str, options: ExportOptions) -> PodLayout:
    """The layout every pod gets: run directory on the volume, checkpoints beside it or at the URL."""
    run_dir = f"{MOUNT_PATH}/{name}"
    if shared_url(spec.checkpoint_dir):
        checkpoint_dir = str(spec.checkpoint_dir)  # gs://... reaches TensorFlow untouched, as on hosts
    elif options.checkpoint_claim is not None:
        checkpoint_dir = RunLayout(run_dir).default_checkpoint_dir
    else:
        raise UsageError(
            "Checkpoints need storage every pod shares: give --checkpoint-claim NAME (a ReadWriteMany "
            f"PersistentVolumeClaim, mounted at {MOUNT_PATH}; add --claim-size SIZE to write it too), or set the "
            "spec's checkpoint_dir to an object-store URL such as gs://bucket/run (file:// and ram:// stay inside "
            "each pod)."
        )
    return PodLayout(
        run_name=name,
        run_dir=run_dir,
        checkpoint_dir=checkpoint_dir,
        host=host,
        port=options.port,
        tasks={group.task_type: group.count for group in groups},
        training=spec.training.model_dump(mode="json"),
        preemption_exit_code=spec.restart.preemption_exit_code,
        umask=spec.umask,
    )


def secret_keys(spec: ClusterSpec) -> list[str]:
    """Env keys whose values are never written into a manifest: secret-looking names, names the spec
    declares secret (`secrets`), URLs with passwords."""
    keys: dict[str, None] = {}
    hide = redactor_of(spec)  # a value known to be secret under another name (DB_PASS's, in PLAIN_X) too
    for env in (spec.env, *(host.env for host in spec.hosts)):
        for key, value in env.items():
            if mask_value(key, value, spec.secrets) != value or hide.text(value) != value:
                keys[key] = None
    return list(keys)


def kubelet_literal(text: str) -> str:
    """`text` as the kubelet passes it on unchanged: it expands `$(NAME)` and turns `$$` into `$` in
    every env value, command and argument, so each `$` is written doubled."""
    return text.replace("$", "$$")


def _env_entries(group: TaskGroup, spec: ClusterSpec, options: ExportOptions) -> list[dict[str, Any]]:
    secret = set(secret_keys(spec))
    if secret and options.secret is None:
        raise UsageError(
            f"The spec's env has secret values ({', '.join(sorted(secret))}), which are never written into a "
            f"manifest: give --secret NAME, a Secret holding them under the same keys "
            f"(kubectl create secret generic NAME --from-literal=KEY=...)."
        )
    # What the plan sets on top of the spec's env wins over it here too.
    fixed = runtime_env(spec)
    if group.hide_gpus:
        fixed["CUDA_VISIBLE_DEVICES"] = ""
    entries: list[dict[str, Any]] = []
    for key, value in group.env.items():
        if key in fixed:
            continue
        if key in secret:
            entries.append({"name": key, "valueFrom": {"secretKeyRef": {"name": options.secret, "key": key}}})
        else:
            entries.append({"name": key, "value": value})
    return entries + [{"name": key, "value": value} for key, value in fixed.items()]


def container(
    group: TaskGroup,
    spec: ClusterSpec,
    layout: PodLayout,
    options: ExportOptions,
    port_name: str,
    pod_env: list[dict[str, Any]],
) -> dict[str, Any]:
    """The task's container: `python -m worker.pod`, which computes TF_CONFIG and runs the task.

    Every literal env value and every argument is written for the kubelet (`kubelet_literal`), so the
    task gets them as the plan has them; values from a reference (Secret, label) are never expanded."""
    env = _env_entries(group, spec, options)
    env.append({"name": POD_LAYOUT_VAR, "value": layout.to_json()})
    env.append({"name": POD_TASK_TYPE_VAR, "value": group.task_type})
    env = [{**entry, "value": kubelet_literal(entry["value"])} if "value" in entry else entry for entry in env]
    env += pod_env
    command = ["python", "-m", "worker.pod"]
    if isinstance(spec.training, CommandTraining):
        command += ["--", *spec.training.argv]
    result: dict[str, Any] = {
        "name": CONTAINER,
        "image": options.image,
        "command": [kubelet_literal(arg) for arg in command],
        "ports": [{"name": port_name, "containerPort": options.port}],
        "env": env,
    }
    resources = _resources(group, options)
    if resources:
        result["resources"] = resources
    probe = startup_probe(spec, group, options.port)
    if probe is not None:
        result["startupProbe"] = probe
    result["securityContext"] = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    result["volumeMounts"] = [{"name": VOLUME, "mountPath": MOUNT_PATH}]
    if group.gpus:
        result["volumeMounts"].append({"name": SHM_VOLUME, "mountPath": "/dev/shm"})
    return result


def _resources(group: TaskGroup, options: ExportOptions) -> dict[str, Any]:
    requests = {key: value for key, value in (("cpu", options.cpu), ("memory", options.memory)) if value is not None}
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if group.gpus:
        resources["limits"] = {"nvidia.com/gpu": group.gpus}
    return resources


def startup_probe(spec: ClusterSpec, group: TaskGroup, port: int) -> dict[str, Any] | None:
    """start_timeout_s, as far as Kubernetes has a knob for it: a training task's TensorFlow server
    (which starts as the strategy is built) must listen within that long of its container starting,
    or the kubelet stops the pod and the gang restarts (counted). The built-in runtime and function
    targets only, like the launcher's deadline: a user's command may build its strategy late."""
    if group.sidecar or isinstance(spec.training, CommandTraining):
        return None
    timeout = spec.restart.start_timeout_s
    period = _PROBE_PERIOD_S if timeout >= _PROBE_PERIOD_S else 1
    return {
        "tcpSocket": {"port": port},
        "periodSeconds": period,
        "failureThreshold": max(1, math.ceil(timeout / period)),
    }


def pod_spec(
    containers: list[dict[str, Any]], spec: ClusterSpec, options: ExportOptions, restart_policy: str | None
) -> dict[str, Any]:
    """The pod: its grace period, placement, storage and security.

    It meets the Pod Security Standards' "restricted" profile (a namespace that enforces it admits
    it): non-root uid and gid of the image, no privilege escalation, no capabilities, the runtime's
    seccomp profile. It gets no service-account token (the task never talks to the API server) and no
    service links (its environment is the plan's and nothing else)."""
    volume: dict[str, Any] = {"name": VOLUME}
    if options.checkpoint_claim is not None:
        volume["persistentVolumeClaim"] = {"claimName": options.checkpoint_claim}
    else:
        volume["emptyDir"] = {}  # the run directory only; the checkpoints are at the object-store URL
    result: dict[str, Any] = {}
    if restart_policy is not None:
        result["restartPolicy"] = restart_policy
    result["terminationGracePeriodSeconds"] = math.ceil(spec.restart.grace_period_s)
    result["automountServiceAccountToken"] = False
    result["enableServiceLinks"] = False
    if options.node_selector:
        result["nodeSelector"] = dict(options.node_selector)
    if options.tolerations:
        result["tolerations"] = [toleration.manifest() for toleration in options.tolerations]
    result["securityContext"] = {
        "runAsNonRoot": True,
        "runAsUser": IMAGE_UID,
        "runAsGroup": IMAGE_GID,
        "fsGroup": IMAGE_GID,
        # The claim's files already belong to the group after the first pod: checking the top
        # directory spares every later pod a walk of every checkpoint.
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    result["containers"] = containers
    result["volumes"] = [volume]
    if any(mount["name"] == SHM_VOLUME for box in containers for mount in box["volumeMounts"]):
        # memory-backed, counted against the pod's memory like the tasks' own pages
        result["volumes"].append({"name": SHM_VOLUME, "emptyDir": {"medium": "Memory"}})
    return result


def object_meta(name: str, options: ExportOptions) -> dict[str, Any]:
    """The metadata of every object written: its name, the namespace and the labels asked for."""
    meta: dict[str, Any] = {"name": name}
    if options.namespace is not None:
        meta["namespace"] = options.namespace
    if options.labels:
        meta["labels"] = dict(options.labels)
    return meta


def claim_manifest(options: ExportOptions) -> dict[str, Any] | None:
    """The checkpoint claim, when asked to write it (--claim-size): ReadWriteMany, every pod mounts it."""
    if options.claim_size is None or options.checkpoint_claim is None:
        return None
    claim: dict[str, Any] = {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": options.claim_size}},
    }
    if options.storage_class is not None:
        claim["storageClassName"] = options.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": object_meta(options.checkpoint_claim, options),
        "spec": claim,
    }


def network_policy(name: str, pod_labels: dict[str, str], options: ExportOptions) -> dict[str, Any] | None:
    """With --network-policy: the job's pods admit connections only to the TF port, and only from
    pods of the same job (`pod_labels`, set by the engine). TensorFlow's gRPC port has no
    authentication; anything that reaches it can join or stop the training."""
    if not options.network_policy:
        return None
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": object_meta(name, options),
        "spec": {
            "podSelector": {"matchLabels": pod_labels},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [{"podSelector": {"matchLabels": pod_labels}}],
                    "ports": [{"protocol": "TCP", "port": options.port}],
                }
            ],
        },
    }


def storage_notes(options: ExportOptions, name: str) -> list[str]:
    """What is lost without a claim: the run directory lives in each pod's emptyDir."""
    if options.checkpoint_claim is not None:
        return []
    return [
        f"The run directory {MOUNT_PATH}/{name} is not kept: without --checkpoint-claim it is an emptyDir, deleted "
        f"with its pod, so the tasks' result and error files, metrics.jsonl and eval.jsonl are lost when a pod ends "
        f"or restarts (checkpoints, the model and TensorBoard logs are kept at the checkpoint_dir URL). Give "
        f"--checkpoint-claim NAME, a ReadWriteMany claim, to keep them."
    ]


def not_enforced(spec: ClusterSpec, options: ExportOptions) -> list[str]:
    """The spec's settings that Kubernetes has no knob for, or that mean nothing there."""
    restart = spec.restart
    notes = [
        f"hosts: the scheduler places the pods; the hosts' addresses, ports, ssh, python and workdir are not used "
        f"(every task listens on port {options.port} in its own pod, the image's python runs it)",
        f"start_timeout_s ({restart.start_timeout_s:g}s): a startupProbe bounds the time until a training task's "
        f"TensorFlow server listens (built-in runtime and function targets); not enforced: time spent pending or "
        f"pulling the image, and the wait until every task has joined",
        "backoff_s, max_backoff_s: not enforced (restarts start at once)",
        f"crash_grace_s: not enforced (Kubernetes stops pods with grace_period_s, {restart.grace_period_s:g}s)",
        "stopped_timeout_s, stall_timeout_s: not enforced (no knob; a hung gang waits for TensorFlow's own timeouts)",
        "warm_spares: not used (every restart starts new pods)",
    ]
    if spec.checkpoint_dir is not None and not shared_url(spec.checkpoint_dir):
        notes.append(
            f"checkpoint_dir {scalar(spec.checkpoint_dir)} is a path on the hosts; in the pods the checkpoints are in "
            f"{MOUNT_PATH}/{options.name or spec.name}/checkpoints on the claim"
        )
    return notes
