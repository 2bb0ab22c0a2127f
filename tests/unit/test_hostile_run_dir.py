"""`launch status` and `launch logs` on a run directory someone else shaped: no traceback, no hang,
nothing of a terminal control sequence or a secret on the screen."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest

from launcher.common.errors import UsageError
from launcher.rundir.logs import show_logs
from launcher.rundir.status import describe_run

STATUS = {"launcher_started": 1.0, "updated": 1.0, "attempt": 0, "restarts": 0, "tasks": []}


@pytest.mark.parametrize("pid", [-5, 0, 2**70])
def test_a_bad_pid_is_a_gone_launcher(tmp_path: Path, pid: int) -> None:
    (tmp_path / "status.json").write_text(json.dumps({**STATUS, "launcher_pid": pid}))
    assert "is gone" in describe_run(str(tmp_path)).text


def test_a_deep_summary_is_refused_not_a_recursion_error(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(UsageError, match="nested deeper"):
        describe_run(str(tmp_path))


def test_a_fifo_status_file_does_not_hang(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "status.json")
    with pytest.raises(UsageError, match="not a regular file"):
        describe_run(str(tmp_path))


def test_a_linked_summary_is_not_followed(tmp_path: Path) -> None:
    (tmp_path / "elsewhere.json").write_text(json.dumps({"state": "succeeded", "attempts": []}))
    (tmp_path / "summary.json").symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(UsageError, match="symbolic link"):
        describe_run(str(tmp_path))


def test_control_sequences_and_secrets_never_reach_the_screen(tmp_path: Path) -> None:
    task = {"task": "w\x1b]52;c;cGF3bmVk\x07", "state": "running", "last_line": "\x1b[2J token ghp_" + "a" * 36}
    (tmp_path / "status.json").write_text(json.dumps({**STATUS, "launcher_pid": -1, "tasks": [task]}))
    text = describe_run(str(tmp_path)).text
    assert "\x1b" not in text and "\x07" not in text and "ghp_aaaa" not in text


def test_logs_skip_fifos_and_links_and_strip_what_a_screen_must_not_get(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text(json.dumps({"state": "failed", "attempts": []}))
    attempt = tmp_path / "attempt-0"
    attempt.mkdir()
    os.mkfifo(attempt / "worker-0.log")
    (attempt / "worker-1.log").symlink_to("/etc/hostname")
    (attempt / "worker-2.log").write_text("hi \x1b]0;title\x07 hf_" + "b" * 26 + "\n")
    out = io.StringIO()
    assert show_logs(str(tmp_path), out) == 0
    shown = out.getvalue()
    assert "[worker:0] (not shown:" in shown and "[worker:1] (not shown:" in shown
    assert "\x1b" not in shown and "hf_bbbb" not in shown and "[worker:2] hi" in shown
