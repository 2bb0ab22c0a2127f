"""status.json and summary.json: the same data as json.dumps, a key or an object per line."""

from __future__ import annotations

import json
from typing import Any

import pytest

from launcher.common.json_lines import dumps

SUMMARY = {
    "state": "succeeded",
    "attempts": [{"attempt": 0, "tasks": [{"task": f"worker:{i}", "exit": 0, "reason": None} for i in range(3)]}],
    "outputs": {"model": "runs/x/model"},
    "empty": [],
}


@pytest.mark.parametrize("data", [SUMMARY, {}, [], [{"a": 1}], "text", 3, None, {"k": [1, {"a": 2}]}])
def test_it_parses_as_the_same_data(data: Any) -> None:
    assert json.loads(dumps(data)) == data


def test_a_task_is_one_line_and_a_key_another() -> None:
    lines = dumps(SUMMARY).splitlines()
    assert '        {"task": "worker:1", "exit": 0, "reason": null},' in lines
    assert '  "outputs": {"model": "runs/x/model"},' in lines and lines[0] == "{" and lines[-1] == "}"


def test_keys_that_are_not_strings_are_written_as_json_writes_them() -> None:
    data = {None: 1, True: 2, 3: 4, 1.5: 5}
    assert json.loads(dumps(data)) == json.loads(json.dumps(data)) == {"null": 1, "true": 2, "3": 4, "1.5": 5}


def test_what_json_cannot_write_goes_through_default() -> None:
    assert json.loads(dumps({"when": object()}, default=lambda value: "obj")) == {"when": "obj"}


def test_a_number_that_is_not_finite_is_written_by_name_for_strict_parsers() -> None:
    data = {"attempts": [{"tasks": [{"result": {"loss": float("nan"), "first_loss": 4.5}}]}], "peak": -float("inf")}
    text = dumps(data)

    def strict(constant: str) -> None:
        raise AssertionError(f"{constant} is not JSON")

    parsed = json.loads(text, parse_constant=strict)
    assert parsed == {"attempts": [{"tasks": [{"result": {"loss": "NaN", "first_loss": 4.5}}]}], "peak": "-Infinity"}
