"""A value the launcher knows to be secret stays masked in the places a trial found it whole: behind a
terminal code that splits it, in a metrics row, in a Kubernetes manifest, in a refusal of the spec."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.common import masking
from launcher.common.errors import SpecError
from launcher.common.masking import Redactor, set_secrets
from launcher.k8s.layout import _written_secrets, secret_keys
from launcher.spec.load import parse_spec
from launcher.supervise.records import RecordFiles
from worker.contract import RunLayout

SECRET = "lastline-Zq9x-44"


@pytest.fixture
def known() -> Iterator[None]:
    before = masking._current
    set_secrets(Redactor([SECRET]))
    yield
    set_secrets(before)


@pytest.mark.parametrize("split", ["\x1b[0m", "\x1b]0;t\x07", "\x1b[K", "\x00"])
def test_a_secret_split_by_a_terminal_code_is_masked(split: str) -> None:
    line = f"pw {SECRET[:6]}{split}{SECRET[6:]} ok"
    assert Redactor([SECRET]).text(line) == "pw **** ok"
    assert Redactor([SECRET]).text("\x1b[31mred\x1b[0m plain") == "\x1b[31mred\x1b[0m plain"  # colours kept


def test_a_metrics_row_is_masked(tmp_path: Path, known: None) -> None:
    records = RecordFiles(str(tmp_path))
    records.append({"stream": "metrics", "row": {"step": 1, "note": f"token {SECRET}"}})
    records.close()
    row = json.loads(Path(RunLayout(str(tmp_path)).record_file("metrics")).read_text())
    assert row == {"step": 1, "note": "token ****"}


def test_a_known_secret_under_another_name_or_in_argv_is_never_written_into_a_manifest() -> None:
    spec = parse_spec(
        {
            "name": "k",
            "hosts": [{"address": "h1", "ports": [2222]}],
            "secrets": ["CUSTOM"],
            "env": {"DB_PASS": "dbpass-Secret-111", "PLAINX": "dbpass-Secret-111", "CUSTOM": "custom-Secret-555"},
            "training": {"kind": "command", "argv": ["python3", "t.py", "custom-Secret-555"]},
        }
    )
    assert {"DB_PASS", "PLAINX", "CUSTOM"} <= set(secret_keys(spec))  # from the Secret, never as a value
    assert [problem.path for problem in _written_secrets(spec)] == ["$.training.argv[2]"]


def test_a_refusal_of_the_spec_never_quotes_a_secret_it_holds() -> None:
    argv = ["python3", "x.py", "--password", "argv-Secret-14\n"]
    with pytest.raises(SpecError) as caught:
        parse_spec({"name": "s", "hosts": [{"address": "localhost"}], "training": {"kind": "command", "argv": argv}})
    assert "argv-Secret-14" not in str(caught.value) and "contains a newline" in str(caught.value)


@pytest.mark.parametrize("umask", ["000", "020", "0775"])
def test_a_umask_that_lets_others_write_the_checkpoints_is_refused(umask: str) -> None:
    with pytest.raises(SpecError, match="lets every user of the host write the tasks' checkpoints"):
        parse_spec({"name": "u", "hosts": [{"address": "localhost"}], "umask": umask})
    parse_spec({"name": "u", "hosts": [{"address": "localhost"}], "umask": "027"})
