"""The console: plain prefixed lines off a terminal, an in-place table on one; `launch status`."""

from __future__ import annotations

import io
import json
import re
import signal
from pathlib import Path

from launcher.console import Console
from launcher.plan import PlanInputs, build_plan
from launcher.rundir.status import describe_run
from launcher.spec.load import parse_spec
from launcher.supervise.gang import GangStatus, TaskStatus
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


CUDA_LINE = (
    "I0000 00:00:1795417464.521002   21747 cudart_stub.cc:31] Could not find cuda drivers on your machine, "
    "GPU will not be used."
)


def test_live_view_shows_step_of_total_eta_loss_and_lines_as_text(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "140")
    out = io.StringIO()
    console = Console(live=True, out=out, err=io.StringIO())
    console.attach(lambda: status(), str(tmp_path / "status.json"))
    first, second = PLAN.tasks
    console.report(first, {"event": "step", "step": 10, "total": 310, "loss": 0.5})
    console._views[first.name]._last_step = (console._views[first.name]._last_step[0] - 2.0, 0)  # 10 steps in 2 s
    console.report(first, {"event": "step", "step": 10, "total": 310, "loss": 0.5})
    console.report(second, {"event": "step", "step": 7, "loss": float("nan"), "total": True})  # ignored fields
    console.output(second, "loss [bold]x[/bold]")  # a task's line is shown as written, never as markup
    console.flush()
    console.notice("worker:1 is slow")  # scrolls above the table, on the same screen
    console.close()
    text = out.getvalue()
    assert "10/310" in text and "0.5" in text and "loss [bold]x[/bold]" in text
    assert "1:00" in text, "ETA: 300 steps left at 5 steps/s"
    assert "[launch] worker:1 is slow" in text
    written = json.loads((tmp_path / "status.json").read_text())["tasks"]
    assert written[0]["total"] == 310 and written[0]["loss"] == 0.5 and round(written[0]["eta_s"]) == 60
    assert written[1]["total"] is None and written[1]["loss"] is None and written[1]["step"] == 7


def test_known_harmless_lines_stay_off_the_console_unless_verbose() -> None:
    quiet, verbose = io.StringIO(), io.StringIO()
    for out, flag in ((quiet, False), (verbose, True)):
        console = Console(out=out, err=io.StringIO(), verbose=flag)
        console.output(PLAN.tasks[0], "starting")
        console.output(PLAN.tasks[0], CUDA_LINE)
        assert console._views[PLAN.tasks[0].name].last_line == ("starting" if not flag else CUDA_LINE)
    assert quiet.getvalue() == "[worker:0] starting\n"
    assert verbose.getvalue() == f"[worker:0] starting\n[worker:0] {CUDA_LINE}\n"


def test_show_echoes_only_the_tasks_named() -> None:
    out = io.StringIO()
    console = Console(out=out, err=io.StringIO(), show={"worker:1"})
    for launch in PLAN.tasks:
        console.output(launch, f"hello from {launch.name}")
    assert out.getvalue() == "[worker:1] hello from worker:1\n"
    assert console._views["worker:0"].last_line == "hello from worker:0", "still tracked for the table"


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
    assert f"  its log: launch logs {tmp_path} --attempt 0 --task worker:1" in text.splitlines()
    assert "step 60 weights abc" in text
    # a resumed run's attempts are numbered on from its earlier launches: its count says whose they are
    for attempt in summary["attempts"]:
        attempt["attempt"] += 2
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    assert "succeeded at step 60 after 2 attempt(s) of this launch" in describe_run(str(tmp_path)).text


def test_a_notice_quoting_a_tasks_error_file_reaches_the_screen_as_text() -> None:
    err = io.StringIO()
    Console(out=io.StringIO(), err=err).notice(
        "worker:0 exit code 1 (Evil\x1b]0;title\x07: msg\x1b[2J\x1b]52;c;RUZ\x07)"
    )
    assert "\x1b" not in err.getvalue() and "\x07" not in err.getvalue() and "Evil" in err.getvalue()


def test_rows_and_status_file_list_tasks_in_their_order_whatever_spoke_first(tmp_path: Path) -> None:
    plan = build_plan(
        parse_spec({"name": "c", "hosts": [{"address": "localhost", "workers": 11, "chief": True}]}),
        PlanInputs(
            "/runs/c", 0, "/py", "/work", ports={f"{t}:{i}": 5000 + i for t in ("chief", "worker") for i in range(11)}
        ),
    )
    console = Console(out=io.StringIO(), err=io.StringIO())
    console.attach(lambda: None, str(tmp_path / "status.json"))
    for launch in reversed(plan.tasks):
        console.output(launch, "hello")
    order = [row[0] for row in console.rows()[1:]]
    assert order == ["chief:0", *(f"worker:{i}" for i in range(11))]
    console.close()
    assert [t["task"] for t in json.loads((tmp_path / "status.json").read_text())["tasks"]] == order


def test_the_launchers_create_time_is_the_one_launch_status_compares_with() -> None:
    import psutil

    from launcher.console import own_create_time

    assert abs(own_create_time() - psutil.Process().create_time()) < 0.05


def test_a_task_that_has_exited_shows_no_rate_or_eta(tmp_path: Path) -> None:
    exit1: list[ExitStatus | None] = [None]
    console = Console(live=False, out=io.StringIO(), err=io.StringIO())
    console.attach(lambda: status(exit1[0]), str(tmp_path / "status.json"))
    _, second = PLAN.tasks
    console.report(second, {"event": "step", "step": 10, "total": 310})
    console._views[second.name]._last_step = (console._views[second.name]._last_step[0] - 2.0, 0)
    console.report(second, {"event": "step", "step": 10, "total": 310})
    assert round(console._views[second.name].eta_s or 0) == 60
    exit1[0] = ExitStatus(None, 9)
    console.rows()
    view = console._views[second.name]
    assert (view.rate, view.eta_s, view.state) == (None, None, "killed by SIGKILL")


def test_discarding_a_stream_survives_having_no_descriptor_left(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import contextlib
    import os

    from launcher import console

    def no_descriptor(*args: object) -> int:
        raise OSError(24, "Too many open files")

    read_end, write_end = os.pipe()
    os.close(read_end)
    gone = open(write_end, "w")  # noqa: SIM115 - closed below, where its last flush fails too
    monkeypatch.setattr(console.os, "open", no_descriptor)
    console.discard(gone)  # nothing to redirect with: the writes keep failing, and are caught
    shown = Console(live=False, out=gone, err=io.StringIO())
    shown.output(PLAN.tasks[0], "x" * 10)
    shown.flush()
    assert shown.quiet
    monkeypatch.undo()
    with contextlib.suppress(OSError):
        gone.close()


def test_a_stream_whose_reader_left_is_sent_to_dev_null_only_when_the_console_owns_it() -> None:
    """The command line's own stdout goes to /dev/null (nothing raises at exit); a Python caller's
    stdout is theirs: the console stops writing to it, and leaves the descriptor as it was."""
    import contextlib
    import os
    import stat

    for owns in (True, False):
        read_end, write_end = os.pipe()
        os.close(read_end)  # its reader is gone: a write raises BrokenPipeError
        out = open(write_end, "w", encoding="utf-8")  # noqa: SIM115 - closed below
        err = io.StringIO()
        console = Console(live=False, out=out, err=err, owns_streams=owns)
        try:
            console.output(PLAN.tasks[0], "x" * 10_000)  # more than the buffer: written at once
            console.flush()
            console.output(PLAN.tasks[0], "later")
            console.flush()
            assert err.getvalue().count("standard output was closed by its reader") == 1, err.getvalue()
            mode = os.fstat(write_end).st_mode
            assert stat.S_ISCHR(mode) if owns else stat.S_ISFIFO(mode), (owns, oct(mode))
        finally:
            with contextlib.suppress(OSError):  # what a caller's stream still holds cannot be written
                out.close()


def test_the_live_table_keeps_every_tasks_name_and_step_on_a_narrow_terminal(tmp_path: Path, monkeypatch) -> None:
    """A kill's state is long (its OOM note): on 80 columns it had squeezed out the task and step columns."""
    monkeypatch.setenv("COLUMNS", "80")
    out = io.StringIO()
    console = Console(live=True, out=out, err=io.StringIO())
    console.attach(lambda: status(ExitStatus(None, signal.SIGKILL, oom_kills=0)), str(tmp_path / "status.json"))
    for launch in PLAN.tasks:
        console.report(launch, {"event": "step", "step": 200, "total": 200, "loss": 0.0123})
        console.output(launch, "2026-11-27 05:40:00,123 INFO " + "x" * 200)
    console.close()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    final = text.rsplit("attempt 0, 0 restart(s)", 1)[1].splitlines()[1:4]
    assert final[0].split() == ["task", "state", "step", "steps/s", "loss", "last", "line"], final
    assert final[1].startswith("worker:0  running ") and final[2].startswith("worker:1  killed by SIGKILL (not"), final
    assert all("200/200" in row and "0.0123" in row and len(row) <= 80 for row in final[1:]), final
    assert final[2].split("200/200")[0].rstrip().endswith("\u2026"), "the state is cut, and says so"


def test_every_task_is_listed_from_the_start_and_a_backoff_keeps_the_status_file_current(tmp_path: Path) -> None:
    import dataclasses
    import time

    restart_at = time.time() + 30
    backing_off = dataclasses.replace(status(ExitStatus(3, None)), restart_at=restart_at)
    console = Console(live=False, out=io.StringIO(), err=io.StringIO())
    console.attach(lambda: backing_off, str(tmp_path / "status.json"), PLAN.tasks)  # neither task said a word
    console.flush()
    first = json.loads((tmp_path / "status.json").read_text())
    assert [t["task"] for t in first["tasks"]] == ["worker:0", "worker:1"] and first["restart_at"] == restart_at
    console.wait(1.3)  # a backoff: the file is written again meanwhile, not only once it is over
    again = json.loads((tmp_path / "status.json").read_text())
    assert again["updated"] > first["updated"] and again["tasks"][1]["state"] == "exit code 3"
    described = describe_run(str(tmp_path))
    assert "backing off: every task starts again in 2" in described.text, described.text


def test_a_task_name_is_hidden_only_inside_a_healthy_joins_stragglers_list() -> None:
    out = io.StringIO()
    console = Console(live=False, out=out, err=io.StringIO())
    task = PLAN.tasks[0]
    head = "I0000 00:00:1795757689.257147   18428 coordination_service.cc:505] Example stragglers:"
    for line in (head, "/job:worker/replica:0/task:1", "Some timed out task names:", "/job:worker/replica:0/task:1"):
        console.output(task, line)
    assert out.getvalue().splitlines() == [
        "[worker:0] Some timed out task names:",
        "[worker:0] /job:worker/replica:0/task:1",
    ]


def test_status_names_no_log_for_a_first_failure_that_printed_nothing(tmp_path: Path) -> None:
    first = {"task": "worker:1", "host": "localhost", "exit": "exit code 3", "attempt": 0, "error": None, "log": None}
    summary = {"run_name": "r", "state": "failed", "first_failure": first, "attempts": []}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    lines = describe_run(str(tmp_path)).text.splitlines()
    assert "  its log: none, it printed nothing" in lines and not any("launch logs" in line for line in lines)
