"""The console: plain prefixed lines off a terminal, an in-place table on one; `launch status`."""

from __future__ import annotations

import io
import json
import signal
from pathlib import Path

from launcher.console import Console
from launcher.gang import GangStatus, TaskStatus
from launcher.plan import PlanInputs, build_plan
from launcher.run_status import describe_run
from launcher.spec import parse_spec
from launcher.transport.base import ExitStatus

PLAN = build_plan(
    parse_spec({"name": "c", "hosts": [{"address": "localhost", "workers": 2, "ports": [5000, 5001]}]}),
    PlanInputs("/runs/c", 0, "/py", "/work"),
)


def status(exit1: ExitStatus | None = None) -> GangStatus:
    return GangStatus(
        0,
        0,
        0,
        0.0,
        True,
        (
            TaskStatus("worker:0", "localhost", 1, True, 5, None, 0, 0),
            TaskStatus("worker:1", "localhost", 2, True, 5, exit1, 0, 0),
        ),
    )


def test_plain_mode_prefixes_every_line() -> None:
    out, err = io.StringIO(), io.StringIO()
    console = Console(live=False, out=out, err=err)
    console.output(PLAN.tasks[1], "hello")
    console.notice("restarting")
    assert out.getvalue() == "[worker:1] hello\n"
    assert err.getvalue() == "[launch] restarting\n"


def test_live_mode_draws_a_table_in_place(tmp_path: Path) -> None:
    out = io.StringIO()
    console = Console(live=True, out=out, err=io.StringIO())
    console.attach(lambda: status(ExitStatus(None, signal.SIGKILL)), str(tmp_path / "status.json"))
    for launch in PLAN.tasks:
        console.report(launch, {"event": "joined"})
        console.report(launch, {"event": "step", "step": 10})
        console.output(launch, f"loss of {launch.name}")
    console.notice("worker:1 died")
    console.notice("restarting")  # a notice scrolls above the table, which is redrawn below it
    console.close()
    text = out.getvalue()
    assert "[worker:0]" not in text, "no prefixed lines in live mode"
    assert "task" in text and "steps/s" in text
    assert "loss of worker:0" in text and "killed by SIGKILL" in text
    assert "\x1b[" in text  # redrawn in place
    written = json.loads((tmp_path / "status.json").read_text())
    assert [t["task"] for t in written["tasks"]] == ["worker:0", "worker:1"] and written["tasks"][0]["step"] == 10


def test_status_of_a_finished_run(tmp_path: Path) -> None:
    summary = {
        "state": "succeeded",
        "final_step": 60,
        "restarts": 1,
        "preemptions": 0,
        "first_failure": {
            "task": "worker:1",
            "host": "localhost",
            "exit": "killed by SIGKILL",
            "attempt": 0,
            "error": None,
        },
        "attempts": [
            {
                "attempt": 0,
                "reason": "worker:1 on localhost killed by SIGKILL; restart 1 of 3",
                "tasks": [{"name": "worker:1", "host": "localhost", "exit": "killed by SIGKILL", "result": None}],
            },
            {
                "attempt": 1,
                "reason": "every task exited 0",
                "tasks": [
                    {
                        "name": "worker:0",
                        "host": "localhost",
                        "exit": "exit code 0",
                        "result": {"step": 60, "fingerprint": "abc"},
                    }
                ],
            },
        ],
    }
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    text = describe_run(str(tmp_path)).text
    assert "succeeded at step 60 after 2 attempt(s)" in text
    assert "first failure: worker:1 on localhost killed by SIGKILL (attempt 0)" in text
    assert "step 60 weights abc" in text
