"""docs/spec-reference.md is generated from the spec's schema and kept in step with it."""

from __future__ import annotations

import json
import re

from launcher.spec.load import json_schema
from launcher.spec.reference import render, with_factory_defaults
from tests.conftest import REPO

PAGE = REPO / "docs" / "spec-reference.md"
REGENERATE = "python -m launcher.spec.reference > docs/spec-reference.md"


def generated() -> str:
    return render(with_factory_defaults(json_schema()))


def test_committed_page_is_what_the_generator_writes_now() -> None:
    assert PAGE.read_text(encoding="utf-8") == generated(), (
        f"docs/spec-reference.md is out of date with the spec's models; regenerate it with: {REGENERATE}"
    )


def test_committed_schema_is_what_launch_schema_writes_now() -> None:
    """cluster.example.json names ./schema.json for editors: it must describe the fields as they are."""
    committed = json.loads((REPO / "schema.json").read_text(encoding="utf-8"))
    assert committed == json_schema(), "schema.json is out of date; regenerate it with: launch schema -o schema.json"


def test_every_field_of_every_object_has_a_row() -> None:
    schema = json_schema()
    rows = set(re.findall(r"^\| `([^`]+)` \|", generated(), flags=re.MULTILINE))
    names = {path.rsplit(".", 1)[-1] for path in rows}
    for node in [schema, *schema["$defs"].values()]:
        assert set(node["properties"]) <= names, sorted(set(node["properties"]) - names)
    assert {"hosts[].ssh.user", "hosts[].tasks[].port", "training.argv", "restart.max_restarts", "slurm.nodes"} <= rows


def test_a_field_renders_its_type_default_bounds_and_description() -> None:
    schema = {
        "description": "Root.",
        "required": ["name"],
        "properties": {
            "name": {"type": "string", "pattern": "^a|b$", "description": "Under <run dir>, `<kept>`."},
            "port": {"anyOf": [{"type": "integer", "minimum": 1, "maximum": 65535}, {"type": "null"}], "default": None},
            "codes": {"type": "array", "items": {"type": "integer", "minimum": 1}, "default": [2]},
            "wait_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 60, "default": 5.0},
            "mode": {"type": "string", "enum": ["auto", "ssh"], "default": "auto"},
        },
    }
    page = render(schema)
    assert "| `name` | string | required | matches `^a\\|b$` | Under &lt;run dir&gt;, `<kept>`. |" in page
    assert "| `port` | integer or null | `null` | 1..65535 |  |" in page
    assert "| `codes` | array of integer | `[2]` | each >= 1 |  |" in page
    assert "| `wait_s` | number | `5.0` | > 0, <= 60 |  |" in page
    assert '| `mode` | `"auto"` or `"ssh"` | `"auto"` |  |  |' in page


def test_defaults_made_by_a_factory_are_shown() -> None:
    page = generated()
    assert "| `restart.fatal_exit_codes` | array of integer | `[2]` |" in page
    assert '| `training` | object | `{"kind": "builtin"}` |' in page
