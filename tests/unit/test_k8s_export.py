"""`launch export k8s`: manifests checked against the real schemas, exit-code routing, and every pod's
TF_CONFIG equal to the plan's for the same layout.

No cluster runs here. JobSet and TFJob are checked against the openAPIV3Schema of their vendored CRDs
(tests/data/k8s/SOURCE.md), closed to unknown fields as the API server's strict field validation
would (it would otherwise drop them silently); core kinds, and the Job and pod templates inside, with
kubernetes-validate at a pinned Kubernetes version. The JobSet webhook's own checks that matter here
(rule names, failure reasons, replicated-job targets, name lengths) are mirrored below.
"""

from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from launcher.cli import main as cli
from launcher.common.errors import LaunchError, SpecError, UsageError
from launcher.k8s import jobset, tfjob
from launcher.k8s.export import export, text, write
from launcher.k8s.layout import ExportOptions, TaskGroup, task_groups
from launcher.k8s.names import Toleration
from launcher.k8s.yaml_text import documents, scalar
from launcher.plan import PlanInputs, build_plan
from launcher.spec.load import load_spec, parse_spec
from launcher.spec.models import ClusterSpec
from tests.conftest import REPO
from tests.unit.k8s_upstream import (
    COMPLETION_INDEX_ANNOTATION,
    container_environment,
    job_failure,
    jobset_action,
    tfjob_restarts_fail,
    tfjob_verdict,
    with_completion_index,
)
from worker.contract import ENV_PREFIX, JOB_COMPLETION_INDEX_VAR, TF_CONFIG
from worker.pod import PodLayoutError, pod_environment

DATA = REPO / "tests" / "data" / "k8s"
GOLDEN = Path(__file__).parent / "golden" / "k8s"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
KUBERNETES = "1.31.0"  # the oldest version the manifests are meant for: podFailurePolicy is GA
IMAGE = "registry.example.com/tflaunch:0.1.0"
SECRET_VALUES = ("not-in-any-manifest-5f1c", "hunter2")
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

GPU_SPEC: dict[str, Any] = {
    "name": "gpu-fleet",
    "checkpoint_dir": "gs://ckpt-bucket/gpu-fleet",
    "env": {
        "TF_CPP_MIN_LOG_LEVEL": "1",
        "WANDB_API_KEY": SECRET_VALUES[0],
        "DATA_URL": f"https://reader:{SECRET_VALUES[1]}@data.example.com/set",
    },
    "hosts": [
        {
            "address": "gpu-a.internal",
            "ports": [23456, 23457, 23458, 23459, 23460],
            "gpus": [0, 1, 2, 3],
            "worker_per_gpu": True,
            "evaluator": True,
        },
        {
            "address": "gpu-b.internal",
            "ports": [23456, 23457, 23458, 23459],
            "gpus": [0, 1, 2, 3],
            "worker_per_gpu": True,
        },
    ],
    "training": {"kind": "builtin", "steps": 2000, "checkpoint_every": 200, "mixed_precision": "mixed_bfloat16"},
    "restart": {"max_restarts": 5, "fatal_exit_codes": [2, 3], "grace_period_s": 30, "start_timeout_s": 600},
}
COMMAND_SPEC: dict[str, Any] = {
    "name": "cmd",
    "hosts": [{"address": "a.internal", "chief": True, "workers": 2, "ports": [5000, 5001, 5002]}],
    "training": {"kind": "command", "argv": ["python", "train.py", "--epochs", "3"]},
    "restart": {"fatal_exit_codes": [], "preemption_exit_code": 43},
}
# What operations teams add: a namespace, Kueue's queue, placement, requests, a NetworkPolicy; with
# an evaluator, max_restarts 0 and a preemption code of 128 or more (TFJob restarts those pods).
OPS_SPEC: dict[str, Any] = {
    "name": "ops",
    "hosts": [
        {"address": "a.internal", "chief": True, "workers": 2, "evaluator": True, "ports": [7000, 7001, 7002, 7003]}
    ],
    "restart": {"max_restarts": 0, "preemption_exit_code": 130, "fatal_exit_codes": [2, 200]},
}
OPS_FLAGS: dict[str, Any] = {
    "checkpoint_claim": "ops-runs",
    "claim_size": "50Gi",
    "storage_class": "filestore-rwx",
    "namespace": "ml-team",
    "labels": (("kueue.x-k8s.io/queue-name", "gpu-queue"), ("team", "vision")),
    "node_selector": (("cloud.google.com/gke-nodepool", "trainers"),),
    "tolerations": (Toleration("nvidia.com/gpu", None, "NoSchedule"), Toleration("dedicated", "ml", "")),
    "cpu": "8",
    "memory": "32Gi",
    "network_policy": True,
}
CASES: dict[str, tuple[ClusterSpec, str, dict[str, Any]]] = {
    "example": (
        load_spec(REPO / "cluster.example.json"),
        "cluster.example.json",
        {"checkpoint_claim": "tflaunch-runs", "claim_size": "20Gi"},
    ),
    "gpu-2-hosts": (parse_spec(GPU_SPEC), "gpu-2-hosts.json", {"secret": "train-secrets"}),
    "chief-command": (parse_spec(COMMAND_SPEC), "chief-command.json", {"checkpoint_claim": "runs"}),
    "ops": (parse_spec(OPS_SPEC), "ops.json", OPS_FLAGS),
    "no-restarts": (
        parse_spec({**COMMAND_SPEC, "name": "strict", "restart": {"max_restarts": 0}}),
        "strict.json",
        {"checkpoint_claim": "runs"},
    ),
}
GOLDEN_CASES = ("example", "gpu-2-hosts", "ops")
FORMATS = ("jobset", "tfjob")


def _export(case: str, fmt: str) -> tuple[ClusterSpec, Any]:
    spec, source, flags = CASES[case]
    return spec, export(spec, ExportOptions(image=IMAGE, format=fmt, **flags), source)


def _docs(result: Any) -> dict[str, dict[str, Any]]:
    return {manifest["kind"]: manifest for _, manifest in result.manifests}


# ---- golden files and YAML ----------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", GOLDEN_CASES)
def test_golden_manifests(case: str, fmt: str) -> None:
    _, result = _export(case, fmt)
    actual = text(result)
    path = GOLDEN / f"{case}.{fmt}.yaml"
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual)
    assert actual == path.read_text()


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_yaml_reads_back_as_the_manifests(case: str, fmt: str) -> None:
    _, result = _export(case, fmt)
    assert list(yaml.safe_load_all(text(result))) == [manifest for _, manifest in result.manifests]


def test_yaml_scalars_read_back_unchanged() -> None:
    tricky = [
        "yes", "No", "on", "OFF", "y", "null", "~", "true", "1", "0x1F", "1e3", "1:20", ".inf", "-", "- a",
        "a: b", "a #b", "#c", "'q'", '"d"', "back\\slash", "tab\there", "bell\x07", "é ü", "\U0001f600", "",
        " lead", "trail ", "[x]", "{y}", "*ref", "&anchor", "!tag", "%p", "@at", "`tick", "|", ">", "?",
        "metadata.labels['a/b']", "nvidia.com/gpu", "/abs/path", "line\u2028sep", "\x85next",
    ]  # fmt: skip
    data = {"values": tricky, "keys": {value: index for index, value in enumerate(tricky)}, "n": [0, -1, True, None]}
    assert yaml.safe_load(documents([data])[4:]) == data
    assert scalar("worker") == "worker" and scalar("yes") == "'yes'" and scalar("2222") == "'2222'"


# ---- schemas ------------------------------------------------------------------------------------


@functools.cache
def _crd_schema(file_name: str, api_version: str, kind: str) -> dict[str, Any]:
    with open(DATA / file_name, encoding="utf-8") as handle:
        crd = yaml.load(handle, Loader=_LOADER)
    group, version = api_version.split("/")
    assert crd["spec"]["group"] == group and crd["spec"]["names"]["kind"] == kind
    served = next(v for v in crd["spec"]["versions"] if v["name"] == version)
    return _closed(served["schema"]["openAPIV3Schema"])


def _closed(schema: Any) -> Any:
    """The schema refusing fields it does not name, where it names its fields and keeps no others
    (x-kubernetes-preserve-unknown-fields): what `kubectl apply --validate=strict` enforces."""
    if isinstance(schema, list):
        return [_closed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    closed = {key: (_closed(value) if key != "properties" else {k: _closed(v) for k, v in value.items()})
              for key, value in schema.items()}  # fmt: skip
    if "properties" in schema and "additionalProperties" not in schema:
        if not schema.get("x-kubernetes-preserve-unknown-fields"):
            closed["additionalProperties"] = False
    return closed


def _check_crd(manifest: dict[str, Any], file_name: str) -> None:
    schema = _crd_schema(file_name, manifest["apiVersion"], manifest["kind"])
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(manifest), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors[:10])


def _check_core(manifest: dict[str, Any]) -> None:
    try:
        kubernetes_validate.validate(manifest, KUBERNETES, strict=True)
    except kubernetes_validate.ValidationError as error:
        pytest.fail(f"{manifest['kind']} {manifest['metadata']['name']}: {error}")


_DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_RULE_NAME = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?")
_JOB_FAILURE_REASONS = {  # the JobSet webhook's validOnJobFailureReasons
    "BackoffLimitExceeded",
    "DeadlineExceeded",
    "FailedIndexes",
    "MaxFailedIndexesExceeded",
    "PodFailurePolicy",
}


def _check_jobset_admission(js: dict[str, Any]) -> None:
    """What the JobSet webhook (v0.10) and the Job API refuse that a schema cannot say."""
    name = js["metadata"]["name"]
    jobs = {rj["name"]: rj for rj in js["spec"]["replicatedJobs"]}
    for rj_name, rj in jobs.items():
        job = rj["template"]["spec"]
        longest_pod = f"{name}-{rj_name}-{rj['replicas'] - 1}-{job['completions'] - 1}-abcde"
        assert _DNS_LABEL.fullmatch(longest_pod) and len(longest_pod) <= 63
        policy = job.get("podFailurePolicy")
        if policy is not None:
            assert job["template"]["spec"]["restartPolicy"] == "Never"  # the Job API requires it
            for rule in policy["rules"]:
                assert rule["action"] in ("FailJob", "FailIndex", "Ignore", "Count")  # the Job API's enums
                assert ("onExitCodes" in rule) != ("onPodConditions" in rule)  # exactly one
                if "onPodConditions" in rule:
                    assert all(p["status"] in ("True", "False", "Unknown") for p in rule["onPodConditions"])
                    continue
                assert rule["onExitCodes"]["operator"] in ("In", "NotIn")
                values = rule["onExitCodes"]["values"]
                assert values == sorted(set(values)) and 0 not in values and len(values) <= 255
    assert set(js["spec"]["successPolicy"]["targetReplicatedJobs"]) <= set(jobs)
    rules = js["spec"]["failurePolicy"]["rules"]
    assert len({rule["name"] for rule in rules}) == len(rules)
    for rule in rules:
        assert _RULE_NAME.fullmatch(rule["name"])
        assert set(rule.get("onJobFailureReasons", [])) <= _JOB_FAILURE_REASONS
        assert set(rule.get("targetReplicatedJobs", [])) <= set(jobs)
        for pattern in rule.get("onJobFailureMessagePatterns", []):
            re.compile(pattern)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_manifests_pass_the_pinned_schemas(case: str, fmt: str) -> None:
    _, result = _export(case, fmt)
    for _, manifest in result.manifests:
        kind = manifest["kind"]
        if kind == "JobSet":
            _check_crd(manifest, "jobset.x-k8s.io_jobsets.yaml")
            _check_jobset_admission(manifest)
            for rj in manifest["spec"]["replicatedJobs"]:  # each Job the JobSet creates, as a core Job
                job_name = f"{manifest['metadata']['name']}-{rj['name']}-0"
                _check_core({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": job_name}, **rj["template"]})
        elif kind == "TFJob":
            _check_crd(manifest, "kubeflow.org_tfjobs.yaml")
            assert _DNS_LABEL.fullmatch(manifest["metadata"]["name"])
            for replica_type, replica in manifest["spec"]["tfReplicaSpecs"].items():
                pod_name = f"{manifest['metadata']['name']}-{replica_type.lower()}-{replica['replicas'] - 1}"
                assert _DNS_LABEL.fullmatch(pod_name) and len(pod_name) <= 63
                meta = {"name": pod_name}
                _check_core(
                    {"apiVersion": "v1", "kind": "PodTemplate", "metadata": meta, "template": replica["template"]}
                )
                containers = replica["template"]["spec"]["containers"]
                assert any(c["name"] == "tensorflow" for c in containers)  # the operator's webhook requires it
        else:
            assert kind in ("PersistentVolumeClaim", "NetworkPolicy")
            _check_core(manifest)


def test_a_misspelt_field_would_be_caught() -> None:
    """The closed CRD schema is what catches a field the API server would drop without a word."""
    _, result = _export("example", "jobset")
    js = json.loads(json.dumps(_docs(result)["JobSet"]))
    js["spec"]["failurePolicy"]["rules"][0]["onJobFailureMessagePattern"] = ["x"]
    with pytest.raises(AssertionError, match="onJobFailureMessagePattern"):
        _check_crd(js, "jobset.x-k8s.io_jobsets.yaml")


# ---- exit-code routing ----------------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_jobset_routes_exit_codes_like_the_supervisor(case: str) -> None:
    spec, result = _export(case, "jobset")
    js = _docs(result)["JobSet"]
    restart = spec.restart
    expected = {restart.preemption_exit_code: "RestartJobSetAndIgnoreMaxRestarts"}
    expected.update({code: "FailJobSet" for code in restart.fatal_exit_codes})
    expected.update({code: "RestartJobSet" for code in (1, 3, 42, 43, 127, 137, 143) if code not in expected})
    disrupted = ("DisruptionTarget",)
    for rj in js["spec"]["replicatedJobs"]:
        if rj["name"] == "evaluator":
            continue
        job = rj["template"]["spec"]
        for code, action in expected.items():
            failure = job_failure(job, code)
            assert failure is not None, f"exit {code} of a {rj['name']} must end its Job at once"
            assert jobset_action(js, rj["name"], *failure) == action, f"exit {code} of a {rj['name']}"
            # Taken away by Kubernetes (drained, shut down, evicted, reclaimed) and ended with that code:
            # what the task said wins; a crash while being taken away is a disruption, not counted.
            failure = job_failure(job, code, disrupted)
            assert failure is not None
            routed = "RestartJobSetAndIgnoreMaxRestarts" if action == "RestartJobSet" else action
            assert jobset_action(js, rj["name"], *failure) == routed, f"exit {code} of a disrupted {rj['name']}"
        failure = job_failure(job, None, disrupted)  # lost with its node: no container ever ended
        assert failure is not None and failure[0] == "PodFailurePolicy"
        assert jobset_action(js, rj["name"], *failure) == "RestartJobSetAndIgnoreMaxRestarts"
        failure = job_failure(job, None, ("Ready",))  # failed without a disruption: counted
        assert failure is not None and jobset_action(js, rj["name"], *failure) == "RestartJobSet"
    policy = js["spec"]["failurePolicy"]
    assert policy["maxRestarts"] == restart.max_restarts
    assert policy["restartStrategy"] == "BlockingRecreate"  # no new pod meets an old one still saving


def test_the_evaluator_neither_fails_nor_restarts_the_set() -> None:
    _, result = _export("gpu-2-hosts", "jobset")
    js = _docs(result)["JobSet"]
    evaluator = next(rj for rj in js["spec"]["replicatedJobs"] if rj["name"] == "evaluator")
    job = evaluator["template"]["spec"]
    assert job["backoffLimit"] == 2**31 - 1 and "podFailurePolicy" not in job
    assert job["template"]["spec"]["restartPolicy"] == "OnFailure"  # restarts in place; its Job never fails
    for code in (1, 2, 42, 137):
        assert job_failure(job, code) is None and job_failure(job, code, ("DisruptionTarget",)) is None
    assert js["spec"]["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["worker"]}
    assert all(rule["targetReplicatedJobs"] == ["worker"] for rule in js["spec"]["failurePolicy"]["rules"])
    _, result = _export("gpu-2-hosts", "tfjob")
    replicas = _docs(result)["TFJob"]["spec"]["tfReplicaSpecs"]
    assert replicas["Evaluator"]["restartPolicy"] == "OnFailure" and replicas["Worker"]["restartPolicy"] == "ExitCode"


def test_the_tfjob_says_once_what_it_cannot_keep(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    spec_file = tmp_path / "gpu.json"
    spec_file.write_text(json.dumps({**GPU_SPEC, "checkpoint_dir": None}))
    argv = ["export", "k8s", "--cluster", str(spec_file), "--image", IMAGE, "--secret", "s", "--checkpoint-claim", "r"]
    assert cli.main([*argv, "--format", "tfjob"]) == 0
    captured = capsys.readouterr()
    assert captured.err.count("one at a time") == 1 and captured.err.count("exit 42") == 1
    assert "one at a time" not in captured.out.split("---", 1)[1]  # the YAML has it only as a comment
    assert cli.main(argv) == 0
    assert capsys.readouterr().err == ""  # the JobSet form keeps them all


@pytest.mark.parametrize("fmt", FORMATS)
def test_without_a_claim_the_export_says_what_is_lost(
    fmt: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    spec_file = tmp_path / "gpu.json"
    spec_file.write_text(json.dumps(GPU_SPEC))  # checkpoints at gs://: no claim needed
    assert (
        cli.main(["export", "k8s", "--cluster", str(spec_file), "--image", IMAGE, "--secret", "s", "--format", fmt])
        == 0
    )
    captured = capsys.readouterr()
    assert captured.err.count("emptyDir") == 1 and "--checkpoint-claim NAME" in captured.err
    assert "metrics.jsonl" in captured.err and "eval.jsonl" in captured.err
    head = captured.out.split("---", 1)[0]
    assert "/tflaunch/gpu-fleet is not kept" in head and "--checkpoint-claim" in head
    _, result = _export("example", fmt)  # with a claim: nothing said
    assert not any("emptyDir" in line for line in (*result.comments, *result.warnings))


@pytest.mark.parametrize("case", sorted(CASES))
def test_evaluator_restarts_never_fail_a_tfjob(case: str) -> None:
    """Training Operator 1.9.4 counts in-place restarts, which only the evaluator has, against
    runPolicy.backoffLimit: whatever max_restarts says, they must not fail the training."""
    spec, result = _export(case, "tfjob")
    job = _docs(result)["TFJob"]
    replicas = job["spec"]["tfReplicaSpecs"]
    if "Evaluator" in replicas:
        assert "backoffLimit" not in job["spec"]["runPolicy"]
        for restarts in (1, 2, 5, 1000):
            assert tfjob_verdict(job, "Evaluator", 1) == "restart in place"
            assert not tfjob_restarts_fail(job, {"Evaluator": restarts})
    limit = job["spec"]["runPolicy"].get("backoffLimit")
    assert limit in (None, 0)  # a limit of 1 or more could only ever stop the evaluator
    trainers = [kind for kind in replicas if kind != "Evaluator"]
    for kind in trainers:
        for code in (1, 2, 42, 127):
            assert tfjob_verdict(job, kind, code) == "fail"
        for code in (128 + 9, 128 + 15):  # a death by a signal
            assert tfjob_verdict(job, kind, code) == ("fail" if limit == 0 else "recreate pod")
    if spec.restart.max_restarts == 0 and "Evaluator" not in replicas:
        assert limit == 0  # the first failed pod fails the TFJob: max_restarts 0 kept
    lines = tfjob.caveats(spec, task_groups(spec, "c.json"))
    preempted = spec.restart.preemption_exit_code
    said = next(line for line in lines if f"exit {preempted}" in line)
    verdict = tfjob_verdict(job, trainers[0], preempted)
    if verdict == "recreate pod":
        assert "restarts the preempted pod" in said
    else:
        assert re.search(rf"a preemption \(exit {preempted}, checkpoint saved\)[^.]* (fail the TFJob|too)", said)
    retried_line = next((line for line in lines if line.startswith("fatal_exit_codes")), "")
    retried = {int(code) for code in re.findall(r"\d+", retried_line.split(":")[0])}
    for code in spec.restart.fatal_exit_codes:  # the caveat names exactly the fatal codes TFJob retries
        assert tfjob_verdict(job, trainers[0], code) == ("recreate pod" if code in retried else "fail")
    enforced = next(line for line in lines if "max_restarts" in line)
    assert ("not enforced" in enforced) == (limit is None or "Evaluator" in replicas)


# ---- resources, storage, secrets ----------------------------------------------------------------------


def _containers(result: Any) -> dict[str, dict[str, Any]]:
    docs = _docs(result)
    if "JobSet" in docs:
        pods = {
            rj["name"]: rj["template"]["spec"]["template"]["spec"] for rj in docs["JobSet"]["spec"]["replicatedJobs"]
        }
    else:
        replicas = docs["TFJob"]["spec"]["tfReplicaSpecs"]
        pods = {kind.lower(): replica["template"]["spec"] for kind, replica in replicas.items()}
    return {kind: {**pod["containers"][0], "_pod": pod} for kind, pod in pods.items()}


def _env(box: dict[str, Any]) -> dict[str, Any]:
    return {entry["name"]: entry.get("value", entry.get("valueFrom")) for entry in box["env"]}


@pytest.mark.parametrize("fmt", FORMATS)
def test_gpus_grace_storage_and_startup(fmt: str) -> None:
    _, result = _export("gpu-2-hosts", fmt)
    boxes = _containers(result)
    worker, evaluator = boxes["worker"], boxes["evaluator"]
    assert worker["resources"] == {"limits": {"nvidia.com/gpu": 1}}  # worker_per_gpu: one GPU per task
    assert "resources" not in evaluator and _env(evaluator)["CUDA_VISIBLE_DEVICES"] == ""  # scores on CPU
    assert "CUDA_VISIBLE_DEVICES" not in _env(worker)  # the device plugin decides which GPU
    assert worker["_pod"]["terminationGracePeriodSeconds"] == 30
    assert worker["startupProbe"] == {"tcpSocket": {"port": 2222}, "periodSeconds": 5, "failureThreshold": 120}
    assert "startupProbe" not in evaluator
    # checkpoints at gs://, passed through; a GPU pod's /dev/shm in memory (NCCL's buffers), not the 64 MiB default
    assert worker["_pod"]["volumes"] == [
        {"name": "run", "emptyDir": {}},
        {"name": "dshm", "emptyDir": {"medium": "Memory"}},
    ]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in worker["volumeMounts"]
    assert evaluator["_pod"]["volumes"] == [{"name": "run", "emptyDir": {}}]  # no GPU, no shared-memory volume
    layout = json.loads(_env(worker)["TFLAUNCH_POD_LAYOUT"])
    assert layout["checkpoint_dir"] == "gs://ckpt-bucket/gpu-fleet" and layout["tasks"] == {"worker": 8, "evaluator": 1}
    _, result = _export("example", fmt)
    worker = _containers(result)["worker"]
    assert "resources" not in worker and worker["_pod"]["terminationGracePeriodSeconds"] == 5
    assert worker["_pod"]["volumes"] == [{"name": "run", "persistentVolumeClaim": {"claimName": "tflaunch-runs"}}]
    claim = _docs(result)["PersistentVolumeClaim"]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"] and claim["metadata"]["name"] == "tflaunch-runs"
    assert json.loads(_env(worker)["TFLAUNCH_POD_LAYOUT"])["checkpoint_dir"] == "/tflaunch/example/checkpoints"
    _, result = _export("chief-command", fmt)
    chief = _containers(result)["chief"]
    assert chief["command"] == ["python", "-m", "worker.pod", "--", "python", "train.py", "--epochs", "3"]
    assert "startupProbe" not in chief  # a user's command may build its strategy late


@pytest.mark.parametrize("fmt", FORMATS)
def test_cuda_visible_devices_of_the_spec_reaches_the_pods_and_requests_no_gpu(fmt: str) -> None:
    """Only the hosts' `gpus` ask Kubernetes for GPUs; a spec that hides them (-1) runs on CPU nodes."""
    for value in ("-1", "0,1,2,3", ""):
        data = {**COMMAND_SPEC, "env": {"CUDA_VISIBLE_DEVICES": value}}
        result = export(parse_spec(data), ExportOptions(image=IMAGE, format=fmt, checkpoint_claim="r"), "c.json")
        for box in _containers(result).values():
            assert "resources" not in box and _env(box)["CUDA_VISIBLE_DEVICES"] == value, (value, box.get("resources"))


@pytest.mark.parametrize("fmt", FORMATS)
def test_secret_values_are_referenced_never_written(fmt: str) -> None:
    _, result = _export("gpu-2-hosts", fmt)
    written = text(result)
    assert not any(value in written for value in SECRET_VALUES)
    for box in _containers(result).values():
        env = _env(box)
        for key in ("WANDB_API_KEY", "DATA_URL"):
            assert env[key] == {"secretKeyRef": {"name": "train-secrets", "key": key}}
        assert env["TF_CPP_MIN_LOG_LEVEL"] == "1"
    spec = CASES["gpu-2-hosts"][0]
    with pytest.raises(UsageError, match="--secret NAME") as refused:
        export(spec, ExportOptions(image=IMAGE, format=fmt), "gpu.json")
    assert not any(value in str(refused.value) for value in SECRET_VALUES)


def test_passwords_outside_the_env_are_refused_not_written() -> None:
    url = f"s3://reader:{SECRET_VALUES[1]}@store.example.com/ckpt"
    data = {
        **COMMAND_SPEC,
        "checkpoint_dir": url,
        "training": {
            "kind": "command",
            "argv": [
                *("python", "train.py", "--data", url.replace("s3", "https"), "--api-key", SECRET_VALUES[0]),
                "--password=correct-horse-battery",
            ],
        },
    }
    with pytest.raises(SpecError) as caught:
        export(parse_spec(data), ExportOptions(image=IMAGE, secret="s"), "c.json")
    message = str(caught.value)
    assert caught.value.exit_code == 2 and not any(value in message for value in SECRET_VALUES)
    for path in ("$.checkpoint_dir", "$.training.argv[3]", "$.training.argv[5]", "$.training.argv[6]"):
        assert f"{path}: holds a secret" in message
    assert "$.training.argv[4]" not in message and "Secret" in message


@pytest.mark.parametrize("fmt", FORMATS)
def test_env_values_the_spec_declares_secret_are_referenced(fmt: str) -> None:
    data = {**COMMAND_SPEC, "secrets": ["SESSION_BLOB"], "env": {"SESSION_BLOB": SECRET_VALUES[0], "LEVEL": "1"}}
    result = export(
        parse_spec(data), ExportOptions(image=IMAGE, format=fmt, secret="s", checkpoint_claim="r"), "c.json"
    )
    assert SECRET_VALUES[0] not in text(result)
    env = _env(_containers(result)["chief"])
    assert env["SESSION_BLOB"] == {"secretKeyRef": {"name": "s", "key": "SESSION_BLOB"}} and env["LEVEL"] == "1"


def test_tasks_of_a_type_must_look_alike() -> None:
    uneven = json.loads(json.dumps(GPU_SPEC))
    uneven["hosts"][1].update(gpus=[0, 1, 2, 3, 4, 5, 6, 7], worker_per_gpu=False, workers=1, ports=[23456])
    with pytest.raises(SpecError, match=r"same number of GPUs"):  # refused by the spec or, failing that, here
        task_groups(parse_spec(uneven), "uneven.json")
    envs = json.loads(json.dumps(GPU_SPEC))
    envs["hosts"][1]["env"] = {"NCCL_SOCKET_IFNAME": "eth1"}
    with pytest.raises(SpecError, match=r"hosts\[1\]\.env.*move the values to the spec's env"):
        task_groups(parse_spec(envs), "envs.json")
    groups = task_groups(CASES["gpu-2-hosts"][0], "gpu.json")
    assert [(g.task_type, g.count, g.gpus, g.hide_gpus) for g in groups] == [
        ("worker", 8, 1, False),
        ("evaluator", 1, 0, True),
    ]
    assert isinstance(groups[0], TaskGroup)


# ---- TF_CONFIG: the pod's equals the plan's ---------------------------------------------------------


def _stable_host(fmt: str, name: str, task_type: str, index: int) -> str:
    """Where each engine makes a pod reachable, as its documentation states it."""
    if fmt == "jobset":  # <jobSet.name>-<replicatedJob.name>-<job-index>-<pod-index>.<subdomain>
        return f"{name}-{task_type}-0-{index}.{name}"
    return f"{name}-{task_type}-{index}"  # the TFJob operator's Service of each replica


SERVICE_ENV = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}  # the kubelet's, always


def _kubelet_start(box: dict[str, Any], fmt: str, index: int, attempt: int) -> tuple[dict[str, str], list[str]]:
    """The environment and argv Kubernetes starts that pod's container with: the Job controller's
    JOB_COMPLETION_INDEX (JobSet: Indexed Jobs), every reference resolved, `$(VAR)` expanded."""
    fields = {
        f"metadata.labels['{jobset.RESTART_LABEL}']": str(attempt),
        f"metadata.labels['{tfjob.INDEX_LABEL}']": str(index),
        f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']": str(index),
    }
    if fmt == "jobset":
        box = with_completion_index(box)
    refs = [entry["valueFrom"]["secretKeyRef"] for entry in box["env"] if "secretKeyRef" in entry.get("valueFrom", {})]
    secrets = {(ref["name"], ref["key"]): "from-the-secret" for ref in refs}
    return container_environment(box, fields, secrets, SERVICE_ENV)


def _pod_env(box: dict[str, Any], fmt: str, index: int, attempt: int) -> dict[str, str]:
    return _kubelet_start(box, fmt, index, attempt)[0]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_pod_computes_the_plans_tf_config(case: str, fmt: str) -> None:
    spec, result = _export(case, fmt)
    boxes = _containers(result)
    layout = json.loads(_env(next(iter(boxes.values())))["TFLAUNCH_POD_LAYOUT"])
    name, port, attempt = layout["run_name"], layout["port"], 0 if fmt == "tfjob" else 2
    hosts = [
        {"address": _stable_host(fmt, name, task_type, i), "tasks": [{"type": task_type, "index": i, "port": port}]}
        for task_type, count in layout["tasks"].items()
        for i in range(count)
    ]
    same_layout: dict[str, Any] = {
        "name": name,
        "hosts": hosts,
        "training": spec.training.model_dump(mode="json"),
        "restart": {"preemption_exit_code": spec.restart.preemption_exit_code},
    }
    if layout["checkpoint_dir"].startswith("gs://"):
        same_layout["checkpoint_dir"] = layout["checkpoint_dir"]
    plan = build_plan(parse_spec(same_layout), PlanInputs(f"/tflaunch/{name}", attempt, "python", "/"))
    planned = {task.name: task for task in plan.tasks}
    seen = set()
    for task_type, box in boxes.items():
        for index in range(layout["tasks"][task_type]):
            computed = pod_environment(_pod_env(box, fmt, index, attempt))
            task = planned[f"{task_type}:{index}"]
            assert json.loads(computed[TF_CONFIG]) == task.tf_config
            assert computed == {k: v for k, v in task.task_env.items() if k == TF_CONFIG or k.startswith(ENV_PREFIX)}
            seen.add(task.name)
    assert seen == set(planned)
    if "evaluator:0" in planned:
        assert list(planned["evaluator:0"].tf_config["cluster"]) == ["evaluator"]
        assert "evaluator" not in planned["worker:0"].tf_config["cluster"]


def test_the_entry_point_refuses_a_pod_it_cannot_place() -> None:
    _, result = _export("example", "jobset")
    env = _pod_env(_containers(result)["worker"], "jobset", 0, 0)
    with pytest.raises(PodLayoutError, match="JOB_COMPLETION_INDEX='3'"):
        pod_environment({**env, JOB_COMPLETION_INDEX_VAR: "3"})
    with pytest.raises(PodLayoutError, match="TFLAUNCH_POD_TASK_TYPE='chief'"):
        pod_environment({**env, "TFLAUNCH_POD_TASK_TYPE": "chief"})
    with pytest.raises(PodLayoutError, match="not a job layout"):
        pod_environment({**env, "TFLAUNCH_POD_LAYOUT": '{"run_name": "x"}'})
    with pytest.raises(PodLayoutError, match="is not set"):
        pod_environment({})


# ---- the command line -----------------------------------------------------------------------------


def _spec_file(tmp_path: Path, data: dict[str, Any]) -> str:
    path = tmp_path / "c.json"
    path.write_text(json.dumps(data))
    return str(path)


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        ([], "--image"),
        (["--image", IMAGE, "--format", "helm"], "--format 'helm'"),
        (["--image", "two words"], "--image 'two words'"),
        (["--image", IMAGE, "--port", "0"], "--port 0"),
        (["--image", IMAGE], "--checkpoint-claim NAME"),
        (["--image", IMAGE, "--checkpoint-claim", "Runs"], "--checkpoint-claim 'Runs'"),
        (["--image", IMAGE, "--claim-size", "5Gi"], "--claim-size writes the claim"),
        (["--image", IMAGE, "--checkpoint-claim", "r", "--claim-size", "lots"], "--claim-size 'lots'"),
        (["--image", IMAGE, "--checkpoint-claim", "r", "--name", "Big_Run"], "give --name big-run"),
        (["--image", IMAGE, "--checkpoint-claim", "r", "--name", "x" * 50], "at most 46 characters"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(
    flags: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _spec_file(tmp_path, {"name": "r", "hosts": [{"address": "localhost", "workers": 2}]})
    assert cli.main(["export", "k8s", "--cluster", spec, *flags]) == 2
    captured = capsys.readouterr()
    assert says in captured.err and "Traceback" not in captured.err and captured.out == ""


def test_a_bad_spec_or_subcommand_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = _spec_file(tmp_path, {"name": "r", "hosts": [{"address": "localhost", "workers": 0}]})
    assert cli.main(["export", "k8s", "--cluster", spec, "--image", IMAGE, "--checkpoint-claim", "r"]) == 2
    assert "$.hosts[0].workers" in capsys.readouterr().err
    assert cli.main(["export", "slurm", "--cluster", spec]) == 2
    assert "invalid choice: 'slurm'" in capsys.readouterr().err


def test_output_to_stdout_or_one_file_per_object(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = _spec_file(tmp_path, COMMAND_SPEC)
    flags = ["--image", IMAGE, "--checkpoint-claim", "runs", "--claim-size", "5Gi"]
    assert cli.main(["export", "k8s", "--cluster", spec, *flags, "--", "python", "other.py"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [doc["kind"] for doc in docs] == ["PersistentVolumeClaim", "JobSet"]
    box = docs[1]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    assert box["command"][-3:] == ["--", "python", "other.py"]  # the command after -- as every task
    out = tmp_path / "manifests"
    assert cli.main(["export", "k8s", "--cluster", spec, *flags, "--format", "tfjob", "-o", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["claim.yaml", "tfjob.yaml"]
    assert yaml.safe_load((out / "tfjob.yaml").read_text())["kind"] == "TFJob"
    assert str(out / "tfjob.yaml") in capsys.readouterr().out


def test_write_puts_the_comments_in_every_file(tmp_path: Path) -> None:
    _, result = _export("example", "jobset")
    paths = write(result, tmp_path / "out")
    assert [p.name for p in paths] == ["claim.yaml", "jobset.yaml"]
    assert all(p.read_text().startswith("# Written by `launch export k8s") for p in paths)


def test_the_jobset_leaves_its_headless_service_to_jobset() -> None:
    _, result = _export("example", "jobset")
    assert "Service" not in _docs(result)  # one of ours would outlive `kubectl delete jobset`
    js = _docs(result)["JobSet"]
    name = js["metadata"]["name"]  # JobSet names its Service after the subdomain, ready or not (pods resolve early)
    assert js["spec"]["network"] == {"enableDNSHostnames": True, "subdomain": name, "publishNotReadyAddresses": True}


@pytest.mark.parametrize(("fmt", "other"), [("jobset", "tfjob.yaml"), ("tfjob", "jobset.yaml")])
def test_an_output_directory_holds_one_engine_only(
    fmt: str, other: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _spec_file(tmp_path, COMMAND_SPEC)
    out = tmp_path / "manifests"
    out.mkdir()
    (out / other).write_text("kind: x\n")
    flags = ["--image", IMAGE, "--checkpoint-claim", "runs", "--format", fmt, "-o", str(out)]
    assert cli.main(["export", "k8s", "--cluster", spec, *flags]) == 2
    err = capsys.readouterr().err
    assert f"-o {out}" in err and other in err and "both" in err and "Traceback" not in err
    assert sorted(p.name for p in out.iterdir()) == [other]  # nothing written
    (out / other).unlink()
    (out / f"{fmt}.yaml").write_text("kind: x\n")  # its own engine's earlier export: replaced
    assert cli.main(["export", "k8s", "--cluster", spec, *flags]) == 0


def test_an_unwritable_output_exits_2_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = _spec_file(tmp_path, COMMAND_SPEC)
    flags = ["--image", IMAGE, "--checkpoint-claim", "runs"]
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    for out in (a_file, a_file / "below"):
        assert cli.main(["export", "k8s", "--cluster", spec, *flags, "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"-o {out}" in err and "Traceback" not in err
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if os.access(locked, os.W_OK):  # root writes anywhere
        pytest.skip("this user can write a read-only directory")
    assert cli.main(["export", "k8s", "--cluster", spec, *flags, "-o", str(locked)]) == 2
    assert f"-o {locked}" in capsys.readouterr().err


def test_every_export_error_is_a_launch_error() -> None:
    spec = CASES["example"][0]
    for options in (ExportOptions(image=""), ExportOptions(image=IMAGE, format="x"), ExportOptions(image=IMAGE)):
        with pytest.raises(LaunchError):
            export(spec, options, "c.json")


def test_files_of_an_earlier_export_are_refused_and_a_refusal_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _spec_file(tmp_path, COMMAND_SPEC)
    out = tmp_path / "manifests"
    first = ["--image", IMAGE, "--checkpoint-claim", "old", "--claim-size", "1Gi", "--network-policy", "-o", str(out)]
    assert cli.main(["export", "k8s", "--cluster", spec, *first]) == 0
    before = {p.name: p.read_text() for p in out.iterdir()}
    assert sorted(before) == ["claim.yaml", "jobset.yaml", "network-policy.yaml"]
    assert (
        cli.main(["export", "k8s", "--cluster", spec, "--image", IMAGE, "--checkpoint-claim", "new", "-o", str(out)])
        == 2
    )
    err = capsys.readouterr().err
    assert "claim.yaml, network-policy.yaml from an earlier export" in err and "Traceback" not in err
    assert {p.name: p.read_text() for p in out.iterdir()} == before  # nothing written, nothing removed
    fresh = tmp_path / "fresh"
    (fresh / "jobset.yaml").mkdir(parents=True)  # the last file cannot be written: neither is the first
    assert cli.main(["export", "k8s", "--cluster", spec, *first[:-1], str(fresh)]) == 2
    assert "jobset.yaml there is not a file" in capsys.readouterr().err
    assert sorted(p.name for p in fresh.iterdir()) == ["jobset.yaml"]


@pytest.mark.parametrize("url", ["file:///data/ckpt", "ram://ckpt"])
def test_a_url_that_stays_inside_each_pod_is_no_shared_storage(url: str) -> None:
    spec = parse_spec({**COMMAND_SPEC, "checkpoint_dir": url})
    with pytest.raises(UsageError, match="--checkpoint-claim NAME"):
        export(spec, ExportOptions(image=IMAGE), "c.json")
    result = export(spec, ExportOptions(image=IMAGE, checkpoint_claim="runs"), "c.json")
    layout = json.loads(_env(_containers(result)["worker"])["TFLAUNCH_POD_LAYOUT"])
    assert layout["checkpoint_dir"].startswith("/tflaunch/") and "is a path on the hosts" in text(result)


@pytest.mark.parametrize("fmt", FORMATS)
def test_elastic_is_refused_and_spare_hosts_are_said_to_be_the_schedulers(fmt: str) -> None:
    hosts = [{"address": f"10.0.0.{i}", "workers": 1, "ports": [2222]} for i in (1, 2)]
    data = {**COMMAND_SPEC, "hosts": hosts, "elastic": {"min_hosts": 1}}
    with pytest.raises(SpecError) as refused:
        export(parse_spec(data), ExportOptions(image=IMAGE, format=fmt, checkpoint_claim="r"), "c.json")
    assert [p.path for p in refused.value.problems] == ["$.elastic"]
    spares = {**COMMAND_SPEC, "hosts": hosts, "spare_hosts": [{"address": "10.0.0.9", "workers": 1, "ports": [2222]}]}
    result = export(parse_spec(spares), ExportOptions(image=IMAGE, format=fmt, checkpoint_claim="r"), "c.json")
    assert any("spare_hosts are not exported" in w for w in result.warnings)
    assert "10.0.0.9" not in text(result)
