"""`launch stop RUN` refuses, without signalling anything, whatever is not this run's live launcher."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import psutil
import pytest

from launcher.common import exit_codes
from launcher.common.errors import UsageError
from launcher.rundir.stop import stop_launcher
from worker.contract import RunLayout


@pytest.fixture
def signals(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[int, int]]]:
    """Every signal stop tries to send (none gets through), and any SIGINT this process receives."""
    sent: list[tuple[int, int]] = []
    real_kill = os.kill

    def record(pid: int, sig: int) -> None:
        if sig == 0:  # asks whether the pid exists (psutil does); sends nothing
            real_kill(pid, sig)
        else:
            sent.append((pid, sig))

    def received(signum: int, frame: FrameType | None) -> None:
        sent.append((os.getpid(), signum))

    monkeypatch.setattr(os, "kill", record)
    monkeypatch.setattr(psutil.Process, "send_signal", lambda self, sig: record(self.pid, sig))
    previous = signal.signal(signal.SIGINT, received)
    try:
        yield sent
    finally:
        signal.signal(signal.SIGINT, previous)


def _layout(tmp_path: Path) -> RunLayout:
    layout = RunLayout(str(tmp_path / "runs" / "r"))
    os.makedirs(layout.run_dir)
    return layout


def _write(path: str, data: dict[str, object]) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(data, handle)


def _status(layout: RunLayout, started: float | None) -> None:
    """A status.json naming this very process, alive, as the launcher."""
    _write(
        layout.status_file,
        {
            "launcher_pid": os.getpid(),
            "launcher_started": started,
            "updated": time.time(),
            "attempt": 0,
            "restarts": 0,
            "tasks": [],
        },
    )


def _refused(layout: RunLayout, needle: str) -> None:
    with pytest.raises(UsageError, match=needle) as caught:
        stop_launcher(layout.run_dir, timeout_s=1)
    assert caught.value.exit_code == exit_codes.USAGE


def test_a_pid_started_at_another_time_is_not_the_launcher(tmp_path: Path, signals: list[tuple[int, int]]) -> None:
    layout = _layout(tmp_path)
    _status(layout, psutil.Process().create_time() - 50)  # the launcher is gone and its pid went to us
    _refused(layout, f"its launcher \\(pid {os.getpid()}\\) is gone and wrote no summary")
    assert signals == []


def test_a_status_without_the_launchers_start_time_is_refused(tmp_path: Path, signals: list[tuple[int, int]]) -> None:
    layout = _layout(tmp_path)
    _status(layout, None)
    _refused(layout, f"does not say when its launcher \\(pid {os.getpid()}\\) started.*kill -INT {os.getpid()}")
    assert signals == []


def test_a_run_whose_launcher_wrote_its_summary_has_ended(tmp_path: Path, signals: list[tuple[int, int]]) -> None:
    layout = _layout(tmp_path)
    _status(layout, psutil.Process().create_time())  # alive, but its summary is written: it is on its way out
    _write(layout.summary_file, {"state": "succeeded", "final_step": 60, "attempts": [{}]})
    _refused(layout, f"^{layout.run_dir}: already ended: succeeded at step 60 after 1 attempt")
    assert signals == []


def test_a_run_with_only_a_summary_has_ended(tmp_path: Path, signals: list[tuple[int, int]]) -> None:
    layout = _layout(tmp_path)
    _write(layout.summary_file, {"state": "failed", "final_step": None, "attempts": [{}]})
    _refused(layout, "already ended: failed with no step reported")
    assert signals == []


def test_no_status_is_nothing_to_stop(tmp_path: Path, signals: list[tuple[int, int]]) -> None:
    layout = _layout(tmp_path)
    _refused(layout, "has no summary.json, status.json or attempt directory; is it a run directory")
    os.makedirs(layout.attempt_dir(0))  # a run that never wrote its status: it is one all the same
    _refused(layout, "no status.json: the run never started, or it is not a run directory")
    with pytest.raises(UsageError, match=f"It lies inside the run {layout.run_dir}: give that. Nothing to stop."):
        stop_launcher(layout.attempt_dir(0))
    with pytest.raises(UsageError, match="no such directory"):
        stop_launcher(str(tmp_path / "nowhere"))
    assert signals == []


def test_pid_0_is_never_signalled(tmp_path: Path, signals: list[tuple[int, int]]) -> None:
    layout = _layout(tmp_path)
    _write(
        layout.status_file,
        {"launcher_pid": 0, "launcher_started": 0.0, "updated": 0.0, "attempt": 0, "restarts": 0, "tasks": []},
    )
    _refused(layout, "is gone")
    assert signals == []


def test_a_forged_pid_of_1_without_a_start_time_is_refused_without_a_kill_to_copy(
    tmp_path: Path, signals: list[tuple[int, int]]
) -> None:
    layout = _layout(tmp_path)
    for pid in (1, 0, -1):
        _write(layout.status_file, {"launcher_pid": pid, "updated": 0.0, "attempt": 0, "restarts": 0, "tasks": []})
        with pytest.raises(UsageError, match="which is no launcher's; nothing was signalled") as caught:
            stop_launcher(layout.run_dir, timeout_s=1)
        assert "kill" not in str(caught.value)  # `kill -INT -1`, as root, would signal every process
    assert signals == []
