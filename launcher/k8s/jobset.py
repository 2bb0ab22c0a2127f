"""The JobSet form (`--format jobset`, the default): the gang restarts as one, exit codes routed.

A JobSet (jobset.x-k8s.io/v1alpha2) recreates every Job of the set when one fails, as the supervisor
restarts every task. One replicated job per task type, each an Indexed Job with a pod per task;
pods are reached by stable names (`<name>-<type>-0-<index>.<name>`, through the headless Service that
JobSet creates for the set and deletes with it).
Exit codes are routed in two steps:

- each trainer Job's podFailurePolicy turns the preemption code, the fatal codes and a pod that
  Kubernetes took away (condition DisruptionTarget: node drained or shut down, spot reclaim,
  eviction, preemption by the scheduler) into FailJob, whose failure message names the code or the
  condition and the rule (`Container tensorflow for pod NS/POD failed with exit code 42 matching
  FailJob rule at index 0`, `Pod NS/POD has condition DisruptionTarget matching FailJob rule at
  index 2`); any other failure fails the Job through backoffLimit 0 (reason BackoffLimitExceeded);
- the JobSet's failurePolicy rules match that reason and message (onJobFailureMessagePatterns, new
  in JobSet v0.10.0): a fatal code fails the set, the preemption code and a disruption restart it
  without counting against maxRestarts, anything else restarts it, counted.

The evaluator is a Job of its own that neither fails nor restarts the set: it is outside the success
policy and every rule, and restarts in place (restartPolicy OnFailure) with a backoffLimit it never
reaches, so its Job never fails.
"""

from __future__ import annotations

import math
from typing import Any

from launcher.k8s.layout import (
    CONTAINER,
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
from worker.contract import ATTEMPT_VAR

API_VERSION = "jobset.x-k8s.io/v1alpha2"
REQUIRED_VERSION = "v0.10.0"  # failurePolicy.rules[].onJobFailureMessagePatterns
RESTART_LABEL = "jobset.sigs.k8s.io/restart-attempt"  # the set's restarts so far: the task's attempt
NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"  # on every pod of the set
NEVER_FAILS = 2**31 - 1  # the evaluator Job's backoffLimit: the largest Kubernetes accepts
PREEMPTED_RULE = "Preempted"
FATAL_RULE = "FatalExitCode"
DISRUPTED_RULE = "Disrupted"
CRASHED_RULE = "Crashed"
DISRUPTION = "DisruptionTarget"  # the pod condition Kubernetes sets on a pod it takes away


def host_template(name: str) -> str:
    """A pod's stable host name: `<jobset>-<replicatedJob>-<jobIndex>-<podIndex>.<subdomain>`."""
    return f"{name}-{{type}}-0-{{index}}.{name}"


def _job_failure_rules(spec: ClusterSpec) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The trainer Jobs' podFailurePolicy rules, and per JobSet rule the message pattern that
    recognises a Job failed by one of them (the message names the rule's index).

    Exit codes come first: a pod that saved its checkpoint (or hit a fatal error) as it was taken
    away is routed by what it said; a disruption covers a pod that could not say (lost with its
    node, killed before it saved)."""
    restart = spec.restart
    rules: list[dict[str, Any]] = []
    patterns: dict[str, str] = {}
    codes = {PREEMPTED_RULE: [restart.preemption_exit_code], FATAL_RULE: sorted(set(restart.fatal_exit_codes))}
    for name, values in codes.items():
        if not values:
            continue
        alternatives = str(values[0]) if len(values) == 1 else "(" + "|".join(str(v) for v in values) + ")"
        patterns[name] = f"exit code {alternatives} matching FailJob rule at index {len(rules)}"
        rules.append(
            {"action": "FailJob", "onExitCodes": {"containerName": CONTAINER, "operator": "In", "values": values}}
        )
    patterns[DISRUPTED_RULE] = f"has condition {DISRUPTION} matching FailJob rule at index {len(rules)}"
    rules.append({"action": "FailJob", "onPodConditions": [{"type": DISRUPTION, "status": "True"}]})
    return rules, patterns


def _failure_policy(spec: ClusterSpec, trainers: list[str]) -> dict[str, Any]:
    _, patterns = _job_failure_rules(spec)
    rules: list[dict[str, Any]] = []
    # Evaluated in order, the first rule that matches any failed Job wins: fatal before preempted,
    # so a usage error is never retried because a preemption happened at the same time.
    for name, action in (
        (FATAL_RULE, "FailJobSet"),
        (PREEMPTED_RULE, "RestartJobSetAndIgnoreMaxRestarts"),
        (DISRUPTED_RULE, "RestartJobSetAndIgnoreMaxRestarts"),
    ):
        if name in patterns:
            rules.append(
                {
                    "name": name,
                    "action": action,
                    "onJobFailureReasons": ["PodFailurePolicy"],
                    "onJobFailureMessagePatterns": [patterns[name]],
                    "targetReplicatedJobs": trainers,
                }
            )
    rules.append({"name": CRASHED_RULE, "action": "RestartJobSet", "targetReplicatedJobs": trainers})
    return {"maxRestarts": spec.restart.max_restarts, "restartStrategy": "BlockingRecreate", "rules": rules}


def _counted(max_restarts: int) -> str:
    if max_restarts == 0:
        return "fail (max_restarts 0)"
    return f"restart every pod, at most {max_restarts} time{'s' if max_restarts != 1 else ''}"


def _job(group: TaskGroup, spec: ClusterSpec, pod: dict[str, Any]) -> dict[str, Any]:
    job: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": group.count,
        "parallelism": group.count,
    }
    if group.sidecar:
        job["backoffLimit"] = NEVER_FAILS
    else:
        rules, _ = _job_failure_rules(spec)
        job["backoffLimit"] = 0  # any other failure fails the Job at once: the whole set restarts
        job["podFailurePolicy"] = {"rules": rules}
    job["template"] = {"spec": pod}
    return job


def render(spec: ClusterSpec, groups: list[TaskGroup], options: ExportOptions) -> Export:
    longest = max((f"-{g.task_type}-0-{g.count - 1}-abcde" for g in groups), key=len)  # Job pods: 5 random
    name = k8s_name(spec, options, longest)
    layout = pod_layout(spec, groups, name, host_template(name), options)
    trainers = [g.task_type for g in groups if not g.sidecar]
    attempt = {"name": ATTEMPT_VAR, "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{RESTART_LABEL}']"}}}
    replicated = []
    for group in groups:
        box = container(group, spec, layout, options, "tf", [attempt])
        pod = pod_spec([box], spec, options, "OnFailure" if group.sidecar else "Never")
        replicated.append({"name": group.task_type, "replicas": 1, "template": {"spec": _job(group, spec, pod)}})
    jobset = {
        "apiVersion": API_VERSION,
        "kind": "JobSet",
        "metadata": object_meta(name, options),
        "spec": {
            # JobSet creates the headless Service named after the subdomain, owned by the set (deleted
            # with it); peers must resolve each other while starting up, before any pod is ready.
            "network": {"enableDNSHostnames": True, "subdomain": name, "publishNotReadyAddresses": True},
            "successPolicy": {"operator": "All", "targetReplicatedJobs": trainers},
            "failurePolicy": _failure_policy(spec, trainers),
            "replicatedJobs": replicated,
        },
    }
    manifests: list[tuple[str, dict[str, Any]]] = []
    claim = claim_manifest(options)
    if claim is not None:
        manifests.append(("claim.yaml", claim))
    manifests.append(("jobset.yaml", jobset))
    policy = network_policy(name, {NAME_LABEL: name}, options)
    if policy is not None:
        manifests.append(("network-policy.yaml", policy))
    notes = storage_notes(options, name)
    preempted = spec.restart.preemption_exit_code
    if preempted >= 128:
        notes.append(
            f"preemption_exit_code {preempted} is also what a container killed by signal {preempted - 128} exits "
            f"with (137: SIGKILL, as the out-of-memory killer sends): such a kill counts as a preemption, and its "
            f"restarts are never counted against max_restarts. Give a code below 128 (the default is 42)."
        )
    fatal = ", ".join(str(code) for code in sorted(set(spec.restart.fatal_exit_codes))) or "no code"
    comments = [
        f"Needs JobSet {REQUIRED_VERSION} or newer (failurePolicy rules on job failure messages).",
        f"Exit {preempted} or a pod taken away by Kubernetes ({DISRUPTION}): restart every "
        f"pod, not counted; {fatal}: fail; anything else: {_counted(spec.restart.max_restarts)}.",
        *notes,
        "Not enforced on Kubernetes:",
        *(f"  {note}" for note in not_enforced(spec, options)),
    ]
    if any(group.sidecar for group in groups):
        grace = math.ceil(spec.restart.grace_period_s)
        comments.append(
            f"  The evaluator ignores SIGTERM (it scores the last checkpoint): every restart of the set "
            f"(BlockingRecreate) waits its full terminationGracePeriodSeconds ({grace}s) before new pods start."
        )
    return Export(tuple(manifests), tuple(comments), tuple(notes))
