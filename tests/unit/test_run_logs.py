"""`launch logs RUN`: one attempt's task logs, prefixed by task; filters; following across a restart."""

from __future__ import annotations

import io
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

import psutil
import pytest

from launcher.common import exit_codes
from launcher.common.errors import UsageError
from launcher.rundir.logs import show_logs
from worker.contract import RunLayout, task_stem

FAST_POLL_S = 0.005
WAIT_S = 10.0


class Screen(io.StringIO):
    """What show_logs wrote, readable while another thread writes, with a wait for a piece of text."""

    def __init__(self) -> None:
        super().__init__()
        self._changed = threading.Condition()

    def write(self, text: str) -> int:
        with self._changed:
            written = super().write(text)
            self._changed.notify_all()
        return written

    def text(self) -> str:
        with self._changed:
            return self.getvalue()

    def wait_for(self, needle: str) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: needle in self.getvalue(), timeout=WAIT_S):
                raise AssertionError(f"{needle!r} never shown; shown:\n{self.getvalue()}")


def _layout(tmp_path: Path) -> RunLayout:
    layout = RunLayout(str(tmp_path / "runs" / "r"))
    os.makedirs(layout.run_dir)
    return layout


def _log(layout: RunLayout, attempt: int, task: str, text: str) -> None:
    """Append `text` to a task's log, as the launcher does (line by line)."""
    os.makedirs(layout.attempt_dir(attempt), exist_ok=True)
    with open(layout.log_file(attempt, task_stem(task)), "a", encoding="utf-8") as handle:
        handle.write(text)


def _status(layout: RunLayout, attempt: int, started: float | None = None, tasks: tuple[str, ...] = ()) -> None:
    """A status.json whose launcher is this process (alive), or a gone one when `started` is another time."""
    data = {
        "launcher_pid": os.getpid(),
        "launcher_started": psutil.Process().create_time() if started is None else started,
        "updated": time.time(),
        "attempt": attempt,
        "restarts": attempt,
        "tasks": [{"task": task, "state": "starting"} for task in tasks],
    }
    with open(f"{layout.status_file}.tmp", "w", encoding="utf-8") as handle:
        json.dump(data, handle)
    os.replace(f"{layout.status_file}.tmp", layout.status_file)


def _summary(layout: RunLayout) -> None:
    with open(f"{layout.summary_file}.tmp", "w", encoding="utf-8") as handle:
        json.dump({"state": "succeeded", "attempts": []}, handle)
    os.replace(f"{layout.summary_file}.tmp", layout.summary_file)


def _shown(layout: RunLayout, **options: object) -> list[str]:
    out = io.StringIO()
    assert show_logs(layout.run_dir, out, **options) == exit_codes.SUCCEEDED  # type: ignore[arg-type]
    return out.getvalue().splitlines()


@pytest.fixture
def two_attempts(tmp_path: Path) -> RunLayout:
    layout = _layout(tmp_path)
    _log(layout, 0, "worker:0", "first try\n")
    _log(layout, 0, "worker:1", "died\n")
    _log(layout, 1, "worker:1", "w1 a\nw1 b\n")
    _log(layout, 1, "worker:0", "w0 \x1b[31mred\x1b[0m\r\n\x1b]0;title\x07w0 last without newline")
    _log(layout, 1, "chief:0", "chief line\n")
    _status(layout, 1, started=1.0)  # its launcher is gone: the run has ended
    return layout


def test_the_latest_attempt_by_default_every_task_prefixed_chief_first(two_attempts: RunLayout) -> None:
    assert _shown(two_attempts) == [
        "[chief:0] chief line",
        "[worker:0] w0 red",
        "[worker:0] w0 last without newline",
        "[worker:1] w1 a",
        "[worker:1] w1 b",
    ]


def test_only_the_tasks_asked_for_repeated_or_comma_separated(two_attempts: RunLayout) -> None:
    assert _shown(two_attempts, tasks=["worker:1"]) == ["[worker:1] w1 a", "[worker:1] w1 b"]
    both = ["[chief:0] chief line", "[worker:1] w1 a", "[worker:1] w1 b"]
    assert _shown(two_attempts, tasks=["worker:1,chief:0"]) == both
    assert _shown(two_attempts, tasks=["chief:0", " worker:1 "]) == both


def test_an_attempt_by_number_or_counted_from_the_end(two_attempts: RunLayout) -> None:
    first = ["[worker:0] first try", "[worker:1] died"]
    assert _shown(two_attempts, attempt=0) == first
    assert _shown(two_attempts, attempt=-2) == first
    assert _shown(two_attempts, attempt=-1) == _shown(two_attempts)


def test_an_unknown_attempt_names_those_there_are(two_attempts: RunLayout) -> None:
    for wanted in (2, -3):
        with pytest.raises(UsageError, match=r"no attempt -?\d; it has attempt\(s\) 0, 1") as caught:
            show_logs(two_attempts.run_dir, io.StringIO(), attempt=wanted)
        assert caught.value.exit_code == exit_codes.USAGE


def test_an_unknown_task_names_those_there_are(two_attempts: RunLayout) -> None:
    listed = {"attempts": [{"attempt": 0, "tasks": [{"name": "worker:0"}, {"name": "worker:1"}]}]}
    with open(two_attempts.summary_file, "w") as file:
        json.dump(listed, file)
    with pytest.raises(UsageError, match=r"no task worker:7 in attempt 0; its tasks: worker:0, worker:1\."):
        show_logs(two_attempts.run_dir, io.StringIO(), tasks=["worker:0,worker:7"], attempt=0)


def test_a_task_of_an_attempt_no_file_lists_is_said_to_have_no_log_and_odd_names_never_reach_the_screen(
    two_attempts: RunLayout,
) -> None:
    """summary.json lists only the latest launch's attempts: an earlier launch's are listed by nothing."""
    notes = io.StringIO()
    assert show_logs(two_attempts.run_dir, io.StringIO(), tasks=["worker:7"], attempt=0, notes=notes) == 0
    assert notes.getvalue() == "[launch] no log of worker:7 in attempt 0: nothing printed there, or no such task\n"
    planted = {"attempts": [{"attempt": 1, "tasks": [{"name": "\x1b]0;title\x07x:1"}, {"name": "\x1b[2Jy:1"}]}]}
    with open(two_attempts.summary_file, "w") as file:
        json.dump(planted, file)
    open(two_attempts.log_file(1, "\x1b[2Jz-1"), "w").close()
    notes = io.StringIO()
    assert show_logs(two_attempts.run_dir, io.StringIO(), notes=notes) == 0 and "\x1b" not in notes.getvalue()
    with pytest.raises(UsageError) as refused:
        show_logs(two_attempts.run_dir, io.StringIO(), tasks=["\x1b[2Jworker:1"])
    assert "\x1b" not in str(refused.value) and "its tasks: chief:0, worker:0, worker:1." in str(refused.value)


def test_a_task_the_status_names_is_known_before_it_logs_a_line(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    _log(layout, 0, "worker:0", "hello\n")
    _status(layout, 0, started=1.0, tasks=("worker:0", "worker:1@far-host"))
    assert _shown(layout, tasks=["worker:1"]) == []


def test_a_run_without_attempts_is_a_usage_error(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    with pytest.raises(UsageError, match="no attempt has started yet"):
        show_logs(layout.run_dir, io.StringIO())
    with pytest.raises(UsageError, match="no such directory"):
        show_logs(str(tmp_path / "nowhere"), io.StringIO())
    (Path(layout.run_dir) / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="is it a run directory"):
        show_logs(layout.run_dir, io.StringIO())
    (tmp_path / "afile").write_text("")
    for follow in (False, True):
        with pytest.raises(UsageError, match="afile: not a directory"):
            show_logs(str(tmp_path / "afile"), io.StringIO(), follow=follow)


def test_other_files_of_an_attempt_are_not_logs(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    _log(layout, 0, "worker:0", "hello\n")
    for name in ("worker-0.result.json", "notes.log", "worker-x.log", "srun.log"):
        Path(layout.attempt_dir(0), name).write_text("not a task's log\n")
    assert _shown(layout) == ["[worker:0] hello"]


@pytest.fixture
def follower() -> Iterator[tuple[ThreadPoolExecutor, threading.Event]]:
    """A thread to follow in, and the event that stops it whatever happens to the test."""
    stop = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        try:
            yield pool, stop
        finally:
            stop.set()


def _follow(
    pool: ThreadPoolExecutor, stop: threading.Event, layout: RunLayout, screen: Screen, **options: object
) -> Future[int]:
    return pool.submit(
        show_logs,
        layout.run_dir,
        screen,
        follow=True,
        poll_s=FAST_POLL_S,
        stop=stop,
        **options,  # type: ignore[arg-type]
    )


def test_follow_prints_new_lines_into_the_next_attempt_and_ends_with_the_summary(
    tmp_path: Path, follower: tuple[ThreadPoolExecutor, threading.Event]
) -> None:
    layout = _layout(tmp_path)
    _status(layout, 0)
    _log(layout, 0, "worker:0", "one\n")
    _log(layout, 0, "worker:1", "half")
    screen = Screen()
    done = _follow(*follower, layout, screen)
    screen.wait_for("[worker:0] one\n")
    _log(layout, 0, "worker:0", "two\n")
    screen.wait_for("[worker:0] two\n")
    _log(layout, 0, "worker:1", " a line\n")
    screen.wait_for("[worker:1] half a line\n")
    _log(layout, 0, "worker:1", "said just before the restart\n")
    _log(layout, 0, "worker:0", "cut short by the restart")
    _log(layout, 1, "worker:0", "again\n")
    _status(layout, 1)
    screen.wait_for("[worker:0] again\n")
    _log(layout, 1, "worker:1", "late to start\n")
    screen.wait_for("[worker:1] late to start\n")
    assert not done.done()
    _log(layout, 1, "worker:1", "last words\n")
    _summary(layout)
    assert done.result(timeout=WAIT_S) == exit_codes.SUCCEEDED
    lines = screen.text().splitlines()
    restart = lines.index("[launch] attempt 1")
    assert sorted(lines[:restart]) == sorted(
        [
            "[worker:0] one",
            "[worker:0] two",
            "[worker:1] half a line",
            "[worker:1] said just before the restart",
            "[worker:0] cut short by the restart",
        ]
    )
    assert lines[restart + 1 :] == ["[worker:0] again", "[worker:1] late to start", "[worker:1] last words"]


def test_follow_ends_when_the_launcher_is_gone(
    tmp_path: Path, follower: tuple[ThreadPoolExecutor, threading.Event]
) -> None:
    layout = _layout(tmp_path)
    _status(layout, 0)
    _log(layout, 0, "worker:0", "one\n")
    screen = Screen()
    done = _follow(*follower, layout, screen, tasks=["worker:0"])
    screen.wait_for("[worker:0] one\n")
    _log(layout, 0, "worker:0", "killed mid-")
    _status(layout, 0, started=1.0)  # the pid is no longer the launcher's: it was killed
    assert done.result(timeout=WAIT_S) == exit_codes.SUCCEEDED
    assert screen.text() == "[worker:0] one\n[worker:0] killed mid-\n"


def test_follow_of_a_run_that_has_ended_prints_it_all_and_returns(two_attempts: RunLayout) -> None:
    out = io.StringIO()
    assert show_logs(two_attempts.run_dir, out, follow=True, attempt=0, poll_s=FAST_POLL_S) == exit_codes.SUCCEEDED
    assert out.getvalue().splitlines() == [
        "[worker:0] first try",
        "[worker:1] died",
        "[launch] attempt 1",
        *_shown(two_attempts),
    ]


def test_follow_waits_for_the_first_attempt_of_a_run_just_launched(
    tmp_path: Path, follower: tuple[ThreadPoolExecutor, threading.Event]
) -> None:
    layout = _layout(tmp_path)
    _status(layout, 0)
    screen = Screen()
    done = _follow(*follower, layout, screen)
    _log(layout, 0, "worker:0", "first\n")
    screen.wait_for("[worker:0] first\n")
    follower[1].set()  # what Ctrl-C is to the command line: stop following
    assert done.result(timeout=WAIT_S) == exit_codes.SUCCEEDED


def test_a_line_longer_than_the_consoles_limit_is_shown_cut_and_reading_stays_linear(tmp_path: Path) -> None:
    from worker.contract import CUT_MARKER, MAX_LINE_BYTES

    layout = _layout(tmp_path)
    _log(layout, 0, "worker:0", "first\n" + "x" * (40 * MAX_LINE_BYTES) + "\nnext\n")
    (Path(layout.run_dir) / "summary.json").write_text(json.dumps({"state": "failed", "attempts": []}))
    screen = Screen()
    show_logs(layout.run_dir, screen)
    lines = screen.text().splitlines()
    assert lines[0] == "[worker:0] first" and lines[-1] == "[worker:0] next", lines[-1][:80]
    assert lines[1].endswith(CUT_MARKER) and len(lines) == 3


def test_a_task_log_is_made_at_its_first_write_and_never_for_a_task_that_wrote_nothing(tmp_path: Path) -> None:
    from launcher.transport.session import RedactedLog

    made: list[Path] = []

    def opener(path: Path) -> Callable[[], BinaryIO]:
        def make() -> BinaryIO:
            made.append(path)
            return open(path, "ab")

        return make

    silent = RedactedLog(opener(tmp_path / "worker-1.log"))
    silent.close()
    speaking = RedactedLog(opener(tmp_path / "worker-0.log"))
    assert speaking.write(b"one\n") is None and speaking.write(b"two\n") is None
    speaking.close()
    assert made == [tmp_path / "worker-0.log"]  # made once, at the first write
    assert (tmp_path / "worker-0.log").read_text() == "one\ntwo\n" and not (tmp_path / "worker-1.log").exists()
    assert speaking.write(b"late\n") is None and made == [tmp_path / "worker-0.log"]  # closed: not made again


def test_a_task_of_an_ended_attempt_that_printed_nothing_is_known_from_the_summary(tmp_path: Path) -> None:
    layout = RunLayout(str(tmp_path))
    for attempt in (0, 1):
        os.makedirs(layout.attempt_dir(attempt))
        with open(layout.log_file(attempt, task_stem("worker:0")), "w") as log:
            log.write(f"attempt {attempt}\n")
    tasks = [{"name": "worker:0"}, {"name": "worker:1"}, {"name": "../evil"}, {"name": 7}]
    summary = {"attempts": [{"attempt": n, "tasks": tasks} for n in (0, 1)]}
    with open(layout.summary_file, "w") as file:
        json.dump(summary, file)
    out, notes = io.StringIO(), io.StringIO()
    assert show_logs(str(tmp_path), out, tasks=["worker:1"], attempt=0, notes=notes) == exit_codes.SUCCEEDED
    assert out.getvalue() == "" and notes.getvalue() == "[launch] worker:1 has printed nothing in attempt 0\n"
    out, notes = io.StringIO(), io.StringIO()
    assert show_logs(str(tmp_path), out, notes=notes) == exit_codes.SUCCEEDED
    assert out.getvalue() == "[worker:0] attempt 1\n"
    assert "worker:1 has printed nothing in attempt 1" in notes.getvalue()
    with pytest.raises(UsageError, match="its tasks: worker:0, worker:1"):
        show_logs(str(tmp_path), io.StringIO(), tasks=["worker:7"])


def test_a_task_of_an_attempt_no_file_lists_yet_is_taken_by_its_name(tmp_path: Path) -> None:
    """Just after a launch (or a restart) made its attempt's directory, before status.json names its
    tasks, `--task worker:3` is taken as it is: the task may simply not have printed yet."""
    layout = _layout(tmp_path)
    _log(layout, 0, "worker:0", "old\n")
    _status(layout, 0, tasks=("worker:0",))
    os.makedirs(layout.attempt_dir(1))
    notes = io.StringIO()
    assert show_logs(layout.run_dir, io.StringIO(), tasks=["worker:3"], notes=notes) == exit_codes.SUCCEEDED
    assert notes.getvalue() == "[launch] no log of worker:3 in attempt 1: nothing printed there, or no such task\n"
    with pytest.raises(UsageError, match="no task worker in attempt 1"):
        show_logs(layout.run_dir, io.StringIO(), tasks=["worker"])
    with pytest.raises(UsageError, match="no task worker:3 in attempt 0; its tasks: worker:0"):
        show_logs(layout.run_dir, io.StringIO(), tasks=["worker:3"], attempt=0)


@pytest.mark.parametrize("empty", ["", ",", " , ", "\t", "\n", "\r", "\v", " ,\t", "\xa0"])
def test_an_empty_task_is_refused_not_taken_for_every_task(two_attempts: RunLayout, empty: str) -> None:
    """`--task "$TASK"` with TASK unset would otherwise print every task's log."""
    out = io.StringIO()
    with pytest.raises(UsageError, match="Got an empty --task") as refused:
        show_logs(two_attempts.run_dir, out, tasks=["worker:0", empty])
    assert refused.value.exit_code == exit_codes.USAGE and out.getvalue() == ""


def test_a_task_name_with_escapes_is_quoted_as_given_not_shown_as_a_real_one(two_attempts: RunLayout) -> None:
    """`worker:0` followed by an escape would read as `worker:0` once the escape is dropped: the message
    then contradicted itself ("no task worker:0 ...; its tasks: worker:0, ...")."""
    for given, quoted in [("worker:0\x1b[2J", r"'worker:0\x1b[2J'"), ("worker:\u202e0", r"'worker:\u202e0'")]:
        with pytest.raises(UsageError) as refused:
            show_logs(two_attempts.run_dir, io.StringIO(), tasks=[given], attempt=0)
        assert f"no task {quoted} in attempt 0" in str(refused.value) and "\x1b" not in str(refused.value)
    with pytest.raises(UsageError) as refused:
        show_logs(two_attempts.run_dir, io.StringIO(), tasks=["x" * 100_000], attempt=0)
    assert len(str(refused.value)) < 600
