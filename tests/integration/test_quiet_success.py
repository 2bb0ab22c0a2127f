"""A successful run is quiet: no traceback, no error line, only a few lines besides training's."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import HELPERS, REPO, run_launch

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


LINGER = HELPERS / "leaving" / "linger.py"
HEARTBEAT_S = 10  # TensorFlow's coordination heartbeat interval: a task that lingers longer sends one


def run_lingering(work: Path, leave_after_peers: bool) -> tuple[str, str]:
    """A run whose worker:1 lingers past a heartbeat after the gang met: (console, worker:1's log)."""
    env = {"LINGER_S": str(HEARTBEAT_S + 2), "LEAVE_AFTER_PEERS": "1" if leave_after_peers else "0"}
    proc = run_launch(["--local", "2", "--plain", "--", "python", str(LINGER)], work, env=env)
    console = proc.stdout + proc.stderr
    assert proc.returncode == 0, console
    return console, (work / "runs" / "linger" / "attempt-0" / "worker-1.log").read_text()


def test_the_coordination_leader_leaves_last_so_no_heartbeat_finds_it_gone(work: Path) -> None:
    console, log = run_lingering(work, leave_after_peers=True)
    assert "StartAbort" not in log and "grpc_status" not in log, log
    waited = float(re.search(r"worker:0 waited ([\d.]+)s for its peers", console).group(1))  # type: ignore[union-attr]
    assert waited >= HEARTBEAT_S, console
    assert "worker:1 waited 0.0s" in console


def test_a_script_that_leaves_in_the_wrong_order_keeps_tensorflow_s_shutdown_lines_off_the_console(
    work: Path,
) -> None:
    console, log = run_lingering(work, leave_after_peers=False)
    assert "BaseCollectiveExecutor::StartAbort UNAVAILABLE" in log and "grpc_status" in log, log  # the control
    for said in ("StartAbort", "grpc_status", "Additional GRPC error information"):
        assert said not in console, console
    assert "launch succeeded" in console


@pytest.mark.slow
def test_the_readme_example_is_quiet_ten_times_in_a_row_under_load(work: Path) -> None:
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]  # every core busy
    launch = Path(sys.executable).parent / "launch"
    try:
        for run in range(10):
            spec = json.loads((REPO / "cluster.example.json").read_text())
            spec["run_root"] = str(work / f"runs-{run}")
            path = work / "cluster.json"
            path.write_text(json.dumps(spec))
            proc = subprocess.run(
                [str(launch), "--cluster", str(path), "--plain"], cwd=work, capture_output=True, text=True, timeout=600
            )
            console = proc.stdout + proc.stderr
            assert proc.returncode == 0, console
            logs = "".join(p.read_text() for p in (work / f"runs-{run}" / "example" / "attempt-0").glob("*.log"))
            for bad in ("Traceback", "E0000", "grpc_status"):
                assert bad not in console, f"run {run}: {bad!r} on the console:\n{console}"
            assert "StartAbort" not in logs and "grpc_status" not in logs, f"run {run}: shutdown noise in the logs"
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
