"""Failures users hit, each reproduced by a real script under the real launcher: the root cause shows
the exception from the task's log (type and message) and, for a known one, what it is and the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import HELPERS, run_launch, write_spec

pytestmark = pytest.mark.tf

SCRIPTS = HELPERS / "failing"

CASES = [
    # script, the exception shown, the known cause's section (None: a user's own error)
    ("keras3_fit.py", "ValueError: Attempt to convert a value (PerReplica:", "keras-3-modelfit-under-the-strategy"),
    ("port_in_use.py", "UnknownError: Could not start gRPC server", "the-tf-port-is-already-in-use"),
    ("peer_left.py", "UnavailableError: ", "a-peer-left-the-coordination-service"),
    ("oom.py", "ResourceExhaustedError: ", "out-of-memory"),
    ("user_error.py", "ValueError: bad batch: expected 32 rows, got 31", None),
]


@pytest.mark.parametrize(("script", "exception", "section"), CASES, ids=[c[0].removesuffix(".py") for c in CASES])
def test_the_root_cause_names_the_exception_and_the_known_cause(
    work: Path, script: str, exception: str, section: str | None
) -> None:
    spec = {
        "name": "failing",
        "run_root": str(work / "runs"),
        "hosts": [{"address": "localhost", "workers": 2}],
        "restart": {"max_restarts": 0, "grace_period_s": 5},
    }
    path = write_spec(work, spec)
    proc = run_launch(["--cluster", str(path), "--plain", "--", "python3", str(SCRIPTS / script)], work)
    assert proc.returncode == 1, proc.stderr[-3000:]
    report = proc.stderr[proc.stderr.index("root cause:") :].splitlines()
    assert report[1].startswith(f"  {exception}"), "\n".join(report[:4])
    first = json.loads((work / "runs" / "failing" / "summary.json").read_text())["first_failure"]
    assert exception.split(":")[0] == first["exception"]["type"].rsplit(".", 1)[-1]
    if section is None:
        assert "known cause" not in "\n".join(report) and "known_cause" not in first
    else:
        assert report[2].startswith("  known cause: ") and report[2].endswith(f"#{section})"), report[2]
        assert first["known_cause"]["see"] == f"docs/troubleshooting.md#{section}"
