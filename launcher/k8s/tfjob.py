"""The TFJob form (`--format tfjob`): for clusters that run Kubeflow Training Operator 1.9.

TFJob (kubeflow.org/v1) exists only in Training Operator 1.9.x, and it restarts pods one at a time,
never the gang. It cannot keep the supervisor's restart semantics, and says so once (`warnings`).
The pods still compute their TF_CONFIG with `worker.pod`, from the operator's per-replica Services
(`<name>-<type>-<index>`) and the replica index label, so it is the plan's TF_CONFIG for that
layout (the evaluator outside the trainers' cluster), not the operator's.

Trainers use restartPolicy ExitCode (exit codes 1-127 are permanent, so fatal codes fail the job);
the evaluator restarts in place (OnFailure), since a failed replica of any type fails a TFJob.
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
    not_enforced,
    pod_layout,
    pod_spec,
)
from launcher.spec import ClusterSpec
from worker.contract import ATTEMPT_VAR, JOB_COMPLETION_INDEX_VAR

API_VERSION = "kubeflow.org/v1"
REQUIRED_VERSION = "Kubeflow Training Operator 1.9"
PORT_NAME = "tfjob-port"  # the operator takes the TF port (and its Services' port) from this name
INDEX_LABEL = "training.kubeflow.org/replica-index"
REPLICA_TYPES = {"chief": "Chief", "worker": "Worker", "evaluator": "Evaluator"}


def host_template(name: str) -> str:
    """The operator's Service of each replica: `<tfjob>-<type>-<index>`, in the job's namespace."""
    return f"{name}-{{type}}-{{index}}"


def caveats(spec: ClusterSpec, groups: list[TaskGroup]) -> list[str]:
    """The supervisor's guarantees a TFJob cannot keep."""
    preempted = spec.restart.preemption_exit_code
    lines = [
        "TFJob restarts failed pods one at a time, never the whole gang; MultiWorkerMirroredStrategy cannot survive "
        "a lost worker, so the others fail with it.",
        f"Under restartPolicy ExitCode, exit codes 1-127 are permanent: a preemption (exit {preempted}, checkpoint "
        f"saved) and an ordinary crash (exit 1) fail the TFJob instead of restarting it; only a death by a signal "
        f"(exit 128-255) restarts that pod. To resume from the checkpoint, create the TFJob again (kubectl replace "
        f"--force -f).",
        f"runPolicy.backoffLimit ({spec.restart.max_restarts}, from max_restarts) counts restarts of pods, not of "
        f"the gang.",
        f"{ATTEMPT_VAR} stays 0 (TFJob has no restart count to give a pod): a restarted pod overwrites the result "
        f"and error files of attempt-0 (its logs stay in kubectl logs --previous).",
    ]
    retried = [code for code in spec.restart.fatal_exit_codes if code >= 128]
    if retried:
        lines.append(
            f"fatal_exit_codes {', '.join(str(c) for c in retried)}: 128 or more, so TFJob restarts the pod instead."
        )
    if any(group.sidecar for group in groups):
        lines.append(
            "The evaluator restarts in place (restartPolicy OnFailure) so that it cannot fail the TFJob; its restarts "
            "count toward backoffLimit too."
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
    job_spec: dict[str, Any] = {"runPolicy": {"backoffLimit": spec.restart.max_restarts, "cleanPodPolicy": "Running"}}
    if not any(g.task_type == "chief" for g in groups):
        job_spec["successPolicy"] = "AllWorkers"  # by default worker 0 alone would decide
    job_spec["tfReplicaSpecs"] = replicas
    tfjob = {"apiVersion": API_VERSION, "kind": "TFJob", "metadata": {"name": name}, "spec": job_spec}
    manifests: list[tuple[str, dict[str, Any]]] = []
    claim = claim_manifest(options)
    if claim is not None:
        manifests.append(("claim.yaml", claim))
    manifests.append(("tfjob.yaml", tfjob))
    warnings = caveats(spec, groups)
    comments = [
        f"Needs {REQUIRED_VERSION} (TFJob). What it cannot keep of the launcher's restart semantics:",
        *(f"  {line}" for line in warnings),
        "Not enforced on Kubernetes:",
        *(f"  {note}" for note in not_enforced(spec, options)),
    ]
    return Export(tuple(manifests), tuple(comments), tuple(warnings))
