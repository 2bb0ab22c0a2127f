"""Warm spares with real local processes (no TensorFlow: the spare preloads a tiny module).

A standby made during one attempt runs the next attempt's task in its spare, started exactly as
`python SCRIPT ARGS` would be; whatever the spare cannot run starts cold in the same helper; a
standby that is not used, or whose helper dies, leaves no process behind.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import signal
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from launcher.plan import PlanInputs, TaskLaunch, build_plan
from launcher.spec import parse_spec
from launcher.transport.base import Event, OutputLine, TaskExited, WorkerReport
from launcher.transport.local import LocalStandby, LocalTransport
from tests.conftest import HELPERS, REPO, free_port
from worker.contract import WARM

SCRIPT = HELPERS / "in_spare.py"
PRELOAD = ("tests.helpers.preloaded",)


def launches(work: Path, argv: list[str], mark: str = "a", preload: tuple[str, ...] = PRELOAD) -> list[TaskLaunch]:
    """The one task of attempts 0 and 1 (each attempt has its own TF_CONFIG port and files)."""
    out = []
    for attempt in (0, 1):
        spec = parse_spec(
            {
                "name": "s",
                "env": {"PYTHONPATH": str(REPO), "MARK": mark if attempt == 0 else "a"},
                "training": {"kind": "command", "argv": argv},
                "hosts": [{"address": "localhost", "ports": [free_port()]}],
            }
        )
        launch = build_plan(spec, PlanInputs(str(work / "run"), attempt, sys.executable, str(work))).tasks[0]
        out.append(dataclasses.replace(launch, preload=preload))
    return out


def standing_by(transport: LocalTransport, launch: TaskLaunch) -> LocalStandby:
    transport.standbys.prepare([launch], background=False)
    (standby,) = transport.standbys.standing()
    assert isinstance(standby, LocalStandby)
    return standby


def run_to_end(transport: LocalTransport, launch: TaskLaunch) -> tuple[list[Event], TaskExited]:
    events: queue.Queue[Event] = queue.Queue()
    transport.start(launch, events.put)
    seen: list[Event] = []
    deadline = time.monotonic() + 30
    while True:
        event = events.get(timeout=max(0.01, deadline - time.monotonic()))
        if isinstance(event, TaskExited):
            return seen, event
        seen.append(event)


def described(events: list[Event]) -> dict[str, Any]:
    (line,) = [e.line for e in events if isinstance(e, OutputLine) and e.line.startswith("{")]
    return json.loads(line)


def warm_report(events: list[Event]) -> dict[str, Any]:
    (report,) = [e.data for e in events if isinstance(e, WorkerReport) and e.data["event"] == WARM]
    return report


def spare_of(standby: LocalStandby) -> psutil.Process:
    (spare,) = psutil.Process(standby.proc.pid).children()
    return spare


def test_the_next_attempt_runs_in_the_spare_as_python_script_would(work: Path) -> None:
    first, second = launches(work, ["python", str(SCRIPT), "5"])
    transport = LocalTransport()
    standby = standing_by(transport, first)
    assert standby.watch.wait_ready(20), standby.watch.report
    assert transport.standbys.counts() == (1, 1)
    spare_pid = spare_of(standby).pid
    events, exited = run_to_end(transport, second)
    assert warm_report(events) == {"event": WARM, "used": True, "ready": True}
    seen = described(events)
    assert seen["pid"] == spare_pid, "the task is the spare process that was waiting"
    assert seen["preloaded"], "what the spare imported ahead is there"
    assert seen["name"] == "__main__"
    assert seen["argv"] == [str(SCRIPT), "5"]
    assert seen["path0"] == str(SCRIPT.parent)
    assert seen["cwd"] == str(work)
    assert json.loads(seen["tf_config"]) == second.tf_config, "the new attempt's TF_CONFIG, not the old one's"
    assert exited.exit.code == 5 and exited.exit.signal is None
    assert '"preloaded": true' in Path(second.log_path).read_text()
    assert transport.standbys.counts() == (0, 0)
    transport.close()


def test_python_dash_m_runs_in_the_spare(work: Path) -> None:
    first, second = launches(work, ["python", "-m", "tests.helpers.in_spare", "0"])
    transport = LocalTransport()
    assert standing_by(transport, first).watch.wait_ready(20)
    events, exited = run_to_end(transport, second)
    assert warm_report(events)["used"] is True
    seen = described(events)
    assert seen["name"] == "__main__" and seen["argv"] == [str(SCRIPT), "0"] and seen["path0"] == str(work)
    assert exited.exit.code == 0
    transport.close()


def test_what_a_spare_cannot_run_starts_cold_in_the_same_helper(work: Path) -> None:
    for argv, mark, why in (
        (["python", "-u", str(SCRIPT), "3"], "a", "only `python SCRIPT"),
        (["python", str(SCRIPT), "3"], "changed", "the environment changed since the spare started (MARK)"),
    ):
        first, second = launches(work, argv, mark=mark)
        transport = LocalTransport()
        standby = standing_by(transport, first)
        assert standby.watch.wait_ready(20)
        spare_pid = spare_of(standby).pid
        events, exited = run_to_end(transport, second)
        report = warm_report(events)
        assert report["used"] is False and why in report["why"], report
        seen = described(events)
        assert seen["pid"] != spare_pid and not seen["preloaded"] and seen["mark"] == "a"
        assert exited.exit.code == 3
        assert not psutil.pid_exists(spare_pid) or psutil.Process(spare_pid).status() == psutil.STATUS_ZOMBIE
        transport.close()


def test_a_spare_whose_preload_fails_still_runs_the_task(work: Path) -> None:
    first, second = launches(work, ["python", str(SCRIPT)], preload=("tests.helpers.no_such_module",))
    transport = LocalTransport()
    standby = standing_by(transport, first)
    assert standby.watch.wait_ready(20)
    assert standby.watch.report is not None
    assert [f.split(":")[0] for f in standby.watch.report["failed"]] == ["tests.helpers.no_such_module"]
    events, exited = run_to_end(transport, second)
    assert warm_report(events)["used"] is True and exited.exit.code == 0
    transport.close()


def test_a_signal_to_a_warm_task_reaches_it_and_its_exit_is_reported(work: Path) -> None:
    first, second = launches(work, ["python", str(HELPERS / "task.py"), "sleep"])
    transport = LocalTransport()
    assert standing_by(transport, first).watch.wait_ready(20)
    events: queue.Queue[Event] = queue.Queue()
    task = transport.start(second, events.put)
    while not isinstance(event := events.get(timeout=20), OutputLine):
        pass
    assert event.line == "ready worker:0"
    task.signal(signal.SIGTERM)
    while not isinstance(event := events.get(timeout=20), TaskExited):
        pass
    assert event.exit.signal == signal.SIGTERM
    transport.close()


def test_unused_standbys_are_closed_with_their_spares(work: Path) -> None:
    first, _ = launches(work, ["python", str(SCRIPT)])
    transport = LocalTransport()
    standby = standing_by(transport, first)
    assert standby.watch.wait_ready(20)
    spare = spare_of(standby)
    transport.close()  # waits for the helper, which killed its group on EOF
    assert transport.standbys.counts() == (0, 0)
    _, alive = psutil.wait_procs([spare], timeout=10)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], "the spare outlived its standby"


def test_a_spare_dies_with_its_helper(work: Path) -> None:
    first, _ = launches(work, ["python", str(SCRIPT)])
    transport = LocalTransport()
    standby = standing_by(transport, first)
    assert standby.watch.wait_ready(20)
    spare = spare_of(standby)
    os.kill(standby.proc.pid, signal.SIGKILL)  # the helper dies without a word: the spare reads EOF
    spare.wait(timeout=10)
    transport.close()
