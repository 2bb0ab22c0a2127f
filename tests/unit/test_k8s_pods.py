"""`launch export k8s`: pods a restricted namespace admits, and what operations teams set on every job.

Every pod template is checked against the Pod Security Standards' Restricted profile as the page
states it (https://kubernetes.io/docs/concepts/security/pod-security-standards/, ported in
tests/unit/k8s_upstream.py), and the check is shown to catch what it must. The NetworkPolicy is
read the way the NetworkPolicy API defines it. Namespace, labels, node selectors, tolerations and
requests reach every object or pod, and bad values are refused naming the flag (exit 2).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher.cli import main as cli
from launcher.k8s.export import export
from launcher.k8s.layout import ExportOptions
from launcher.k8s.names import Toleration
from launcher.spec.load import parse_spec
from tests.unit.k8s_upstream import restricted_violations

IMAGE = "registry.example.com/tflaunch:0.1.0"
FORMATS = ("jobset", "tfjob")
SPEC: dict[str, Any] = {
    "name": "pods",
    "hosts": [
        {"address": "a.internal", "chief": True, "workers": 2, "evaluator": True, "ports": [7000, 7001, 7002, 7003]},
    ],
}
GPU_SPEC: dict[str, Any] = {
    "name": "gpus",
    "checkpoint_dir": "gs://bucket/gpus",
    "hosts": [{"address": "g.internal", "workers": 2, "gpus": [0, 1], "worker_per_gpu": True, "ports": [7000, 7001]}],
}
# The label each engine puts on every pod of a job (JobSet v0.10.1 api/jobset/v1alpha2/jobset_types.go
# JobSetNameKey; Training Operator v1.9.4 pkg/apis/kubeflow.org/v1/common_types.go JobNameLabel).
POD_LABELS = {"jobset": "jobset.sigs.k8s.io/jobset-name", "tfjob": "training.kubeflow.org/job-name"}


def _export(fmt: str, data: dict[str, Any] = SPEC, **flags: Any) -> dict[str, dict[str, Any]]:
    options = ExportOptions(image=IMAGE, format=fmt, **flags)
    result = export(parse_spec(data), options, "c.json")
    return {manifest["kind"]: manifest for _, manifest in result.manifests}


def _pods(docs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    if "JobSet" in docs:
        jobs = docs["JobSet"]["spec"]["replicatedJobs"]
        return {rj["name"]: rj["template"]["spec"]["template"]["spec"] for rj in jobs}
    replicas = docs["TFJob"]["spec"]["tfReplicaSpecs"]
    return {kind.lower(): replica["template"]["spec"] for kind, replica in replicas.items()}


# ---- Pod Security Standards: restricted ---------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("data", [SPEC, GPU_SPEC], ids=["claim", "empty-dir"])
def test_every_pod_meets_the_restricted_profile(fmt: str, data: dict[str, Any]) -> None:
    claim = {} if "checkpoint_dir" in data else {"checkpoint_claim": "runs"}
    pods = _pods(_export(fmt, data, **claim))
    assert pods
    for kind, pod in pods.items():
        assert restricted_violations(pod) == [], kind
        assert pod["automountServiceAccountToken"] is False  # the task never talks to the API server
        context = pod["securityContext"]
        assert (context["runAsUser"], context["runAsGroup"], context["fsGroup"]) == (1000, 1000, 1000)
        assert context["fsGroupChangePolicy"] == "OnRootMismatch"  # no walk of every checkpoint at each start


def test_the_restricted_check_catches_what_it_must() -> None:
    """Each control the pods meet, broken on purpose, is reported by its name on the page."""
    pod = _pods(_export("jobset", checkpoint_claim="runs"))["worker"]
    breaks = {
        "Seccomp": lambda p: p["securityContext"].pop("seccompProfile"),
        "Running as Non-root": lambda p: p["securityContext"].pop("runAsNonRoot"),
        "Running as Non-root user": lambda p: p["securityContext"].update(runAsUser=0),
        "Non-root groups": lambda p: p["securityContext"].update(fsGroup=0),
        "Privilege Escalation": lambda p: p["containers"][0]["securityContext"].pop("allowPrivilegeEscalation"),
        "Capabilities": lambda p: p["containers"][0]["securityContext"]["capabilities"].update(drop=["NET_RAW"]),
        "Privileged Containers": lambda p: p["containers"][0]["securityContext"].update(privileged=True),
        "Host Namespaces": lambda p: p.update(hostNetwork=True),
        "Host Ports": lambda p: p["containers"][0]["ports"][0].update(hostPort=2222),
        "HostPath Volumes": lambda p: p["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
        "Volume Types": lambda p: p["volumes"].append({"name": "n", "nfs": {"server": "s", "path": "/"}}),
        "Sysctls": lambda p: p["securityContext"].update(sysctls=[{"name": "kernel.msgmax", "value": "1"}]),
        "/proc Mount Type": lambda p: p["containers"][0]["securityContext"].update(procMount="Unmasked"),
    }
    for control, broken in breaks.items():
        changed = copy.deepcopy(pod)
        broken(changed)
        assert any(found.startswith(f"{control}:") for found in restricted_violations(changed)), control


# ---- NetworkPolicy ----------------------------------------------------------------------------------


def _admits(policy: dict[str, Any], source: dict[str, str], target: dict[str, str], port: int) -> bool:
    """Whether `policy` lets a pod labelled `source` open TCP `port` on a pod labelled `target` in the
    same namespace (networking.k8s.io/v1: a pod selected by an Ingress policy admits only what one of
    its rules allows; matchLabels selects pods carrying all of them)."""

    def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
        return all(labels.get(key) == value for key, value in selector.get("matchLabels", {}).items())

    spec = policy["spec"]
    if "Ingress" not in spec["policyTypes"] or not selects(spec["podSelector"], target):
        return True  # not isolated by this policy
    for rule in spec.get("ingress", []):
        peers = rule.get("from")
        ports = rule.get("ports")
        peer_ok = peers is None or any(
            "podSelector" in peer and "namespaceSelector" not in peer and selects(peer["podSelector"], source)
            for peer in peers
        )
        port_ok = ports is None or any(p.get("protocol", "TCP") == "TCP" and p["port"] == port for p in ports)
        if peer_ok and port_ok:
            return True
    return False


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_network_policy_admits_the_tf_port_from_the_jobs_pods_only(fmt: str) -> None:
    assert "NetworkPolicy" not in _export(fmt, checkpoint_claim="runs")  # only when asked
    docs = _export(fmt, checkpoint_claim="runs", network_policy=True, port=3333, namespace="ml")
    policy = docs["NetworkPolicy"]
    assert policy["metadata"] == {"name": "pods", "namespace": "ml"}
    own = {POD_LABELS[fmt]: "pods"}
    other_job = {POD_LABELS[fmt]: "other"}
    assert _admits(policy, own, own, 3333)
    assert not _admits(policy, own, own, 22)
    assert not _admits(policy, other_job, own, 3333)
    assert not _admits(policy, {}, own, 3333)
    assert _admits(policy, {}, other_job, 3333)  # other jobs' pods are not this policy's to isolate
    assert all(box["ports"][0]["containerPort"] == 3333 for pod in _pods(docs).values() for box in pod["containers"])


# ---- what operations teams set ------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_namespace_labels_placement_and_requests(fmt: str) -> None:
    docs = _export(
        fmt,
        GPU_SPEC,
        checkpoint_claim="runs",
        claim_size="10Gi",
        namespace="ml-team",
        labels=(("kueue.x-k8s.io/queue-name", "a100"),),
        node_selector=(("pool", "gpu"),),
        tolerations=(Toleration("nvidia.com/gpu", None, "NoSchedule"), Toleration("spot", "true")),
        cpu="1500m",
        memory="48Gi",
        network_policy=True,
    )
    assert sorted(docs) == sorted(["PersistentVolumeClaim", "NetworkPolicy", "JobSet" if fmt == "jobset" else "TFJob"])
    for manifest in docs.values():
        assert manifest["metadata"]["namespace"] == "ml-team"
        assert manifest["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "a100"}
    for pod in _pods(docs).values():
        assert pod["nodeSelector"] == {"pool": "gpu"}
        assert pod["tolerations"] == [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "spot", "operator": "Equal", "value": "true"},
        ]
        resources = pod["containers"][0]["resources"]
        assert resources == {"requests": {"cpu": "1500m", "memory": "48Gi"}, "limits": {"nvidia.com/gpu": 1}}
    plain = _pods(_export(fmt, GPU_SPEC))
    assert all("nodeSelector" not in pod and "tolerations" not in pod for pod in plain.values())


def _spec_file(tmp_path: Path) -> str:
    path = tmp_path / "c.json"
    path.write_text(json.dumps(SPEC))
    return str(path)


def test_the_flags_reach_the_manifests(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    flags = [
        "--image", IMAGE, "--checkpoint-claim", "runs", "--namespace", "ml",
        "--label", "kueue.x-k8s.io/queue-name=team-a", "--label", "cost-center=",
        "--node-selector", "cloud.google.com/gke-spot=true",
        "--toleration", "cloud.google.com/gke-spot=true:NoSchedule", "--toleration", "dedicated",
        "--cpu", "4", "--memory", "16Gi", "--network-policy",
    ]  # fmt: skip
    assert cli.main(["export", "k8s", "--cluster", _spec_file(tmp_path), *flags]) == 0
    docs = {doc["kind"]: doc for doc in yaml.safe_load_all(capsys.readouterr().out)}
    assert sorted(docs) == ["JobSet", "NetworkPolicy"]
    assert docs["JobSet"]["metadata"] == {
        "name": "pods",
        "namespace": "ml",
        "labels": {"kueue.x-k8s.io/queue-name": "team-a", "cost-center": ""},
    }
    pod = _pods(docs)["worker"]
    assert pod["nodeSelector"] == {"cloud.google.com/gke-spot": "true"}
    assert pod["tolerations"] == [
        {"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
        {"key": "dedicated", "operator": "Exists"},
    ]
    assert pod["containers"][0]["resources"] == {"requests": {"cpu": "4", "memory": "16Gi"}}


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--cpu", v) for v in ("1e3", ".5", "1.", "1k", "+2", "250m")]
    + [("--memory", v) for v in ("1e9", "1.5Gi", "128974848", "129M", "123Mi")],
)
def test_quantities_in_kubernetes_grammar_are_taken(flag: str, value: str, tmp_path: Path) -> None:
    base = ["export", "k8s", "--cluster", _spec_file(tmp_path), "--image", IMAGE, "--checkpoint-claim", "runs"]
    assert cli.main([*base, flag, value, "-o", str(tmp_path / "out")]) == 0
    pod = yaml.safe_load((tmp_path / "out" / "jobset.yaml").read_text().split("\n---\n")[-1])
    requests = pod["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert requests["requests"][flag.removeprefix("--")] == value


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--namespace", "ML_Team"], "--namespace 'ML_Team'"),
        (["--label", "team"], "--label 'team': write KEY=VALUE"),
        (["--label", "bad key=v"], "--label bad key=v: its name 'bad key'"),
        (["--label", "Example.com/team=v"], "its prefix 'Example.com'"),
        (["--label", "team=-v"], "its value '-v'"),
        (["--label", "team=a", "--label", "team=b"], "give each key once"),
        (["--node-selector", "pool"], "--node-selector 'pool': write KEY=VALUE"),
        (["--toleration", "gpu:Sometimes"], "its effect 'Sometimes' must be one of NoSchedule"),
        (["--toleration", "=x"], "--toleration =x: its name ''"),
        (["--cpu", "lots"], "--cpu 'lots'"),
        (["--cpu", "0"], "--cpu '0': give a quantity above zero"),
        (["--memory", "400m"], "400Mi is mebibytes"),
        (["--cpu", "1.5m"], "--cpu '1.5m': Kubernetes counts it in steps of 1m"),
        (["--memory", "0.5"], "--memory '0.5': Kubernetes counts it in steps of a whole byte"),
        (["--memory", "4GB"], "--memory '4GB': give a quantity above zero"),
        (["--cpu", "-2"], "--cpu '-2': give a quantity above zero"),
        (["--storage-class", "Fast SSD", "--claim-size", "5Gi"], "--storage-class 'Fast SSD'"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(
    flags: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["export", "k8s", "--cluster", _spec_file(tmp_path), "--image", IMAGE, "--checkpoint-claim", "runs"]
    assert cli.main([*base, *flags]) == 2
    captured = capsys.readouterr()
    assert says in captured.err and "Traceback" not in captured.err and captured.out == ""
