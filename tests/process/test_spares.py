"""Warm spares with real local processes (no TensorFlow: the spare preloads a tiny module).

A standby made during one attempt runs the next attempt's task in its spare, started exactly as
`python SCRIPT ARGS` would be; whatever the spare cannot run starts cold on the same agent; a
standby that is not used, or whose agent dies, leaves no process behind.
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
from launcher.spec.load import parse_spec
from launcher.transport.base import Event, OutputLine, TaskExited, WorkerReport
from launcher.transport.fleet import AgentTransport
from launcher.transport.hosts import host_transport
from tests.conftest import HELPERS, REPO, tasks_of
from tests.labs.ports import free_port
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


def local_transport() -> AgentTransport:
    spec = parse_spec({"name": "s", "hosts": [{"address": "localhost", "ports": [1]}]})
    return host_transport(spec, [sys.executable])


def standing_by(transport: AgentTransport, launch: TaskLaunch) -> psutil.Process:
    """Prepare the task's standby; its spare process, once it said it is ready."""
    transport.connect([0])
    transport.prepare_spares([launch])
    deadline = time.monotonic() + 20
    while transport.spares() != (1, 1):
        assert time.monotonic() < deadline, transport.spares()
        time.sleep(0.05)
    (spare,) = tasks_of(agent_process(transport))
    return spare


def agent_process(transport: AgentTransport) -> psutil.Process:
    return psutil.Process(transport.agent(0).info["pid"])


def run_to_end(transport: AgentTransport, launch: TaskLaunch) -> tuple[list[Event], TaskExited]:
    events: queue.Queue[Event] = queue.Queue()
    transport.start_all([(launch, events.put)])
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


def test_the_next_attempt_runs_in_the_spare_as_python_script_would(work: Path) -> None:
    first, second = launches(work, ["python", str(SCRIPT), "5"])
    transport = local_transport()
    spare_pid = standing_by(transport, first).pid
    events, exited = run_to_end(transport, second)
    assert warm_report(events) == {"event": WARM, "used": True, "ready": True}
    seen = described(events)
    assert seen["pid"] == spare_pid, "the task is the spare process that was waiting"
    assert seen["preloaded"], "what the spare imported ahead is there"
    assert seen["frozen"] == 0, "a user's script gets the heap a cold start would (only the runtime keeps it frozen)"
    assert seen["name"] == "__main__"
    assert seen["argv"] == [str(SCRIPT), "5"]
    assert seen["path0"] == str(SCRIPT.parent)
    assert seen["cwd"] == str(work)
    assert json.loads(seen["tf_config"]) == second.tf_config, "the new attempt's TF_CONFIG, not the old one's"
    assert exited.exit.code == 5 and exited.exit.signal is None
    assert '"preloaded": true' in Path(second.log_path).read_text()
    assert transport.spares() == (0, 0)
    transport.close()


def test_python_dash_m_runs_in_the_spare(work: Path) -> None:
    first, second = launches(work, ["python", "-m", "tests.helpers.in_spare", "0"])
    transport = local_transport()
    standing_by(transport, first)
    events, exited = run_to_end(transport, second)
    assert warm_report(events)["used"] is True
    seen = described(events)
    assert seen["name"] == "__main__" and seen["argv"] == [str(SCRIPT), "0"] and seen["path0"] == str(work)
    assert exited.exit.code == 0
    transport.close()


def test_what_a_spare_cannot_run_starts_cold_on_the_same_agent(work: Path) -> None:
    for argv, mark, why in (
        (["python", "-u", str(SCRIPT), "3"], "a", "only `python SCRIPT"),
        (["python", str(SCRIPT), "3"], "changed", "the environment changed since the spare started (MARK)"),
    ):
        first, second = launches(work, argv, mark=mark)
        transport = local_transport()
        spare_pid = standing_by(transport, first).pid
        events, exited = run_to_end(transport, second)
        report = warm_report(events)
        assert report["used"] is False and why in report["why"], report
        seen = described(events)
        assert seen["pid"] != spare_pid and not seen["preloaded"] and seen["mark"] == "a"
        assert seen["frozen"] == 0
        assert exited.exit.code == 3
        assert not psutil.pid_exists(spare_pid) or psutil.Process(spare_pid).status() == psutil.STATUS_ZOMBIE
        transport.close()


def test_a_spare_whose_preload_fails_still_runs_the_task(work: Path) -> None:
    first, second = launches(work, ["python", str(SCRIPT)], preload=("tests.helpers.no_such_module",))
    transport = local_transport()
    standing_by(transport, first)
    report = transport.agent(0)._standbys  # the spare's report: what it could not preload
    assert [f.split(":")[0] for r in report.values() if r for f in r["failed"]] == ["tests.helpers.no_such_module"]
    events, exited = run_to_end(transport, second)
    assert warm_report(events)["used"] is True and exited.exit.code == 0
    transport.close()


def test_a_signal_to_a_warm_task_reaches_it_and_its_exit_is_reported(work: Path) -> None:
    first, second = launches(work, ["python", str(HELPERS / "task.py"), "sleep"])
    transport = local_transport()
    standing_by(transport, first)
    events: queue.Queue[Event] = queue.Queue()
    (task,) = transport.start_all([(second, events.put)])
    assert not isinstance(task, Exception)
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
    transport = local_transport()
    spare = standing_by(transport, first)
    transport.close()  # waits for the agent, which kills its spares on EOF
    assert transport.spares() == (0, 0)
    _, alive = psutil.wait_procs([spare], timeout=10)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], "the spare outlived its standby"


def test_a_spare_dies_with_its_agent(work: Path) -> None:
    first, _ = launches(work, ["python", str(SCRIPT)])
    transport = local_transport()
    spare = standing_by(transport, first)
    os.kill(agent_process(transport).pid, signal.SIGKILL)  # the agent dies without a word
    spare.wait(timeout=10)
    transport.close()


def test_only_the_runtime_keeps_the_spares_imports_frozen() -> None:
    from launcher.agent.spare import RUNTIME_MODULE, keeps_frozen
    from launcher.plan import WORKER_MODULE

    assert RUNTIME_MODULE == WORKER_MODULE
    assert keeps_frozen(["python3", "-P", "-m", "worker"]) and keeps_frozen(["python", "-m", "worker"])
    assert not keeps_frozen(["python", "train.py"]) and not keeps_frozen(["python", "-m", "mypkg.train"])
    assert not keeps_frozen(["python", "worker"])  # a script (or directory) named worker
