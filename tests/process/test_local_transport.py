"""The local transport with real processes: exit codes, signals, logs, groups, lifeline."""

from __future__ import annotations

import queue
import signal
import sys
import time
from pathlib import Path

from launcher.plan import PlanInputs, build_plan
from launcher.spec import parse_spec
from launcher.transport.base import Event, OutputLine, TaskExited
from launcher.transport.local import LocalTask, LocalTransport
from tests.conftest import HELPERS


def start(work: Path, *args: str) -> tuple[LocalTask, queue.Queue[Event]]:
    spec = parse_spec(
        {
            "name": "t",
            "training": {"kind": "command", "argv": ["python", str(HELPERS / "task.py"), *args]},
            "hosts": [{"address": "localhost", "ports": [1]}],
        }
    )
    launch = build_plan(spec, PlanInputs(str(work / "run"), 0, sys.executable, str(work))).tasks[0]
    events: queue.Queue[Event] = queue.Queue()
    return LocalTransport().start(launch, events.put), events


def wait_for(events: queue.Queue[Event], kind: type, timeout: float = 20) -> Event:
    deadline = time.monotonic() + timeout
    while True:
        event = events.get(timeout=max(0.01, deadline - time.monotonic()))
        if isinstance(event, kind):
            return event


def test_exit_code_output_and_log(work: Path) -> None:
    task, events = start(work, "fail-on", "worker:0", "3")
    line = wait_for(events, OutputLine)
    assert isinstance(line, OutputLine) and line.line == "ready worker:0" and line.task == "worker:0"
    exited = wait_for(events, TaskExited)
    assert isinstance(exited, TaskExited) and exited.exit.code == 3 and exited.exit.signal is None
    assert "worker:0 failing with 3" in Path(task.launch.log_path).read_text()
    assert task.gone()


def test_sigkill_reports_the_signal_and_empties_the_group(work: Path) -> None:
    task, events = start(work, "sleep", "--ignore-term", "--child")
    wait_for(events, OutputLine)
    task.signal(signal.SIGTERM)
    assert events.empty() or not any(isinstance(e, TaskExited) for e in list(events.queue))
    task.signal(signal.SIGKILL)
    exited = wait_for(events, TaskExited)
    assert isinstance(exited, TaskExited) and exited.exit.signal == signal.SIGKILL
    deadline = time.monotonic() + 10
    while not task.gone() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert task.gone(), "the grandchild survived the group kill"


def test_closing_the_lifeline_kills_the_group(work: Path) -> None:
    task, events = start(work, "sleep", "--ignore-term", "--child")
    wait_for(events, OutputLine)
    task.close()  # what the kernel does when the launcher dies
    exited = wait_for(events, TaskExited)
    assert isinstance(exited, TaskExited) and exited.exit.signal == signal.SIGKILL


def test_a_missing_program_is_exit_127_with_a_message(work: Path) -> None:
    spec = parse_spec(
        {
            "name": "t",
            "training": {"kind": "command", "argv": ["/no/such/program"]},
            "hosts": [{"address": "localhost", "ports": [1]}],
        }
    )
    launch = build_plan(spec, PlanInputs(str(work / "run"), 0, sys.executable, str(work))).tasks[0]
    events: queue.Queue[Event] = queue.Queue()
    LocalTransport().start(launch, events.put)
    exited = wait_for(events, TaskExited)
    assert isinstance(exited, TaskExited) and exited.exit.code == 127
    assert "cannot start '/no/such/program'" in Path(launch.log_path).read_text()
