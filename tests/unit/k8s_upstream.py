"""What Kubernetes components do with the exported manifests, ported from their sources, so that
tests can run the manifests through them without a cluster.

Each function names the source it follows (repository, path, version). They model only the parts
the export relies on, and they are written from those sources, never from the export's own code.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "COMPLETION_INDEX_ANNOTATION",
    "container_environment",
    "expand",
    "job_failure",
    "jobset_action",
    "restricted_violations",
    "tfjob_restarts_fail",
    "tfjob_verdict",
    "with_completion_index",
]

COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"


# ---- the kubelet: $(VAR) expansion ------------------------------------------------------------


def _try_read_variable_name(data: bytes) -> tuple[bytes, bool, int]:
    """tryReadVariableName of kubernetes third_party/forked/golang/expansion/expand.go."""
    if data[0:1] == b"$":  # an escaped operator: `$$` reads as one `$`
        return data[0:1], False, 1
    if data[0:1] == b"(":
        closer = data.find(b")", 1)
        if closer != -1:
            return data[1:closer], True, closer + 1
        return b"$(", False, 1  # an incomplete reference stays as it is
    # Go's string(input[0]) turns one byte into the rune of that number: a `$` before a byte of a
    # multi-byte character writes that byte as a character of its own (U+0080..U+00FF).
    return b"$" + chr(data[0]).encode("utf-8"), False, 1


def expand(text: str, mapping: Callable[[str], str]) -> str:
    """Expand of kubernetes third_party/forked/golang/expansion/expand.go (as the kubelet applies it
    to env values and to a container's command and args), byte by byte like the Go code."""
    data = text.encode("utf-8", "surrogateescape")
    out = bytearray()
    checkpoint = 0
    cursor = 0
    while cursor < len(data):
        if data[cursor : cursor + 1] == b"$" and cursor + 1 < len(data):
            out += data[checkpoint:cursor]
            read, is_var, advance = _try_read_variable_name(data[cursor + 1 :])
            if is_var:
                out += mapping(read.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
            else:
                out += read
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    out += data[checkpoint:]
    return out.decode("utf-8", "surrogateescape")


def _mapping_for(*contexts: Mapping[str, str]) -> Callable[[str], str]:
    """MappingFuncFor: the first context that has the name, else the reference unchanged."""

    def mapping(name: str) -> str:
        for context in contexts:
            if name in context:
                return context[name]
        return f"$({name})"

    return mapping


def container_environment(
    container: Mapping[str, Any],
    fields: Mapping[str, str],
    secrets: Mapping[tuple[str, str], str],
    service_env: Mapping[str, str],
) -> tuple[dict[str, str], list[str]]:
    """The environment and argv a container starts with: makeEnvironmentVariables of kubernetes
    pkg/kubelet/kubelet_pods.go (a literal value is expanded against the variables defined before it
    and the service variables; a value from a reference is taken as it is), then
    ExpandContainerCommandAndArgs (pkg/kubelet/container/helpers.go) over command and args.
    `fields` resolves fieldRef paths, `secrets` (Secret name, key) references."""
    env: dict[str, str] = {}
    mapping = _mapping_for(env, service_env)
    for entry in container.get("env", []):
        value = entry.get("value", "")
        if value:
            value = expand(value, mapping)
        elif "valueFrom" in entry:
            source = entry["valueFrom"]
            if "fieldRef" in source:
                value = fields[source["fieldRef"]["fieldPath"]]
            else:
                ref = source["secretKeyRef"]
                value = secrets[(ref["name"], ref["key"])]
        env[entry["name"]] = value
    # Only the container's own variables here: expansion of command and args sees the final env.
    final = _mapping_for({**service_env, **env})
    argv = [expand(arg, final) for arg in [*container.get("command", []), *container.get("args", [])]]
    return env, argv


def with_completion_index(container: Mapping[str, Any]) -> dict[str, Any]:
    """The container as the Job controller creates an Indexed Job's pods: addCompletionIndexEnvVariable
    of kubernetes pkg/controller/job/indexed_job_utils.go adds JOB_COMPLETION_INDEX (from the pod's
    completion-index annotation) only when the container does not have it already."""
    env = list(container.get("env", []))
    if not any(entry["name"] == "JOB_COMPLETION_INDEX" for entry in env):
        path = f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"
        env.append({"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {"fieldPath": path}}})
    return {**container, "env": env}


# ---- the Job controller and JobSet: failure routing ---------------------------------------------


def job_failure(job: Mapping[str, Any], code: int | None, conditions: tuple[str, ...] = ()) -> tuple[str, str] | None:
    """The Job controller's verdict on a failed pod that exited `code` (None: no container ended, as
    for a pod lost with its node) with the pod `conditions` (status True): the Job's failure (reason,
    message), or None when the pod is replaced without failing the Job. matchPodFailurePolicy of
    kubernetes pkg/controller/job/pod_failure_policy.go (first matching rule; exit code 0 never
    matches), then backoffLimit."""
    for index, rule in enumerate(job.get("podFailurePolicy", {}).get("rules", [])):
        matched = None
        if "onExitCodes" in rule:
            on = rule["onExitCodes"]
            if code not in (None, 0) and (code in on["values"]) == (on["operator"] == "In"):
                matched = f"Container {on['containerName']} for pod ns/pod-0 failed with exit code {code}"
        elif "onPodConditions" in rule:
            for condition in conditions:
                if any(p["type"] == condition and p.get("status", "True") == "True" for p in rule["onPodConditions"]):
                    matched = f"Pod ns/pod-0 has condition {condition}"
                    break
        if matched is None:
            continue
        if rule["action"] == "FailJob":
            return "PodFailurePolicy", f"{matched} matching FailJob rule at index {index}"
        if rule["action"] == "Ignore":
            return None
        break  # Count: counted below
    if job["backoffLimit"] == 0:
        return "BackoffLimitExceeded", "Job has reached the specified backoff limit"
    return None


def jobset_action(js: Mapping[str, Any], replicated_job: str, reason: str, message: str) -> str:
    """The JobSet controller's action for that failed Job: the first rule that matches, else
    RestartJobSet (kubernetes-sigs/jobset v0.10.1 pkg/controllers/failure_policy.go, ruleIsApplicable)."""
    for rule in js["spec"]["failurePolicy"]["rules"]:
        reasons, patterns = rule.get("onJobFailureReasons", []), rule.get("onJobFailureMessagePatterns", [])
        targets = rule.get("targetReplicatedJobs", [])
        if reasons and reason not in reasons:
            continue
        if patterns and not any(re.search(pattern, message) for pattern in patterns):
            continue
        if targets and replicated_job not in targets:
            continue
        return str(rule["action"])
    return "RestartJobSet"


# ---- Training Operator 1.9.4: TFJob --------------------------------------------------------------


def tfjob_verdict(tfjob: Mapping[str, Any], replica_type: str, code: int) -> str:
    """What Kubeflow Training Operator v1.9.4 does when the `tensorflow` container of a pod of
    `replica_type` exits `code` (non-zero): "restart in place" (pod restartPolicy OnFailure or Always:
    the kubelet restarts the container, its restartCount grows), "recreate pod" (ExitCode, a
    retryable code) or "fail" (the TFJob fails).

    From kubeflow/trainer v1.9.4: SetRestartPolicy (pkg/core/pod.go: ExitCode pods run with
    restartPolicy Never), ReconcileJobs (pkg/controller.v1/common/job.go: with a backoffLimit, a new
    failed pod fails the job when 0+1 > backoffLimit, NumRequeues being FakeWorkQueue's 0),
    ReconcilePods (pkg/controller.v1/common/pod.go, IsRetryableExitCode: code >= 128)."""
    replica = tfjob["spec"]["tfReplicaSpecs"][replica_type]
    limit = tfjob["spec"]["runPolicy"].get("backoffLimit")
    if replica["restartPolicy"] in ("OnFailure", "Always"):
        return "restart in place"  # the pod never fails; see tfjob_restarts_fail
    if limit is not None and 1 > limit:
        return "fail"
    if replica["restartPolicy"] == "ExitCode" and code >= 128:
        return "recreate pod"
    return "fail"


def tfjob_restarts_fail(tfjob: Mapping[str, Any], restarts: Mapping[str, int]) -> bool:
    """Whether in-place restarts (`restarts` per replica type, summed over its running pods) fail the
    TFJob: PastBackoffLimit of kubeflow/trainer v1.9.4 pkg/core/job.go (no backoffLimit: never; 0:
    any restart; else restarts >= backoffLimit; ExitCode pods count too, but run with restartPolicy
    Never and so never restart in place)."""
    limit = tfjob["spec"]["runPolicy"].get("backoffLimit")
    if limit is None:
        return False
    total = sum(
        count
        for replica_type, count in restarts.items()
        if tfjob["spec"]["tfReplicaSpecs"][replica_type]["restartPolicy"] in ("OnFailure", "Always")
    )
    return total > 0 if limit == 0 else total >= limit


# ---- Pod Security Standards: the restricted profile ----------------------------------------------

# https://kubernetes.io/docs/concepts/security/pod-security-standards/ (kubernetes/website,
# content/en/docs/concepts/security/pod-security-standards.md): the Baseline controls, which
# Restricted includes, then the Restricted ones.
_BASELINE_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE", "SETFCAP",
    "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip
_SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}  # fmt: skip
_SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
_RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret",
}  # fmt: skip
_SECCOMP = {"RuntimeDefault", "Localhost"}
_PROBES = ("livenessProbe", "readinessProbe", "startupProbe")


def _containers(pod: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    return [
        (f"spec.{kind}[{i}]", box)
        for kind in ("containers", "initContainers", "ephemeralContainers")
        for i, box in enumerate(pod.get(kind, []))
    ]


def _baseline(pod: Mapping[str, Any], annotations: Mapping[str, str]) -> list[str]:
    found: list[str] = []
    context = pod.get("securityContext", {})
    boxes = _containers(pod)
    if context.get("windowsOptions", {}).get("hostProcess"):
        found.append("HostProcess: spec.securityContext.windowsOptions.hostProcess")
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(field):
            found.append(f"Host Namespaces: spec.{field}")
    for where, box in boxes:
        box_context = box.get("securityContext", {})
        if box_context.get("windowsOptions", {}).get("hostProcess"):
            found.append(f"HostProcess: {where}")
        if box_context.get("privileged"):
            found.append(f"Privileged Containers: {where}")
        extra = set(box_context.get("capabilities", {}).get("add", [])) - _BASELINE_CAPABILITIES
        if extra:
            found.append(f"Capabilities: {where} adds {sorted(extra)}")
        if any(port.get("hostPort", 0) for port in box.get("ports", [])):
            found.append(f"Host Ports: {where}")
        for probe in (*(box.get(p, {}) for p in _PROBES), *box.get("lifecycle", {}).values()):
            if any(probe.get(kind, {}).get("host", "") for kind in ("httpGet", "tcpSocket")):
                found.append(f"Host Probes / Lifecycle Hooks: {where}")
        if box_context.get("procMount", "Default") != "Default":
            found.append(f"/proc Mount Type: {where}")
    if any("hostPath" in volume for volume in pod.get("volumes", [])):
        found.append("HostPath Volumes: spec.volumes")
    for where, ctx in (("spec", context), *((w, b.get("securityContext", {})) for w, b in boxes)):
        if ctx.get("appArmorProfile", {}).get("type", "RuntimeDefault") not in ("RuntimeDefault", "Localhost"):
            found.append(f"AppArmor: {where}")
        selinux = ctx.get("seLinuxOptions", {})
        if selinux.get("type", "") not in _SELINUX_TYPES or selinux.get("user") or selinux.get("role"):
            found.append(f"SELinux: {where}")
        if ctx.get("seccompProfile", {}).get("type") == "Unconfined":
            found.append(f"Seccomp: {where} is Unconfined")
    for key, value in annotations.items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
            value == "runtime/default" or value.startswith("localhost/")
        ):
            found.append(f"AppArmor: annotation {key}")
    unsafe = {sysctl["name"] for sysctl in context.get("sysctls", [])} - _SAFE_SYSCTLS
    if unsafe:
        found.append(f"Sysctls: {sorted(unsafe)}")
    return found


def restricted_violations(pod: Mapping[str, Any], annotations: Mapping[str, str] | None = None) -> list[str]:
    """Every control of the Pod Security Standards' Restricted profile (Baseline included) that the
    pod spec `pod` breaks, as the page states them; an empty list: a namespace enforcing
    `pod-security.kubernetes.io/enforce: restricted` admits the pod. Linux pods (spec.os unset)."""
    found = _baseline(pod, annotations or {})
    context = pod.get("securityContext", {})
    boxes = _containers(pod)
    for i, volume in enumerate(pod.get("volumes", [])):
        if not any(volume.get(kind) is not None for kind in _RESTRICTED_VOLUMES):
            found.append(f"Volume Types: spec.volumes[{i}]")
    pod_non_root = context.get("runAsNonRoot") is True
    pod_seccomp = context.get("seccompProfile", {}).get("type") in _SECCOMP
    if context.get("runAsNonRoot") is False:
        found.append("Running as Non-root: spec.securityContext.runAsNonRoot is false")
    if context.get("runAsUser") == 0:
        found.append("Running as Non-root user: spec.securityContext.runAsUser is 0")
    for where, box in boxes:
        box_context = box.get("securityContext", {})
        if box_context.get("allowPrivilegeEscalation") is not False:
            found.append(f"Privilege Escalation: {where}.securityContext.allowPrivilegeEscalation is not false")
        non_root = box_context.get("runAsNonRoot")
        if non_root is False or (non_root is None and not pod_non_root):
            found.append(f"Running as Non-root: {where}")
        if box_context.get("runAsUser") == 0:
            found.append(f"Running as Non-root user: {where}")
        seccomp = box_context.get("seccompProfile", {}).get("type")
        if (seccomp is None and not pod_seccomp) or (seccomp is not None and seccomp not in _SECCOMP):
            found.append(f"Seccomp: {where}")
        capabilities = box_context.get("capabilities", {})
        if "ALL" not in capabilities.get("drop", []):
            found.append(f"Capabilities: {where} does not drop ALL")
        if set(capabilities.get("add", [])) - {"NET_BIND_SERVICE"}:
            found.append(f"Capabilities: {where} adds more than NET_BIND_SERVICE")
    for where, ctx in (("spec", context), *((w, b.get("securityContext", {})) for w, b in boxes)):
        if ctx.get("runAsGroup") == 0 or ctx.get("fsGroup") == 0 or 0 in ctx.get("supplementalGroups", []):
            found.append(f"Non-root groups: {where}")
    return found
