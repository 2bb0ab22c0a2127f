"""A spec may name its schema for editors, and a misspelt key gets the key it was meant to be."""

from __future__ import annotations

import json

import pytest

from launcher.common.errors import SpecError
from launcher.spec.load import SCHEMA_KEY, json_schema, parse_spec
from launcher.spec.strict_json import decode_json

BASE = {"name": "r", "hosts": [{"address": "localhost", "workers": 2}]}


def test_a_schema_reference_is_accepted_and_ignored() -> None:
    spec = parse_spec({SCHEMA_KEY: "./schema.json", **BASE})
    assert spec.name == "r" and SCHEMA_KEY not in spec.model_dump(by_alias=True)


def test_the_schema_lets_editors_attach_it() -> None:
    assert json_schema()["properties"][SCHEMA_KEY]["type"] == "string"


def test_a_schema_reference_that_is_not_text_is_still_refused() -> None:
    with pytest.raises(SpecError, match=r"\$\[\"\$schema\"\]"):
        parse_spec({SCHEMA_KEY: 3, **BASE})


@pytest.mark.parametrize(
    ("data", "path", "meant"),
    [
        ({**BASE, "restart": {"max_restart": 2}}, "$.restart.max_restart", "max_restarts"),
        ({"name": "r", "hosts": [{"address": "localhost", "wrokers": 2}]}, "$.hosts[0].wrokers", "workers"),
        ({**BASE, "trainng": {"kind": "builtin"}}, "$.trainng", "training"),
        ({**BASE, "training": {"kind": "builtin", "step": 5}}, "$.training.step", "steps"),
        ({**BASE, "training": {"kind": "builtin", "batchsize": 8}}, "$.training.batchsize", "batch_per_replica"),
        ({**BASE, "training": {"kind": "fit", "batch-size": 8}}, '$.training["batch-size"]', "batch_per_replica"),
        ({**BASE, "training": {"kind": "builtin", "lr": 0.1}}, "$.training.lr", "learning_rate"),
        ({"name": "r", "hosts": [{"address": "localhost", "num_workers": 2}]}, "$.hosts[0].num_workers", "workers"),
    ],
)
def test_an_unknown_key_names_the_key_it_was_meant_to_be(data: dict, path: str, meant: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(data)
    assert f"{path}: unknown key; did you mean {json.dumps(meant)}?" in str(caught.value)


def test_an_unknown_key_like_no_other_gets_no_guess() -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec({**BASE, "zzzzzz": 1})
    assert "$.zzzzzz: unknown key; remove it" in str(caught.value) and "did you mean" not in str(caught.value)


def test_a_checkpoint_url_with_a_space_is_not_taken_for_a_local_directory() -> None:
    spec = {"name": "u", "hosts": [{"address": "localhost", "workers": 1}], "checkpoint_dir": "gs://bucket/my run"}
    with pytest.raises(SpecError, match=r"checkpoint_dir: 'gs://bucket/my run' looks like a URL but is not one"):
        parse_spec(spec)
    assert parse_spec({**spec, "checkpoint_dir": "gs://bucket/my-run"}).checkpoint_dir == "gs://bucket/my-run"


@pytest.mark.parametrize("address", ["locahost", "localhots", "lcoalhost", "Localhost1"])
def test_an_address_that_reads_like_a_misspelt_localhost_says_so(address: str) -> None:
    with pytest.raises(SpecError) as raised:
        parse_spec({"name": "r", "hosts": [{"address": address, "workers": 2}]})
    assert "a remote host needs explicit ports" in str(raised.value)
    assert f"if {address} was meant to be this machine: did you mean localhost?" in str(raised.value)


@pytest.mark.parametrize("address", ["host-a", "10.0.0.1", "gpu-node-17", "local"])
def test_other_remote_hosts_get_no_localhost_hint(address: str) -> None:
    with pytest.raises(SpecError) as raised:
        parse_spec({"name": "r", "hosts": [{"address": address, "workers": 2}]})
    assert "a remote host needs explicit ports" in str(raised.value) and "localhost?" not in str(raised.value)


def test_localhost_over_ssh_is_not_told_it_may_have_meant_localhost() -> None:
    with pytest.raises(SpecError) as raised:
        parse_spec({"name": "r", "hosts": [{"address": "localhost", "workers": 2, "transport": "ssh"}]})
    assert "localhost?" not in str(raised.value), str(raised.value)


@pytest.mark.parametrize("text", ['{\n  // a note\n  "name": "r"\n}', '{"name": "r" /* a note */}'])
def test_a_comment_is_named_as_what_json_does_not_have(text: str) -> None:
    (problem,) = decode_json(text)[1]
    assert problem.message.endswith("(JSON has no comments: remove it)"), problem.message


@pytest.mark.parametrize(
    ("text", "comma"),
    [('{\n "name": "r",\n "hosts": [],\n}', "line 3 column 13"), ('{"hosts": [1, 2, ]}', "line 1 column 16")],
)
def test_a_trailing_comma_is_named_where_it_is(text: str, comma: str) -> None:
    (problem,) = decode_json(text)[1]
    assert f"(the comma at {comma} ends nothing: JSON allows no comma before a closing bracket)" in problem.message


def test_other_syntax_errors_get_no_comma_hint() -> None:
    for text in ('{"a": ,}', '{"a" 1}', '{"a": 1,, "b": 2}', "{not json"):
        (problem,) = decode_json(text)[1]
        assert "comma at" not in problem.message


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("run_root", "f" * 300, "has a path component of 300 bytes; a file system takes at most 255"),
        ("run_root", "/".join(["d" * 200] * 20), "bytes long; give a path of at most 3800"),
        ("checkpoint_dir", "c" * 256, "has a path component of 256 bytes"),
    ],
)
def test_a_path_no_file_system_can_hold_is_refused_by_field(field: str, value: str, said: str) -> None:
    with pytest.raises(SpecError) as raised:
        parse_spec({**BASE, field: value})
    assert f"$.{field}" in str(raised.value) and said in str(raised.value)


def test_an_object_store_checkpoint_url_is_not_a_path_to_measure() -> None:
    assert parse_spec({**BASE, "checkpoint_dir": "gs://bucket/" + "x" * 300}).checkpoint_dir is not None


@pytest.mark.parametrize("code", [1, 2, 126, 127])
def test_an_exit_code_of_failure_is_refused_as_the_preemption_code(code: int) -> None:
    with pytest.raises(SpecError) as raised:
        parse_spec({**BASE, "restart": {"preemption_exit_code": code, "fatal_exit_codes": []}})
    assert "$.restart.preemption_exit_code" in str(raised.value)
    assert f"{code} is the exit code of" in str(raised.value) and "restarted without end" in str(raised.value)
