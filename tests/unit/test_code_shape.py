"""The code keeps the shape a newcomer can read: no module over 600 lines and no function over 60 in
launcher/, worker/ and tflaunch/ (past that, the part to split out usually has a name already)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODULE_LINES = 600
FUNCTION_LINES = 60


def _sources() -> list[Path]:
    return sorted(path for package in ("launcher", "worker", "tflaunch") for path in (REPO / package).rglob("*.py"))


def test_no_module_is_over_600_lines() -> None:
    long = {str(p.relative_to(REPO)): n for p in _sources() if (n := p.read_text().count("\n")) > MODULE_LINES}
    assert not long, f"split these modules by concern: {long}"


def test_no_function_is_over_60_lines() -> None:
    long = {}
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if length > FUNCTION_LINES:
                    long[f"{path.relative_to(REPO)}:{node.lineno} {node.name}"] = length
    assert not long, f"split these functions: {long}"
