"""The TFJob form (`--format tfjob`): for clusters that run Kubeflow Training Operator 1.9.

TFJob (kubeflow.org/v1) exists only in Training Operator 1.9.x, and it restarts pods one at a time,
never the gang. It cannot keep the supervisor's restart semantics, and says so once (`warnings`).
The pods still compute their TF_CONFIG with `worker.pod`, from the operator's per-replica Services
(`<name>-<type>-<index>`) and the replica index label, so it is the plan's TF_CONFIG for that
layout (the evaluator outside the trainers' cluster), not the operator's.

Trainers use restartPolicy ExitCode (exit codes 1-127 are permanent, so fatal codes fail the job);
the evaluator restarts in place (OnFailure), since a failed replica of any type fails a TFJob.

`runPolicy.backoffLimit`, as Training Operator 1.9.4 reads it (pkg/controller.v1/common/job.go and
pkg/core/job.go), counts only in-place container restarts of running pods, and the evaluator is the
only replica that restarts in place (ExitCode pods run with restartPolicy Never and are recreated);
besides, a limit of 0 fails the job at the first failed pod. So a limit would bound the evaluator,
never the trainers, and is written only where it does what max_restarts says: max_restarts 0 and no
evaluator. Elsewhere it is left out, so that evaluator restarts can never fail the training.
"""

from __future__ import annotations

from typing import Any

from launcher.k8s.layout import (
    Export,
    ExportOptions,
    TaskGroup,
    claim_manifest,
    container,
    k8s_name,
    network_policy,
    not_enforced,
    object_meta,
    pod_layout,
    pod_spec,
    storage_notes,
)
from launcher.spec.models import ClusterSpec
from worker.contract import ATTEMPT_VAR, JOB_COMPLETION_INDEX_VAR

API_VERSION = "kubeflow.org/v1"
REQUIRED_VERSION = "Kubeflow Training Operator 1.9"
PORT_NAME = "tfjob-port"  # the operator takes the TF port (and its Services' port) from this name
INDEX_LABEL = "training.kubeflow.org/replica-index"
NAME_LABEL = "training.kubeflow.org/job-name"  # on every pod of the TFJob
RETRIED_FROM = 128  # the operator's IsRetryableExitCode: under ExitCode, codes from 128 restart the pod
REPLICA_TYPES = {"chief": "Chief", "worker": "Worker", "evaluator": "Evaluator"}


def host_template(name: str) -> str:
    """The operator's Service of each replica: `<tfjob>-<type>-<index>`, in the job's namespace."""
    return f"{name}-{{type}}-{{index}}"


def backoff_limit(spec: ClusterSpec, groups: list[TaskGroup]) -> int | None:
    """runPolicy.backoffLimit: 0 where max_restarts is 0 and no evaluator restarts in place; else none
    (see the module docstring: a limit of 1 or more never reaches a trainer)."""
    if spec.restart.max_restarts == 0 and not any(group.sidecar for group in groups):
        return 0
    return None


def _codes(codes: list[int]) -> str:
    return ", ".join(str(code) for code in codes)


def caveats(spec: ClusterSpec, groups: list[TaskGroup]) -> list[str]:
    """The supervisor's guarantees a TFJob cannot keep."""
    restart = spec.restart
    preempted = restart.preemption_exit_code
    evaluator = any(group.sidecar for group in groups)
    limit = backoff_limit(spec, groups)
    lines = [
        "TFJob restarts failed pods one at a time, never the whole gang; MultiWorkerMirroredStrategy cannot survive "
        "a lost worker, so the others fail with it.",
    ]
    resume = "To resume from the checkpoint, create the TFJob again (kubectl replace --force -f)."
    if limit == 0:
        lines.append(
            f"max_restarts 0: runPolicy.backoffLimit 0 fails the TFJob at the first failed pod, whatever its exit "
            f"code, a preemption (exit {preempted}, checkpoint saved) too. {resume}"
        )
    elif preempted < RETRIED_FROM:
        lines.append(
            f"Under restartPolicy ExitCode, exit codes 1-127 are permanent: a preemption (exit {preempted}, checkpoint "
            f"saved) and an ordinary crash (exit 1) fail the TFJob instead of restarting it; only a death by a signal "
            f"(exit 128-255) restarts that pod. {resume}"
        )
    else:
        lines.append(
            f"Under restartPolicy ExitCode, exit codes 1-127 are permanent: an ordinary crash (exit 1) fails the TFJob "
            f"instead of restarting it. A preemption (exit {preempted}, 128 or more) restarts the preempted pod alone, "
            f"like a death by a signal, while the others, having lost a peer, usually fail the TFJob with exit 1. "
            f"{resume}"
        )
    if limit is None and restart.max_restarts == 0:
        lines.append(
            "max_restarts 0 is not enforced: runPolicy.backoffLimit 0 would also fail the TFJob at the evaluator's "
            "first restart, so it is left out; a pod that dies by a signal (exit 128-255) is recreated without limit."
        )
    elif limit is None:
        lines.append(
            f"max_restarts ({restart.max_restarts}) is not enforced: Training Operator 1.9 counts only in-place "
            f"restarts toward runPolicy.backoffLimit (left out, so that evaluator restarts cannot fail the training), "
            f"and trainer pods are recreated, not restarted in place: a pod that dies by a signal (exit 128-255) is "
            f"recreated without limit."
        )
    lines.append(
        f"{ATTEMPT_VAR} stays 0 (TFJob has no restart count to give a pod): a restarted pod overwrites the result "
        f"and error files of attempt-0 (its logs stay in kubectl logs --previous)."
    )
    retried = [code for code in restart.fatal_exit_codes if code >= RETRIED_FROM]
    if retried and limit is None:
        lines.append(f"fatal_exit_codes {_codes(retried)}: 128 or more, so TFJob restarts the pod instead.")
    if evaluator:
        lines.append(
            "The evaluator restarts in place (restartPolicy OnFailure) so that it cannot fail the TFJob; with no "
            "runPolicy.backoffLimit, its restarts are not limited and never fail the training."
        )
    return lines


def render(spec: ClusterSpec, groups: list[TaskGroup], options: ExportOptions) -> Export:
    longest = max((f"-{g.task_type}-{g.count - 1}" for g in groups), key=len)  # pods and Services
    name = k8s_name(spec, options, longest)
    layout = pod_layout(spec, groups, name, host_template(name), options)
    # The operator labels each pod with its index; TFJob pods are not Job pods, so they get it here.
    index = {
        "name": JOB_COMPLETION_INDEX_VAR,
        "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{INDEX_LABEL}']"}},
    }
    replicas: dict[str, Any] = {}
    for group in groups:
        box = container(group, spec, layout, options, PORT_NAME, [index])
        replicas[REPLICA_TYPES[group.task_type]] = {
            "replicas": group.count,
            "restartPolicy": "OnFailure" if group.sidecar else "ExitCode",
            "template": {"spec": pod_spec([box], spec, options, None)},
        }
    run_policy: dict[str, Any] = {"cleanPodPolicy": "Running"}
    limit = backoff_limit(spec, groups)
    if limit is not None:
        run_policy["backoffLimit"] = limit
    job_spec: dict[str, Any] = {"runPolicy": run_policy}
    if not any(g.task_type == "chief" for g in groups):
        job_spec["successPolicy"] = "AllWorkers"  # by default worker 0 alone would decide
    job_spec["tfReplicaSpecs"] = replicas
    tfjob = {"apiVersion": API_VERSION, "kind": "TFJob", "metadata": object_meta(name, options), "spec": job_spec}
    manifests: list[tuple[str, dict[str, Any]]] = []
    claim = claim_manifest(options)
    if claim is not None:
        manifests.append(("claim.yaml", claim))
    manifests.append(("tfjob.yaml", tfjob))
    policy = network_policy(name, {NAME_LABEL: name}, options)
    if policy is not None:
        manifests.append(("network-policy.yaml", policy))
    warnings = [*caveats(spec, groups), *storage_notes(options, name)]
    comments = [
        f"Needs {REQUIRED_VERSION} (TFJob). What it cannot keep of the launcher's guarantees:",
        *(f"  {line}" for line in warnings),
        "Not enforced on Kubernetes:",
        *(f"  {note}" for note in not_enforced(spec, options)),
    ]
    return Export(tuple(manifests), tuple(comments), tuple(warnings))
