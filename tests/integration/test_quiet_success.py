"""A successful run is quiet: no traceback, no error line, only a few lines besides training's."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.tf

TRAINING_LINE = re.compile(r"^\[worker:\d\] .* INFO worker:\d: step \d+/\d+ loss ")
MOST_OTHER_LINES = 25


def test_the_example_succeeds_quietly(work: Path) -> None:
    spec = json.loads((REPO / "cluster.example.json").read_text())
    spec["training"].update(steps=60, log_every=10, checkpoint_every=30)
    spec["run_root"] = str(work / "runs")
    path = work / "cluster.json"
    path.write_text(json.dumps(spec))
    launch = Path(sys.executable).parent / "launch"
    proc = subprocess.run(
        [str(launch), "--cluster", str(path), "--plain"], cwd=work, capture_output=True, text=True, timeout=240
    )
    console = (proc.stdout + proc.stderr).splitlines()
    assert proc.returncode == 0, "\n".join(console[-40:])
    for bad in ("Traceback", "E0000", "grpc_status", "UnavailableError", "Could not find cuda"):
        assert not [line for line in console if bad in line], f"{bad!r} on the console:\n" + "\n".join(console)
    other = [line for line in console if not TRAINING_LINE.match(line)]
    assert len(other) <= MOST_OTHER_LINES, f"{len(other)} lines besides training's:\n" + "\n".join(other)
    logs = "".join(p.read_text() for p in (work / "runs" / "example" / "attempt-0").glob("worker-*.log"))
    assert "Could not find cuda" in logs or "cuInit" in logs, "the start-up lines must stay in the logs"
    status = json.loads((work / "runs" / "example" / "status.json").read_text())
    for task in status["tasks"]:
        assert not re.search(r"error|Traceback|grpc", str(task.get("last_line", "")), re.I), task
    shown = subprocess.run([str(launch), "status", str(work / "runs" / "example")], capture_output=True, text=True)
    assert shown.returncode == 0 and "succeeded" in shown.stdout and "grpc" not in shown.stdout.lower(), shown.stdout


def test_library_loggers_never_print_raw() -> None:
    code = (
        "import logging, sys; from launcher.cli.streams import quiet_libraries; quiet_libraries(sys.argv[1] == 'v');"
        "logging.getLogger('paramiko.transport').error('Secsh channel 10 open FAILED')"
    )
    quiet = subprocess.run([sys.executable, "-c", code, "-"], capture_output=True, text=True)
    verbose = subprocess.run([sys.executable, "-c", code, "v"], capture_output=True, text=True)
    assert quiet.stderr == "" and "Secsh channel 10 open FAILED" in verbose.stderr
