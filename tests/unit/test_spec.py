"""Spec validation: every malformed spec exits 2, names its JSON path, and starts nothing."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from launcher.cli.main import main
from launcher.common.errors import SpecError
from launcher.spec.addresses import is_loopback
from launcher.spec.load import json_schema, load_spec, parse_spec
from launcher.spec.models import ClusterSpec
from tests.conftest import REPO

GOOD: dict[str, Any] = {"name": "ok", "hosts": [{"address": "localhost", "workers": 2}]}


def with_(path: str, value: Any) -> dict[str, Any]:
    """GOOD with one dotted path set (list indices as numbers)."""
    spec = copy.deepcopy(GOOD)
    node: Any = spec
    parts = path.split(".")
    for part in parts[:-1]:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    node[parts[-1]] = value
    return spec


MULTI = {"name": "m", "hosts": [{"address": "10.0.0.1", "ports": [2222]}, {"address": "10.0.0.2", "ports": [2222]}]}

BAD: list[tuple[str, Any, str]] = [
    ("missing name", {"hosts": GOOD["hosts"]}, "$.name"),
    ("name with space", with_("name", "my run"), "$.name"),
    ("name wrong type", with_("name", 7), "$.name"),
    ("no hosts", with_("hosts", []), "$.hosts"),
    ("hosts not a list", with_("hosts", {"address": "localhost"}), "$.hosts"),
    ("unknown top-level key", with_("nodes", 3), "$.nodes"),
    ("unknown host key", with_("hosts.0.cpus", 3), "$.hosts[0].cpus"),
    ("host address with shell chars", with_("hosts.0.address", "a;touch /tmp/x"), "$.hosts[0].address"),
    ("host address empty", with_("hosts.0.address", ""), "$.hosts[0].address"),
    ("host address unspecified", with_("hosts.0.address", "0.0.0.0"), "$.hosts[0].address"),
    ("host address with a user", with_("hosts.0.address", "root@h1"), "give the address alone ('h1')"),
    (
        "ipv6 host:port twice",
        {
            "name": "v6",
            "hosts": [{"address": "2001:db8::1", "ports": [5000]}, {"address": "2001:db8:0::1", "ports": [5000]}],
        },
        "[2001:db8:0::1]:5000 is used twice (also in hosts[0])",
    ),
    ("host address with a port", with_("hosts.0.address", "h1:22"), "the SSH port in ssh.port"),
    ("host address in brackets", with_("hosts.0.address", "[fd00::3]"), "without brackets ('fd00::3')"),
    ("host address with a final dot", with_("hosts.0.address", "h1.example."), "without its final dot"),
    ("host address unspecified v6", with_("hosts.0.address", "::"), "$.hosts[0].address"),
    ("negative workers", with_("hosts.0.workers", -1), "$.hosts[0].workers"),
    ("workers as string", with_("hosts.0.workers", "two"), "$.hosts[0].workers"),
    ("zero tasks on host", with_("hosts.0.workers", 0), "$.hosts[0].workers"),
    ("port too large", with_("hosts.0.ports", [70000, 0]), "$.hosts[0].ports[0]"),
    ("port negative", with_("hosts.0.ports", [0, -5]), "$.hosts[0].ports[1]"),
    ("ports count mismatch", with_("hosts.0.ports", [0]), "$.hosts[0].ports"),
    ("duplicate host:port", with_("hosts.0.ports", [5000, 5000]), "$.hosts[0]"),
    (
        "two chiefs",
        {
            "name": "c",
            "hosts": [
                {"address": "localhost", "chief": True, "workers": 1},
                {"address": "localhost", "chief": True, "workers": 1},
            ],
        },
        "$.hosts[1]",
    ),
    ("tasks mixed with workers", with_("hosts.0.tasks", [{"type": "worker", "index": 0}]), "$.hosts[0].workers"),
    (
        "non-contiguous indices",
        {
            "name": "t",
            "hosts": [
                {"address": "localhost", "tasks": [{"type": "worker", "index": 0}, {"type": "worker", "index": 2}]}
            ],
        },
        "$.hosts",
    ),
    (
        "bad task type",
        {"name": "t", "hosts": [{"address": "localhost", "tasks": [{"type": "ps", "index": 0}]}]},
        "$.hosts[0].tasks[0].type",
    ),
    (
        "only a chief, no worker",
        {"name": "t", "hosts": [{"address": "localhost", "chief": True, "workers": 0}]},
        "$.hosts",
    ),
    (
        "localhost in a multi-host cluster",
        {"name": "m", "hosts": [{"address": "localhost"}, {"address": "10.0.0.2", "ports": [2222]}]},
        "$.hosts[0].address",
    ),
    (
        "port 0 on a remote host",
        {"name": "m", "hosts": [{"address": "10.0.0.1"}, {"address": "10.0.0.2", "ports": [2222]}]},
        "$.hosts[0].ports",
    ),
    ("env key invalid", with_("env", {"1BAD": "x"}), "$.env.1BAD"),
    ("env sets TF_CONFIG", with_("env", {"TF_CONFIG": "{}"}), "$.env.TF_CONFIG"),
    ("host env sets reserved prefix", with_("hosts.0.env", {"TFLAUNCH_TASK": "x"}), "$.hosts[0].env.TFLAUNCH_TASK"),
    ("env value not a string", with_("env", {"A": 1}), "$.env.A"),
    ("unknown training kind", with_("training", {"kind": "magic"}), "$.training.kind"),
    ("steps zero", with_("training", {"kind": "builtin", "steps": 0}), "$.training.steps"),
    ("batch negative", with_("training", {"kind": "builtin", "batch_per_replica": -3}), "$.training.batch_per_replica"),
    ("function target malformed", with_("training", {"kind": "function", "target": "no_colon"}), "$.training.target"),
    ("command empty", with_("training", {"kind": "command", "argv": []}), "$.training.argv"),
    ("unknown training key", with_("training", {"kind": "builtin", "epochs": 3}), "$.training.epochs"),
    ("max_restarts negative", with_("restart", {"max_restarts": -1}), "$.restart.max_restarts"),
    ("grace period wrong type", with_("restart", {"grace_period_s": "soon"}), "$.restart.grace_period_s"),
    (
        "preemption code also fatal",
        with_("restart", {"preemption_exit_code": 42, "fatal_exit_codes": [2, 42]}),
        "$.restart.fatal_exit_codes",
    ),
    (
        "ssh port out of range",
        {**MULTI, "hosts": [{**MULTI["hosts"][0], "ssh": {"port": 0}}, MULTI["hosts"][1]]},
        "$.hosts[0].ssh.port",
    ),
    (
        "ssh user with shell chars",
        {**MULTI, "hosts": [{**MULTI["hosts"][0], "ssh": {"user": "x$(id)"}}, MULTI["hosts"][1]]},
        "$.hosts[0].ssh.user",
    ),
    ("gpus duplicated", with_("hosts.0.gpus", [0, 0]), "$.hosts[0].gpus"),
    ("transport unknown", with_("hosts.0.transport", "telnet"), "$.hosts[0].transport"),
    (
        "two evaluators",
        {
            "name": "e",
            "hosts": [{"address": "localhost", "evaluator": True}, {"address": "localhost", "evaluator": True}],
        },
        "$.hosts[1]",
    ),
    (
        "evaluator with a user command",
        {
            "name": "e",
            "training": {"kind": "command", "argv": ["x"]},
            "hosts": [{"address": "localhost", "evaluator": True}],
        },
        "$.hosts[0]",
    ),
    ("worker_per_gpu without gpus", with_("hosts.0.worker_per_gpu", True), "$.hosts[0].worker_per_gpu"),
    (
        "worker_per_gpu count conflict",
        {"name": "g", "hosts": [{"address": "localhost", "workers": 3, "gpus": [0, 1], "worker_per_gpu": True}]},
        "$.hosts[0].workers",
    ),
    (
        "accumulation zero",
        with_("training", {"kind": "builtin", "accumulation_steps": 0}),
        "$.training.accumulation_steps",
    ),
    (
        "unknown precision",
        with_("training", {"kind": "builtin", "mixed_precision": "fp8"}),
        "$.training.mixed_precision",
    ),
    ("model target malformed", with_("training", {"kind": "builtin", "model": "mymodel"}), "$.training.model"),
    (
        "fit with bad save freq",
        with_("training", {"kind": "fit", "checkpoint_every": 0}),
        "$.training.checkpoint_every",
    ),
    # strict types: a boolean is not a count, "2" and 2.0 are not integers
    ("workers true", with_("hosts.0.workers", True), "$.hosts[0].workers"),
    ("workers as a numeric string", with_("hosts.0.workers", "2"), "$.hosts[0].workers"),
    ("workers as a float", with_("hosts.0.workers", 2.0), "$.hosts[0].workers"),
    ("port true", with_("hosts.0.ports", [True, 0]), "$.hosts[0].ports[0]"),
    ("chief as 1", with_("hosts.0.chief", 1), "$.hosts[0].chief"),
    ("max_restarts as a string", with_("restart", {"max_restarts": "2"}), "$.restart.max_restarts"),
    ("grace period true", with_("restart", {"grace_period_s": True}), "$.restart.grace_period_s"),
    # NUL bytes and newlines in strings that become paths, arguments, environment, hosts, users
    ("newline in an address", with_("hosts.0.address", "localhost\n"), "$.hosts[0].address"),
    ("NUL in an env value", with_("env", {"A": "x\x00y"}), "$.env.A"),
    ("newline in an env value", with_("hosts.0.env", {"A": "x\ny"}), "$.hosts[0].env.A"),
    ("newline in python", with_("python", "/usr/bin/python3\n"), "$.python"),
    ("NUL in workdir", with_("workdir", "/tmp\x00/x"), "$.workdir"),
    ("newline in run_root", with_("run_root", "runs\nx"), "$.run_root"),
    ("newline in checkpoint_dir", with_("checkpoint_dir", "/ck\r"), "$.checkpoint_dir"),
    (
        "newline in an argument",
        with_("training", {"kind": "command", "argv": ["python", "a\nb"]}),
        "$.training.argv[1]",
    ),
    (
        "newline in an ssh user",
        {**MULTI, "hosts": [{**MULTI["hosts"][0], "ssh": {"user": "root\n"}}, MULTI["hosts"][1]]},
        "$.hosts[0].ssh.user",
    ),
    # environment keys: every spelling an environment would take
    ("env key with a trailing newline", with_("env", {"TF_CONFIG\n": "{}"}), '$.env["TF_CONFIG\\n"]'),
    ("env key with a trailing space", with_("env", {"TF_CONFIG ": "{}"}), '$.env["TF_CONFIG "]'),
    ("env key with an equals sign", with_("env", {"A=B": "x"}), '$.env["A=B"]'),
    # addresses
    ("malformed IPv6", with_("hosts.0.address", "fe80::1::2"), "$.hosts[0].address"),
    ("malformed IPv4", with_("hosts.0.address", "10.0.0.256"), "$.hosts[0].address"),
    (
        "loopback IPv6 spelled long in a multi-host cluster",
        {"name": "m", "hosts": [{"address": "0:0:0:0:0:0:0:1"}, {"address": "10.0.0.2", "ports": [2222]}]},
        "$.hosts[0].address",
    ),
    (
        "loopback 127.0.0.2 in a multi-host cluster",
        {
            "name": "m",
            "hosts": [{"address": "127.0.0.2", "transport": "local"}, {"address": "10.0.0.2", "ports": [2222]}],
        },
        "$.hosts[0].address",
    ),
    (
        "localhost and 127.0.0.1 share a port",
        {"name": "m", "hosts": [{"address": "localhost", "ports": [5000]}, {"address": "127.0.0.1", "ports": [5000]}]},
        "$.hosts[1].ports[0]",
    ),
    # messages point where the user wrote the problem
    (
        "port 0 on a remote host, tasks form",
        {
            "name": "m",
            "hosts": [
                {
                    "address": "10.0.0.1",
                    "tasks": [{"type": "worker", "index": 0, "port": 2222}, {"type": "worker", "index": 1}],
                },
                {"address": "10.0.0.2", "tasks": [{"type": "worker", "index": 2, "port": 2222}]},
            ],
        },
        "$.hosts[0].tasks[1].port",
    ),
    (
        "duplicate port, tasks form",
        {
            "name": "m",
            "hosts": [
                {
                    "address": "localhost",
                    "tasks": [
                        {"type": "worker", "index": 0, "port": 7000},
                        {"type": "worker", "index": 1, "port": 7000},
                    ],
                }
            ],
        },
        "$.hosts[0].tasks[1].port",
    ),
    ("run_root is a URL", with_("run_root", "gs://bucket/runs"), "$.run_root"),
]


@pytest.mark.parametrize("case, spec, path", BAD, ids=[case for case, _, _ in BAD])
def test_bad_spec_exits_2_names_path_and_starts_nothing(
    case: str, spec: Any, path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = json.loads(json.dumps(spec))
    if isinstance(spec, dict):
        spec.setdefault("run_root", str(tmp_path / "runs"))
    file = tmp_path / "cluster.json"
    file.write_text(json.dumps(spec))
    code = main(["--cluster", str(file)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert path in err, err
    assert "Traceback" not in err
    assert "Nothing was started" in err
    assert not (tmp_path / "runs").exists(), "a run directory was created for a bad spec"
    assert not (Path.cwd() / "runs" / str(spec.get("name", "-"))).exists(), "a run directory was created for a bad spec"


@pytest.mark.parametrize(
    "text, needle",
    [
        ("{not json", "not valid JSON at line 1"),
        ("[1, 2]", "must be a JSON object"),
        ("", "the file is empty"),
    ],
)
def test_broken_json(text: str, needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = tmp_path / "cluster.json"
    file.write_text(text)
    assert main(["--cluster", str(file)]) == 2
    assert needle in capsys.readouterr().err


@pytest.mark.parametrize(
    "spec, needle",
    [
        (with_("training", {"kind": "magic", "steps": 5}), '$.training.kind: got "magic"'),
        (with_("training", {"steps": 5}), "training.kind is required"),
        (with_("hosts.0.workers", {"n": 2}), "got an object"),
        (
            {"name": "m", "hosts": [{"address": "10.0.0.1"}, {"address": "10.0.0.2", "ports": [2222]}]},
            "a remote host needs explicit ports: give 10.0.0.1 one per task",
        ),
        (
            {"name": "m", "hosts": [{"address": "10.0.0.1", "ports": [0]}, {"address": "10.0.0.2", "ports": [2]}]},
            "port 0 (pick a free one) only works for local hosts",
        ),
    ],
)
def test_messages_show_what_the_user_wrote(spec: dict[str, Any], needle: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(spec)
    assert needle in str(caught.value)
    assert "{'kind'" not in str(caught.value), "a Python dict leaked into the message"


GOOD_TEXT = json.dumps(GOOD)


@pytest.mark.parametrize(
    "raw, needle",
    [
        (GOOD_TEXT.replace("ok", "caf\u00e9").encode("latin-1"), "not UTF-8 (byte 0xe9 on line 1"),
        (GOOD_TEXT.encode("utf-16"), "UTF-16"),
        (GOOD_TEXT.encode("utf-16-le"), "NUL bytes"),
        (b"", "the file is empty"),
        (b"  \n\t ", "the file is empty"),
        (b"[" * 100_000 + b"]" * 100_000, "nested far deeper"),
        (b'{"name": "ok", "hosts": ' + b"[" * 30 + b"]" * 30 + b"}", "nested more than 16 levels"),
        (
            GOOD_TEXT.replace('"workers": 2', '"workers": ' + "7" * 5000).encode(),
            "$.hosts[0].workers: got an integer with 5000 digits",
        ),
        (
            GOOD_TEXT.replace('"workers": 2', '"workers": NaN').encode(),
            "$.hosts[0].workers: got NaN, which JSON does not allow. Number of worker tasks on this host",
        ),
        (GOOD_TEXT.replace('"workers": 2', '"workers": -Infinity').encode(), "$.hosts[0].workers: got -Infinity"),
        (GOOD_TEXT.replace('"workers": 2', '"workers": 1e999').encode(), "$.hosts[0].workers: got inf"),
        (
            GOOD_TEXT.replace('"workers": 2', '"workers": 2, "workers": 3').encode(),
            "$.hosts[0].workers: given 2 times in one object (2, then 3)",
        ),
        (b'{"name": "a", "name": "b", "hosts": []}', "$.name: given 2 times"),
    ],
)
def test_files_that_are_not_strict_utf8_json(
    raw: bytes, needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "cluster.json"
    file.write_bytes(raw)
    assert main(["--cluster", str(file)]) == 2
    err = capsys.readouterr().err
    assert needle in err and str(file) in err, err
    assert "Traceback" not in err and "Nothing was started" in err


def test_a_utf8_bom_is_fine(tmp_path: Path) -> None:
    file = tmp_path / "cluster.json"
    file.write_bytes(b"\xef\xbb\xbf" + GOOD_TEXT.encode())
    assert load_spec(file).name == "ok"


def test_loopback_spellings_are_one_machine() -> None:
    spec = parse_spec(
        {
            "name": "one",
            "hosts": [
                {"address": "localhost"},
                {"address": "127.0.0.1"},
                {"address": "::1"},
                {"address": "0:0:0:0:0:0:0:1"},
                {"address": "::0001"},
            ],
        }
    )
    assert not spec.is_multi_host and all(host.is_local for host in spec.hosts)
    assert is_loopback("::ffff:127.0.0.1") and not is_loopback("10.0.0.1") and not is_loopback("localhost.example.com")


def test_loopback_aliases_are_simulated_hosts_but_never_mix_with_real_ones() -> None:
    aliases = parse_spec(
        {"name": "sim", "hosts": [{"address": "127.0.0.2", "ports": [2222]}, {"address": "127.0.0.3", "ports": [2222]}]}
    )
    assert aliases.is_multi_host and not any(host.is_local for host in aliases.hosts)
    with pytest.raises(SpecError) as caught:
        parse_spec(
            {
                "name": "mix",
                "hosts": [
                    {"address": "localhost"},
                    {"address": "127.0.0.3", "ports": [2222]},
                    {"address": "10.0.0.2", "ports": [2222]},
                ],
            }
        )
    assert {p.path for p in caught.value.problems} == {"$.hosts[0].address", "$.hosts[1].address"}


def test_a_float_setting_still_takes_an_integer() -> None:
    assert parse_spec(with_("restart", {"grace_period_s": 5})).restart.grace_period_s == 5.0


def test_missing_file_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--cluster", str(tmp_path / "nope.json")]) == 2
    said = capsys.readouterr().err
    assert "cannot read the file" in said and "(or launch without one: launch --local 2 [-- python3 train.py])" in said
    (tmp_path / "cluster.example.json").write_text("{}")
    assert main(["--cluster", str(tmp_path / "cluster.json")]) == 2
    copy = f"(to start from the example beside it: cp {tmp_path}/cluster.example.json {tmp_path}/cluster.json)"
    assert copy in capsys.readouterr().err


def test_every_problem_is_reported_at_once() -> None:
    bad = {
        "name": "bad name",
        "hosts": [{"address": "localhost", "workers": -1, "colour": "red"}],
        "restart": {"max_restarts": -2},
    }
    with pytest.raises(SpecError) as caught:
        parse_spec(bad)
    paths = {problem.path for problem in caught.value.problems}
    assert {"$.name", "$.hosts[0].workers", "$.hosts[0].colour", "$.restart.max_restarts"} <= paths


def test_example_validates_against_schema() -> None:
    import jsonschema

    data = json.loads((REPO / "cluster.example.json").read_text())
    jsonschema.validate(data, json_schema())
    spec = load_spec(REPO / "cluster.example.json")
    assert isinstance(spec, ClusterSpec)
    assert sum(host.task_count for host in spec.hosts) == 3
    assert all(host.is_local for host in spec.hosts)


def test_schema_command_prints_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["additionalProperties"] is False
    # hosts are required by validation, not by the schema: on Slurm the allocation is the host list
    assert schema["required"] == ["name"] and "Slurm" in schema["properties"]["hosts"]["description"]
    host = schema["$defs"]["HostSpec"]["properties"]
    assert all("description" in field for field in host.values())


def test_spec_is_frozen() -> None:
    spec = parse_spec(GOOD)
    with pytest.raises(ValidationError):
        spec.name = "other"  # type: ignore[misc]


def test_a_spec_without_hosts_says_where_hosts_come_from_on_slurm() -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec({"name": "x"})
    text = str(caught.value)
    assert "$.hosts" in text and "launch --slurm" in text and "launch slurm submit" in text


def test_on_slurm_the_hosts_come_from_the_allocation() -> None:
    seen: list[object] = []

    def hosts_from(first: object) -> list[dict[str, object]]:
        seen.append(first)
        return [{"address": "10.0.0.1", "ports": [29500]}, {"address": "10.0.0.2", "ports": [29500]}]

    spec = parse_spec(
        {"name": "x", "hosts": [{"address": "localhost"}], "slurm": {"port": 29500}}, hosts_from=hosts_from
    )
    assert [h.address for h in spec.hosts] == ["10.0.0.1", "10.0.0.2"]
    assert len(seen) == 1 and spec.slurm is not None and spec.slurm.port == 29500


@pytest.mark.parametrize(
    ("slurm", "where"),
    [
        ({"time_limit": "soon"}, "$.slurm.time_limit"),
        ({"sbatch_options": ["-N 2"]}, "$.slurm.sbatch_options[0]"),
        ({"nodes": 0}, "$.slurm.nodes"),
        ({"partition": "gpu; rm -rf /"}, "$.slurm.partition"),
    ],
)
def test_bad_slurm_settings_are_named(slurm: dict[str, object], where: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec({**GOOD, "slurm": slurm})
    assert where in str(caught.value)


def test_a_misspelt_kind_does_not_hide_the_sections_other_problems() -> None:
    """The kind decides which fields `training` has; a kind close to one is checked as that one too."""
    with pytest.raises(SpecError) as caught:
        parse_spec(with_("training", {"kind": "bultin", "steps": -5, "batch_per_replica": "x"}))
    paths = [problem.path for problem in caught.value.problems]
    assert paths == ["$.training.kind", "$.training.steps", "$.training.batch_per_replica"], caught.value.problems
    assert 'got "bultin"; did you mean "builtin"?' in str(caught.value)
    assert '(checked as kind "builtin")' in caught.value.problems[1].message
    with pytest.raises(SpecError) as caught:  # nothing close: no guess, and nothing checked as a guess
        parse_spec(with_("training", {"kind": "magic", "steps": -5}))
    assert [problem.path for problem in caught.value.problems] == ["$.training.kind"]


@pytest.mark.parametrize(("kind", "shown"), [(5, "got 5;"), (["builtin"], "got a list;"), (True, "got true;")])
def test_a_kind_that_is_not_a_string_is_shown_as_json_and_not_guessed(kind: object, shown: str) -> None:
    """pydantic hands the tag over as Python text ("['builtin']"); the message quotes what the JSON had."""
    with pytest.raises(SpecError) as caught:
        parse_spec(with_("training", {"kind": kind, "steps": -5}))
    [problem] = caught.value.problems
    assert problem.path == "$.training.kind"
    assert problem.message.startswith(shown) and "the kind is a string" in problem.message, problem.message
    assert "did you mean" not in problem.message


@pytest.mark.parametrize("kind", ["--password=hunter2", "x" * 40 + " AKIAIOSFODNN7EXAMPLE"])
def test_a_kind_holding_a_secret_is_masked_like_any_other_value(kind: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(with_("training", {"kind": kind}))
    text = str(caught.value)
    assert '$.training.kind: got "****"' in text, text
    assert "hunter2" not in text and "AKIA" not in text, text


def test_a_spec_error_never_shows_a_secret_the_spec_holds() -> None:
    """A message quotes what the user wrote: a secret env value reused elsewhere, or a command's
    `--password=` written as one string, is masked there as everywhere else."""
    spec = {
        "name": "s",
        "env": {"DB_PASS": "zz-secret-3-value"},
        "hosts": [{"address": "localhost"}],
        "training": {"kind": "comand", "argv": "python3 --password=zz-secret-1-value", "dataset": "zz-secret-3-value"},
    }
    with pytest.raises(SpecError) as caught:
        parse_spec(spec)
    text = str(caught.value)
    assert "--password=****" in text, text
    assert "zz-secret-1-value" not in text and "zz-secret-3-value" not in text, text


def test_a_cluster_too_large_for_one_environment_variable_is_refused_before_any_exec_fails() -> None:
    from launcher.spec.models import MAX_TF_CONFIG_BYTES

    def fleet(hosts: int, per_host: int) -> dict[str, Any]:
        names = [f"gpu-node-{i:04d}.us-east1.internal.corp.example.com" for i in range(hosts)]
        return {
            "name": "big",
            "hosts": [{"address": n, "workers": per_host, "ports": [7000 + k for k in range(per_host)]} for n in names],
        }

    parse_spec(fleet(256, 8))  # 2,048 tasks with long names: 116 KiB, under the line
    with pytest.raises(SpecError) as caught:
        parse_spec(fleet(4096, 1))
    said = str(caught.value)
    assert "4096 training tasks make each task's TF_CONFIG about 228 KiB" in said and "shorter host addresses" in said
    assert MAX_TF_CONFIG_BYTES == 131061


@pytest.mark.parametrize(
    "given, fixed",
    [("gs:/bucket/run", "gs://bucket/run"), ("gs//bucket/run", "gs://bucket/run"), ("s3:bucket/r", "s3://bucket/r")],
)
def test_an_object_store_url_with_a_slip_is_refused_not_taken_as_a_local_directory(given: str, fixed: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec({"name": "u", "hosts": [{"address": "localhost", "workers": 1}], "checkpoint_dir": given})
    assert f"$.checkpoint_dir: {given!r} looks like a" in str(caught.value) and f"write {fixed}" in str(caught.value)
    for fine in ("gs://bucket/run", "gsx/run", "./gs:/x", "runs/gs"):
        parse_spec({"name": "u", "hosts": [{"address": "localhost", "workers": 1}], "checkpoint_dir": fine})


@pytest.mark.parametrize(
    "given, said",
    [
        ("gcs://bucket/run", "TensorFlow names Google Cloud Storage gs://, not gcs://: write gs://bucket/run"),
        ("GS://bucket/run", "its scheme as written, in lower case: write gs://bucket/run"),
        ("gs:///run", "names no bucket: write gs://BUCKET/run"),
    ],
)
def test_an_object_store_url_tensorflow_would_refuse_in_every_task_is_refused_when_read(given: str, said: str) -> None:
    """Measured: TensorFlow 2.21 has no file system for 'GS' or 'gcs' (UnimplementedError in each task)."""
    with pytest.raises(SpecError) as caught:
        parse_spec({"name": "u", "hosts": [{"address": "localhost", "workers": 1}], "checkpoint_dir": given})
    assert f"$.checkpoint_dir: {given!r}" in str(caught.value) and said in str(caught.value), str(caught.value)
    for fine in ("s3://bucket/run", "hdfs:///user/run", "ram://run"):
        parse_spec({"name": "u", "hosts": [{"address": "localhost", "workers": 1}], "checkpoint_dir": fine})


@pytest.mark.parametrize(
    "training, field",
    [
        ({"kind": "function", "target": "worker:train"}, "target"),
        ({"kind": "builtin", "dataset": "tflaunch.data:make"}, "dataset"),
        ({"kind": "fit", "model": "worker.models:build"}, "model"),
    ],
)
def test_a_target_named_after_the_runtimes_own_packages_is_refused(training: dict[str, str], field: str) -> None:
    """The task imports `worker` and `tflaunch` before any target: a user's worker.py is never the one loaded."""
    with pytest.raises(SpecError) as caught:
        parse_spec({"name": "t", "hosts": [{"address": "localhost", "workers": 1}], "training": training})
    assert f"$.training.{field}:" in str(caught.value) and "is a package of this project's" in str(caught.value)
    fine = {**training, field: "workers:" + training[field].partition(":")[2]}
    parse_spec({"name": "t", "hosts": [{"address": "localhost", "workers": 1}], "training": fine})


def test_an_ssh_user_with_a_password_in_it_is_refused_without_it() -> None:
    host = {"address": "h1", "workers": 1, "ssh": {"user": "bob:hunter2x"}}
    with pytest.raises(SpecError) as caught:
        parse_spec({"name": "u", "hosts": [host]})
    assert '$.hosts[0].ssh.user: got "bob:****": give the user name alone' in str(caught.value)
    assert "hunter2x" not in str(caught.value)


def test_a_spec_from_standard_input_is_read_and_named_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--cluster -`, as `make-spec | launch --cluster -` gives it; a problem names standard input."""
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(GOOD_TEXT.encode())))
    assert load_spec(None).name == "ok"
    monkeypatch.setattr(
        sys, "stdin", io.TextIOWrapper(io.BytesIO(GOOD_TEXT.replace('"workers": 2', '"workers": 0').encode()))
    )
    assert main(["--cluster", "-", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "standard input: 1 problem" in err and "$.hosts[0].workers" in err and "Traceback" not in err, err


def test_a_file_named_dash_is_named_dot_slash_dash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`./-` is a file, as for every other command; only the bare `-` reads standard input."""
    import io
    import sys

    monkeypatch.chdir(tmp_path)
    (tmp_path / "-").write_text(GOOD_TEXT.replace('"ok"', '"from-file"'))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
    assert main(["--cluster", "./-", "--dry-run"]) == 0
    assert "run from-file:" in capsys.readouterr().out
    assert main(["--cluster", "-", "--dry-run"]) == 2
    assert "standard input: 1 problem" in capsys.readouterr().err


def test_a_spec_read_from_a_terminal_says_what_it_waits_for(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import io
    import sys

    class Terminal(io.TextIOWrapper):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdin", Terminal(io.BytesIO(GOOD_TEXT.encode())))
    assert load_spec(None).name == "ok"
    assert "reading the cluster spec from standard input (end it with Ctrl-D)" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("gs://bucket with space/run", "(a URL has no spaces)"),
        ("://x", "(no scheme before '://')"),
        ("1gs://b/r", "('1gs' is no scheme: a scheme is a letter, then letters, digits, '+', '.' or '-', as gs or s3)"),
        ("a/b://c", "('a/b' is no scheme: a scheme is a letter, then letters, digits"),
        ("gs://", "(nothing follows '://')"),
    ],
)
def test_a_checkpoint_dir_that_is_almost_a_url_says_what_is_wrong_with_it(value: str, why: str) -> None:
    with pytest.raises(SpecError) as refused:
        parse_spec({**GOOD, "checkpoint_dir": value})
    assert f"{value!r} looks like a URL but is not one {why}" in str(refused.value)


@pytest.mark.parametrize("field", ["checkpoint_dir", "run_root"])
@pytest.mark.parametrize("value", ["s3://\u202e/x", "gs://b/\u200bx", "/tmp/\u202eabc", "runs/a\ufeffb", "runs\u180e"])
def test_a_path_with_a_character_no_screen_shows_is_refused(field: str, value: str) -> None:
    """The dry run and every message drop such characters: the path shown would not be the path used."""
    with pytest.raises(SpecError, match=f"\\$\\.{field}: .*a character no screen shows"):
        parse_spec({**GOOD, field: value.replace("://", "/") if field == "run_root" else value})


def test_a_url_too_long_for_a_tasks_environment_is_refused_and_quoted_briefly() -> None:
    """Every task gets it in its environment, where one string over 128 KiB fails every start (E2BIG)."""
    with pytest.raises(SpecError, match=r"checkpoint_dir: is 200005 bytes long; give a URL of at most 3800") as refused:
        parse_spec({**GOOD, "checkpoint_dir": "gs://" + "a" * 200_000})
    assert len(str(refused.value)) < 1000
    with pytest.raises(SpecError) as refused:
        parse_spec({**GOOD, "checkpoint_dir": "x_" * 50_000 + "://y"})
    assert len(str(refused.value)) < 1000 and "..." in str(refused.value)


def test_a_url_slip_with_a_colon_too_many_is_told_the_right_spelling() -> None:
    with pytest.raises(SpecError, match=r"would be taken as a local directory: write gs://b\b"):
        parse_spec({**GOOD, "checkpoint_dir": "gs:://b"})


@pytest.mark.parametrize("field", ["checkpoint_dir", "run_root"])
def test_a_blank_directory_is_refused_as_on_the_command_line(field: str) -> None:
    with pytest.raises(SpecError, match=f"\\$\\.{field}: is blank: give a directory"):
        parse_spec({**GOOD, field: "  "})


@pytest.mark.parametrize("field", ["checkpoint_dir", "run_root"])
@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("runs ", "ends with a space"),
        ("runs\u00a0", "ends with U+00A0, a blank character"),
        (" /x", "starts with a space"),
    ],
)
def test_a_directory_pasted_with_a_blank_at_an_end_is_refused(field: str, value: str, said: str) -> None:
    """`runs ` would be a directory beside `runs`, and no message shows the difference."""
    with pytest.raises(SpecError) as refused:
        parse_spec({**GOOD, field: value})
    assert f"$.{field}: {value!r} {said}, which a directory name almost never does on purpose" in str(refused.value)


@pytest.mark.parametrize("value", ["gs:://b", "://x", "gs:/b", "S3:/b"])
def test_a_run_root_that_looks_like_a_url_is_refused_not_made_a_local_directory(value: str) -> None:
    with pytest.raises(SpecError) as refused:
        parse_spec({**GOOD, "run_root": value})
    assert f"$.run_root: {value!r} looks like a URL; run_root is a directory on the launcher's machine" in str(
        refused.value
    )


@pytest.mark.parametrize(
    "value", ["gsx/runs", "s3runs", "runs/a:b", "/data/gs", "ram:disk", "GS:runs", "s3//runs", "runs/a://b", "./gs:/b"]
)
def test_a_run_root_merely_starting_like_a_scheme_is_a_directory(value: str) -> None:
    assert parse_spec({**GOOD, "run_root": value}).run_root == value


@pytest.mark.parametrize(
    ("section", "value", "path", "said"),
    [
        ("hosts", [{"address": "localhost", "workers": "two"}], "$.hosts[0].workers", 'got "two"; give a whole number'),
        (
            "hosts",
            [{"address": "localhost", "workers": 2.5}],
            "$.hosts[0].workers",
            "got 2.5; give a whole number (e.g",
        ),
        ("restart", {"grace_period_s": True}, "$.restart.grace_period_s", "got true; give a number, without quotes"),
        ("hosts", "localhost", "$.hosts", 'got "localhost"; give a list: [...]'),
        ("env", {"A": 1}, "$.env.A", "got 1; give a string, in double quotes"),
        ("restart", [], "$.restart", "got a list; give an object: {...}"),
        ("hosts", [{"address": "localhost", "workers": -1}], "$.hosts[0].workers", "got -1: input should be greater"),
    ],
)
def test_a_value_of_the_wrong_type_is_told_what_to_write(section: str, value: Any, path: str, said: str) -> None:
    with pytest.raises(SpecError) as refused:
        parse_spec({**GOOD, section: value})
    assert f"{path}: {said}" in str(refused.value), str(refused.value)


def test_the_copy_hint_for_a_missing_spec_is_a_command_that_works(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cluster.example.json").write_text("{}")
    assert main(["--cluster=-x.json"]) == 2
    assert "(to start from the example beside it: cp cluster.example.json ./-x.json)" in capsys.readouterr().err
    assert main(["--cluster", "c\x1b[2J.json"]) == 2
    said = capsys.readouterr().err
    assert "\x1b" not in said and "launch: c\\x1b[2J.json: 1 problem" in said and "'c\\x1b[2J.json')" in said
    assert main(["--cluster", "notes"]) == 2  # not a .json file: no copy offered
    assert "(or launch without one" in capsys.readouterr().err
    deep = str(tmp_path / "d")
    while len(deep) < 4080:  # the spec's path fits in PATH_MAX (4096), the example's beside it does not
        deep += "/" + "d" * min(200, 4080 - len(deep))
    assert len(deep + "/x.json") < 4096 < len(deep + "/cluster.example.json")
    assert main(["--cluster", deep + "/x.json"]) == 2  # ENAMETOOLONG for the example: no traceback
    assert "cannot read the file" in capsys.readouterr().err


def test_a_secrets_value_of_the_wrong_type_is_masked_without_being_called_a_string() -> None:
    with pytest.raises(SpecError) as refused:
        parse_spec({**GOOD, "env": {"API_TOKEN": 123456789012345}})
    said = str(refused.value)
    assert "$.env.API_TOKEN: got a secret's value (****); give a string, in double quotes" in said, said
    assert "123456789012345" not in said
    with pytest.raises(SpecError, match=r"\$\.secrets: got true; give a list: \[\.\.\.\]"):
        parse_spec({**GOOD, "secrets": True})  # the field naming secrets holds none itself


def test_an_env_value_too_long_for_linux_is_refused_before_anything_starts() -> None:
    big = {"name": "e", "hosts": [{"address": "localhost"}], "env": {"BLOB": "x" * 200_000}}
    with pytest.raises(SpecError, match=r"\$\.env\.BLOB: is 195 KiB; Linux takes at most 128 KiB"):
        parse_spec(big)
    parse_spec({**big, "env": {"BLOB": "x" * 100_000}})


def test_a_spec_error_leaves_no_agent_that_was_started_early(tmp_path: Path) -> None:
    """Local agents start while the spec is read; a spec error closes them, not the caller's exit."""
    import psutil

    file = tmp_path / "cluster.json"
    file.write_text(json.dumps({"name": "t", "hosts": [{"address": "localhost", "ports": [41000], "bogus": 1}]}))
    assert main(["--cluster", str(file)]) == 2
    agents = [p for p in psutil.Process().children() if "#tflaunch host agent" in " ".join(p.cmdline())]
    _, alive = psutil.wait_procs(agents, timeout=10)
    assert not alive
    assert not [p for p in psutil.Process().children() if "#tflaunch host agent" in " ".join(p.cmdline())]
