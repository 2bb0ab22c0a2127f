"""`launch export k8s`: what is applied is exactly what the spec says.

No value of the spec or of the command line can change the structure of the manifests (every
Unicode line break and control character, through every field that reaches them), the kubelet's
`$(VAR)` expansion (ported from its source in tests/unit/k8s_upstream.py) leaves each container
with exactly the environment and arguments `launch --dry-run --json` shows, and the variables a
controller sets in each pod cannot be taken over by the spec's env.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher.cli import main as cli
from launcher.common.errors import SpecError, UsageError
from launcher.k8s.export import export, text
from launcher.k8s.layout import ExportOptions
from launcher.k8s.names import Toleration
from launcher.k8s.yaml_text import documents
from launcher.spec.load import parse_spec
from launcher.spec.models import ClusterSpec
from launcher.spec.strict_json import json_child
from tests.unit.k8s_upstream import (
    COMPLETION_INDEX_ANNOTATION,
    container_environment,
    expand,
    with_completion_index,
)
from worker.contract import CHECKPOINT_DIR_VAR, JOB_COMPLETION_INDEX_VAR, TASK_VAR
from worker.pod import pod_environment
from worker.training_spec import CommandTraining

IMAGE = "registry.example.com/tflaunch:0.1.0"
FORMATS = ("jobset", "tfjob")
# Every character a YAML reader (PyYAML; the Go reader of kubectl and kustomize) or a terminal may
# take for a line break or a control: C0, DEL, C1 (U+0085 among them), U+2028, U+2029.
BREAKS_AND_CONTROLS = [
    *(chr(code) for code in range(0x20)),
    "\x7f",
    *(chr(code) for code in range(0x80, 0xA0)),
    "\u2028",
    "\u2029",
]
SPEC: dict[str, Any] = {
    "name": "vals",
    "checkpoint_dir": "/data/checkpoints",
    "env": {"MODE": "fast", "DATA_ROOT": "/data"},
    "hosts": [
        {"address": "a.internal", "chief": True, "workers": 2, "ports": [7000, 7001, 7002], "env": {"ZONE": "b"}},
    ],
    "training": {"kind": "command", "argv": ["python", "train.py", "--out", "/data/out"]},
}
FUNCTION_SPEC: dict[str, Any] = {
    "name": "fn",
    "hosts": [{"address": "a.internal", "workers": 2, "ports": [7000, 7001]}],
    "training": {"kind": "function", "target": "pkg.train:main"},
}
SERVICE_ENV = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}


def _strings(data: Any, path: str = "$") -> Iterator[tuple[str, str]]:
    """(JSON path, string) of every string in `data`, and of every object key."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield json_child(path, key), key
            yield from _strings(value, json_child(path, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from _strings(value, json_child(path, index))
    elif isinstance(data, str):
        yield path, data


def _with_char(data: Any, char: str) -> Any:
    """`data` with `char` in the middle of every string and every key."""
    if isinstance(data, dict):
        return {_spliced(key, char): _with_char(value, char) for key, value in data.items()}
    if isinstance(data, list):
        return [_with_char(value, char) for value in data]
    return _spliced(data, char) if isinstance(data, str) else data


def _spliced(value: str, char: str) -> str:
    middle = len(value) // 2
    return value[:middle] + char + value[middle:]


def _pods(manifests: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    for manifest in manifests:
        if manifest["kind"] == "JobSet":
            jobs = manifest["spec"]["replicatedJobs"]
            return {rj["name"]: rj["template"]["spec"]["template"]["spec"] for rj in jobs}
        if manifest["kind"] == "TFJob":
            replicas = manifest["spec"]["tfReplicaSpecs"]
            return {kind.lower(): replica["template"]["spec"] for kind, replica in replicas.items()}
    raise AssertionError("no JobSet or TFJob")


def _start(box: dict[str, Any], fmt: str, index: int) -> tuple[dict[str, str], list[str]]:
    """The container's environment and argv as Kubernetes starts it (attempt 0)."""
    fields = {
        "metadata.labels['jobset.sigs.k8s.io/restart-attempt']": "0",
        "metadata.labels['training.kubeflow.org/replica-index']": str(index),
        f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']": str(index),
    }
    return container_environment(with_completion_index(box) if fmt == "jobset" else box, fields, {}, SERVICE_ENV)


# ---- no value changes the structure --------------------------------------------------------------


@pytest.mark.parametrize("data", [SPEC, FUNCTION_SPEC], ids=["command", "function"])
def test_every_spec_string_refuses_line_breaks_and_controls(data: dict[str, Any]) -> None:
    """Every string and key of the spec, with any of those characters, is refused with its path."""
    every_path = {path for path, _ in _strings(data)}
    for char in BREAKS_AND_CONTROLS:
        with pytest.raises(SpecError) as refused:
            parse_spec(_with_char(data, char))
        named = {problem.path for problem in refused.value.problems}
        assert named == {path for path, _ in _strings(_with_char(data, char))}, repr(char)
        assert len(named) == len(every_path)
        assert all("contains" in problem.message for problem in refused.value.problems)
        assert all(c == "\n" or c.isprintable() for c in str(refused.value)), repr(char)  # shown escaped
    with pytest.raises(SpecError, match=r"\$\.env\.MODE: contains a line separator \(U\+2028\)"):
        parse_spec({**data, "env": {"MODE": "a\u2028b"}})


@pytest.mark.parametrize("surrogate", ["\ud800", "\udfff", "\udc80"])
def test_a_lone_surrogate_is_refused_in_every_string(surrogate: str) -> None:
    """JSON's "\\ud800" without its pair: no UTF-8 for it, and YAML readers (kubectl's) refuse its escape."""
    with pytest.raises(SpecError) as refused:
        parse_spec(_with_char(SPEC, surrogate))
    assert {problem.path for problem in refused.value.problems} == {p for p, _ in _strings(_with_char(SPEC, surrogate))}
    assert all("a lone surrogate" in problem.message for problem in refused.value.problems)
    str(refused.value).encode("utf-8")  # the message itself can be printed


def _unchecked(char: str) -> ClusterSpec:
    """The spec with `char` in every string that reaches a manifest, past the spec's own check (the
    writer must not depend on it)."""
    spec = parse_spec(SPEC)
    training = spec.training
    assert isinstance(training, CommandTraining)
    return spec.model_copy(
        update={
            "checkpoint_dir": f"/data/ck{char}pt",  # a path: the head comments name it
            "env": {"MODE": f"fa{char}st", "DATA_ROOT": f"/da{char}ta"},
            "training": training.model_copy(update={"argv": ["python", f"tr{char}ain.py", "--out", f"o{char}ut"]}),
        }
    )


@pytest.mark.parametrize("fmt", FORMATS)
def test_no_value_changes_the_structure_of_the_manifests(fmt: str) -> None:
    """Past the spec's check, every one of those characters in every value (and in the spec file's
    path) leaves the same objects with the same values, and a head that is comments only."""
    for char in BREAKS_AND_CONTROLS:
        spec = _unchecked(char)
        result = export(spec, ExportOptions(image=IMAGE, format=fmt, checkpoint_claim="runs"), f"dir{char}/c.json")
        written = text(result)
        manifests = [manifest for _, manifest in result.manifests]
        assert list(yaml.safe_load_all(written)) == manifests, repr(char)
        assert all(c == "\n" or c.isprintable() for c in written), repr(char)  # each as an escape
        head = written.split("\n---\n", 1)[0].split("\n")
        assert len(head) == len(result.comments) and all(line.startswith("#") for line in head), repr(char)
        for box in (pod["containers"][0] for pod in _pods(manifests).values()):
            env, argv = _start(box, fmt, 0)
            assert (env["MODE"], env["DATA_ROOT"]) == (f"fa{char}st", f"/da{char}ta")
            assert argv[-3:] == [f"tr{char}ain.py", "--out", f"o{char}ut"]


def test_comment_lines_stay_one_line_whatever_they_hold() -> None:
    for char in BREAKS_AND_CONTROLS:
        written = documents([{"kind": "ConfigMap"}], [f"x{char}kind: ClusterRoleBinding", "y"])
        assert written.count("\n") == 4 and list(yaml.safe_load_all(written)) == [{"kind": "ConfigMap"}]


OPTION_FIELDS: dict[str, Callable[[str], dict[str, Any]]] = {
    "--image": lambda v: {"image": f"registry/{v}:1"},
    "--checkpoint-claim": lambda v: {"checkpoint_claim": f"r{v}"},
    "--claim-size": lambda v: {"checkpoint_claim": "r", "claim_size": f"5{v}Gi"},
    "--storage-class": lambda v: {"checkpoint_claim": "r", "claim_size": "5Gi", "storage_class": f"s{v}"},
    "--secret": lambda v: {"secret": f"s{v}"},
    "--namespace": lambda v: {"namespace": f"n{v}"},
    "--label": lambda v: {"labels": (("team", f"v{v}"),)},
    "--node-selector": lambda v: {"node_selector": ((f"k{v}", "v"),)},
    "--toleration": lambda v: {"tolerations": (Toleration(f"k{v}"),)},
    "--cpu": lambda v: {"cpu": f"8{v}"},
    "--memory": lambda v: {"memory": f"32{v}Gi"},
    "--name": lambda v: {"name": f"n{v}"},
}


@pytest.mark.parametrize("flag", sorted(OPTION_FIELDS))
def test_every_flag_refuses_line_breaks_and_controls(flag: str) -> None:
    spec = parse_spec(SPEC)
    for char in BREAKS_AND_CONTROLS:
        options: dict[str, Any] = {"image": IMAGE, "checkpoint_claim": "runs", **OPTION_FIELDS[flag](char)}
        with pytest.raises(UsageError) as refused:
            export(spec, ExportOptions(**options), "c.json")
        assert flag in str(refused.value), (flag, repr(char))
        assert refused.value.exit_code == 2


# ---- $ reaches the container as written ------------------------------------------------------------

DOLLAR_SPEC: dict[str, Any] = {
    "name": "dollars",
    "checkpoint_dir": "gs://bucket/run$$1",
    "env": {
        "DATA_ROOT": "/data",
        "PRICE": "cost$$5",
        "OUT": "$(DATA_ROOT)/out",
        "HOST_REF": "$(KUBERNETES_SERVICE_HOST)",
        "OPEN": "$(unclosed",
        "TRAIL": "end$",
        "ACCENT": "$\u00e9t\u00e9",
        "SHELL_STYLE": "${HOME}/x $HOME",
    },
    "hosts": [{"address": "a.internal", "chief": True, "workers": 2, "ports": [7000, 7001, 7002]}],
    "training": {"kind": "command", "argv": ["sh", "-c", "echo $$ $(DATA_ROOT) $$$(OUT)", "$"]},
}


def test_the_kubelet_port_expands_as_the_kubelet_does() -> None:
    """The port itself, on the cases of its Go source's own test (expand_test.go, doExpansionTest),
    and on Go's byte-wise handling of a `$` before a multi-byte character."""
    context = {"VAR_A": "A", "VAR_B": "B", "VAR_C": "C", "VAR_REF": "$(VAR_A)", "VAR_EMPTY": ""}

    def resolve(name: str) -> str:
        return context.get(name, f"$({name})")

    cases = {
        "$(VAR_A)": "A",
        "$(VAR_A)-$(VAR_A)": "A-A",
        "___$(VAR_B)___": "___B___",
        "$(VAR_A)_$(VAR_B)_$(VAR_C)": "A_B_C",
        "$$(VAR_B)_$(VAR_A)": "$(VAR_B)_A",
        "$$(VAR_A)_$$(VAR_B)": "$(VAR_A)_$(VAR_B)",
        "f000-$$VAR_A": "f000-$VAR_A",
        "foo\\$(VAR_C)bar": "foo\\Cbar",
        "$(VAR_A$(VAR_B))": "$(VAR_A$(VAR_B))",
        "$(VAR_A$(VAR_B)": "$(VAR_A$(VAR_B)",
        "%%$(VAR_REF)--$(VAR_REF)%%": "%%$(VAR_A)--$(VAR_A)%%",
        "foo$(VAR_EMPTY)bar": "foobar",
        "foo$(VAR_Awhoops!": "foo$(VAR_Awhoops!",
        "$?_boo_$!": "$?_boo_$!",
        "$VAR_A": "$VAR_A",
        "$(VAR_DNE)": "$(VAR_DNE)",
        "$$$$$$(BIG_MONEY)": "$$$(BIG_MONEY)",
        "$$$$$$(VAR_A)": "$$$(VAR_A)",
        "$$$$$$$(GOOD_ODDS)": "$$$$(GOOD_ODDS)",
        "$$$$$$$(VAR_A)": "$$$A",
        "${VAR_A}": "${VAR_A}",
        "$(VAR_B)_______$(A": "B_______$(A",
        "$(VAR_C)_______$(": "C_______$(",
        "$(VAR_A)foobarzab$": "Afoobarzab$",
        "--$($($($($--": "--$($($($($--",
        "$(foo$$var)": "$(foo$$var)",
        "\n": "\n",
        # Go's string(byte): the first byte of "é" (0xC3) becomes the character U+00C3, its second
        # byte (0xA9) is left on its own.
        "$\u00e9": b"$\xc3\x83\xa9".decode("utf-8", "surrogateescape"),
    }
    for given, expected in cases.items():
        assert expand(given, resolve) == expected, given


def _dry_run(tmp_path: Path, capsys: pytest.CaptureFixture[str], data: dict[str, Any]) -> dict[str, Any]:
    spec_file = tmp_path / "c.json"
    spec_file.write_text(json.dumps(data))
    assert cli.main(["--cluster", str(spec_file), "--dry-run", "--json"]) == 0
    plan: dict[str, Any] = json.loads(capsys.readouterr().out)
    return plan


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_container_sees_what_the_dry_run_shows(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = _dry_run(tmp_path, capsys, DOLLAR_SPEC)
    tasks = {task["name"]: task for task in plan["tasks"]}
    result = export(parse_spec(DOLLAR_SPEC), ExportOptions(image=IMAGE, format=fmt), "c.json")
    seen = set()
    for task_type, pod in _pods([manifest for _, manifest in result.manifests]).items():
        box = pod["containers"][0]
        for index in range(sum(1 for name in tasks if name.startswith(f"{task_type}:"))):
            env, argv = _start(box, fmt, index)
            task = tasks[f"{task_type}:{index}"]
            for key in DOLLAR_SPEC["env"]:
                assert env[key] == task["env"][key], key
            assert argv[argv.index("--") + 1 :] == task["argv"]
            computed = pod_environment(env)  # what the entry point gives the task on top
            assert computed[TASK_VAR] == task["name"]
            assert computed[CHECKPOINT_DIR_VAR] == task["env"][CHECKPOINT_DIR_VAR] == plan["checkpoint_dir"]
            seen.add(task["name"])
    assert seen == set(tasks)
    assert tasks["chief:0"]["env"]["PRICE"] == "cost$$5" and tasks["chief:0"]["argv"][-1] == "$"  # as written


# ---- variables the controllers own ----------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_controllers_variables_are_refused_in_the_env(fmt: str) -> None:
    for where in ("env", "hosts"):
        data = json.loads(json.dumps(SPEC))
        target = data["env"] if where == "env" else data["hosts"][0]["env"]
        target[JOB_COMPLETION_INDEX_VAR] = "0"
        with pytest.raises(SpecError) as refused:
            export(parse_spec(data), ExportOptions(image=IMAGE, format=fmt, checkpoint_claim="r"), "c.json")
        path = "$.env" if where == "env" else "$.hosts[0].env"
        assert f"{path}.{JOB_COMPLETION_INDEX_VAR}: the Job controller sets it" in str(refused.value)
        assert "remove it" in str(refused.value) and refused.value.exit_code == 2
    parse_spec(data)  # on hosts the spec stays valid: only the export refuses it


def test_why_the_completion_index_is_the_controllers() -> None:
    """The Job controller adds JOB_COMPLETION_INDEX only when the container lacks it: given by the
    env, every pod would be the same task and the gang would never form."""
    result = export(parse_spec(SPEC), ExportOptions(image=IMAGE, checkpoint_claim="r"), "c.json")
    box = _pods([manifest for _, manifest in result.manifests])["worker"]["containers"][0]
    tasks = {pod_environment(_start(box, "jobset", index)[0])[TASK_VAR] for index in (0, 1)}
    assert tasks == {"worker:0", "worker:1"}
    taken = {**box, "env": [*box["env"], {"name": JOB_COMPLETION_INDEX_VAR, "value": "0"}]}
    tasks = {pod_environment(_start(taken, "jobset", index)[0])[TASK_VAR] for index in (0, 1)}
    assert tasks == {"worker:0"}


def test_a_bad_value_on_the_command_line_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec_file = tmp_path / "c.json"
    spec_file.write_text(json.dumps(SPEC))
    base = ["export", "k8s", "--cluster", str(spec_file), "--image", IMAGE, "--checkpoint-claim", "r"]
    assert cli.main([*base, "--", "python", "a\u2028b.py"]) == 2
    err = capsys.readouterr().err
    assert (
        "The command after --, word 2: contains a line separator" in err
        and "line separator" in err
        and "Traceback" not in err
    )
    assert cli.main([*base, "--namespace", "ml\u0085x"]) == 2
    err = capsys.readouterr().err
    assert "--namespace" in err and "\u0085" not in err and "Traceback" not in err
