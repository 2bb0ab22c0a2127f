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
    # script, workers, the exception shown (None: none), the known cause's section (None: a user's own error)
    ("keras3_fit.py", 2, "ValueError: Attempt to convert a value (PerReplica:", "keras-3-modelfit-under-the-strategy"),
    ("peer_left.py", 2, "UnavailableError: Collective ops is aborted by: ", "a-peer-left-the-coordination-service"),
    ("port_in_use.py", 1, "UnknownError: Could not start gRPC server", "the-tf-port-is-already-in-use"),
    ("oom.py", 1, "ResourceExhaustedError: OOM when allocating tensor with shape[1048576,1048576]", "out-of-memory"),
    ("user_error.py", 1, "ValueError: bad batch: expected 32 rows, got 31", None),
    ("sigkill.py", 2, None, "killed-by-sigkill"),
    ("no_tensorflow.py", 1, "ModuleNotFoundError: No module named 'tensorflow'", "tensorflow-is-not-installed"),
    (
        "no_tf_keras.py",
        1,
        "ImportError: Keras cannot be imported. Check that it is installed.",
        "tf-keras-is-not-installed",
    ),
]


@pytest.mark.parametrize(
    ("script", "workers", "exception", "section"), CASES, ids=[c[0].removesuffix(".py") for c in CASES]
)
def test_the_root_cause_names_the_exception_and_the_known_cause(
    work: Path, script: str, workers: int, exception: str | None, section: str | None
) -> None:
    spec = {
        "name": "failing",
        "run_root": str(work / "runs"),
        "hosts": [{"address": "localhost", "workers": workers}],
        "restart": {"max_restarts": 0, "grace_period_s": 5, "stall_timeout_s": 60, "warm_spares": False},
    }
    path = write_spec(work, spec)
    python = ["python3", "-S"] if script == "no_tensorflow.py" else ["python3"]
    proc = run_launch(["--cluster", str(path), "--plain", "--", *python, str(SCRIPTS / script)], work)
    assert proc.returncode == 1, proc.stderr[-3000:]
    report = proc.stderr[proc.stderr.index("root cause:") :].splitlines()
    first = json.loads((work / "runs" / "failing" / "summary.json").read_text())["first_failure"]
    if exception is None:
        assert "exception" not in first
    else:
        assert report.pop(1).startswith(f"  {exception}"), "\n".join(report[:4])
        assert exception.split(":")[0] == first["exception"]["type"].rsplit(".", 1)[-1]
    if section is None:
        assert "known cause" not in "\n".join(report) and "known_cause" not in first
    else:
        assert report[1].startswith("  known cause: ") and report[1].endswith(f"#{section})"), report[1]
        assert first["known_cause"]["see"] == f"docs/troubleshooting.md#{section}"
