"""`launch logs RUN [-f] [--task T] [--attempt N]`: print the task logs a run directory keeps.

Every attempt keeps one log file per task that printed (`RunLayout.log_file`); this prints one
attempt's (the latest unless told), each line prefixed with its task as the launcher's plain output does
(`[worker:1] ...`) and stripped of terminal control sequences. With `follow` it keeps polling the
files, moves on into the next attempt when a restart creates its directory, and returns once the
run has ended: summary.json was (re)written after following began, or the launcher that writes
status.json is gone. Only reads files: never signals, starts or writes anything but `out`.
A KeyboardInterrupt (Ctrl-C) propagates to the caller, with every file closed.
"""

from __future__ import annotations

import os
import re
import stat
import threading
from collections.abc import Collection, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import BinaryIO, TextIO

from launcher.common import exit_codes
from launcher.common.errors import UsageError
from launcher.common.masking import redact
from launcher.common.printable import printable
from launcher.rundir.lock import is_run_dir
from launcher.rundir.status import RunStatusError, launcher_process, no_run_files, not_a_run_dir, read_run
from worker.contract import CUT_MARKER, MAX_LINE_BYTES, RunLayout, task_stem

__all__ = ["POLL_S", "attempts_of", "pick_attempt", "pick_tasks", "show_logs", "task_logs"]

POLL_S = 0.2  # a file follower: cheap stats, and new lines show up about as soon as they are written
_CHUNK = 1 << 16
_LOG_SUFFIX = ".log"
_TASK_NAME = re.compile(r"[a-z][a-z_]{0,31}:[0-9]{1,9}")  # chief:0, worker:12: nothing a screen would act on


def attempts_of(layout: RunLayout) -> list[int]:
    """The attempt numbers that have a directory in the run, in order."""
    try:
        names = os.listdir(layout.run_dir)
    except (FileNotFoundError, NotADirectoryError):
        raise UsageError(not_a_run_dir(layout.run_dir)) from None
    numbers = (RunLayout.attempt_of(name) for name in names)
    return sorted(n for n in numbers if n is not None and os.path.isdir(layout.attempt_dir(n)))


def pick_attempt(run_dir: str, attempts: Sequence[int], wanted: int | None) -> int:
    """The attempt `wanted` names: the latest when None, counted from the end when negative (-1 is
    the latest). UsageError naming the attempts there are when it names none of them."""
    if not attempts:
        # a launch on its way has an empty directory, or its lock; files of another kind are no run's
        if os.listdir(run_dir) and not is_run_dir(run_dir) and not os.path.exists(RunLayout(run_dir).lock_file):
            raise UsageError(no_run_files(run_dir))
        raise UsageError(f"{run_dir}: no attempt has started yet (no attempt-N directory); nothing logged so far.")
    if wanted is None:
        return attempts[-1]
    if wanted < 0 and -wanted <= len(attempts):
        return attempts[wanted]
    if wanted in attempts:
        return wanted
    raise UsageError(
        f"{run_dir}: no attempt {wanted}; it has attempt(s) {', '.join(map(str, attempts))} "
        f"(or count from the end: -1 is the latest)."
    )


def _task_of(stem: str) -> str | None:
    """The task whose log file stem this is (`worker-1` -> `worker:1`), or None for any other file."""
    kind, _, index = stem.rpartition("-")
    name = f"{kind}:{index}"
    return name if _TASK_NAME.fullmatch(name) and task_stem(name) == stem else None


def task_order(name: str) -> tuple[bool, str, int]:
    kind, _, index = name.rpartition(":")
    return kind != "chief", kind, int(index) if index.isdigit() else -1


def task_logs(layout: RunLayout, attempt: int) -> dict[str, str]:
    """Every task's log file in one attempt: {task: path}, chief first, then by type and index."""
    try:
        names = os.listdir(layout.attempt_dir(attempt))
    except FileNotFoundError:  # a run set aside (--fresh) while we read it: nothing logged here now
        return {}
    found = [task for name in names if name.endswith(_LOG_SUFFIX) and (task := _task_of(name[: -len(_LOG_SUFFIX)]))]
    return {task: layout.log_file(attempt, task_stem(task)) for task in sorted(found, key=task_order)}


def as_given(name: str) -> str:
    """A task name the user gave, as a message may quote it, cut to 80 characters: one holding an escape or
    an invisible character quoted with them spelt out (so `worker:0` and `worker:0\\x1b[2J` never read alike)."""
    shown = name if name.isprintable() else repr(name)
    return shown if len(shown) <= 80 else shown[:77] + "..."


def pick_tasks(
    run_dir: str, attempt: int, known: Sequence[str], wanted: Sequence[str], listed: bool = True
) -> frozenset[str] | None:
    """The tasks `wanted` names (each item may list several, comma-separated), or None for every task.
    UsageError naming the tasks there are when one is not among `known`; when the run's files do not
    list the attempt's tasks yet (`listed` false: it started a moment ago), any task name is taken."""
    if any(not item.replace(",", " ").strip() for item in wanted):  # `--task "$T"`, T unset: no task, not all
        raise UsageError("Got an empty --task: give a task as type:index, e.g. --task worker:1, or leave the flag out.")
    names = [name.strip() for item in wanted for name in item.split(",") if name.strip()]
    if not names:  # no --task: every task
        return None
    unknown = [name for name in names if name not in known and (listed or not _TASK_NAME.fullmatch(name))]
    if unknown:
        there = ", ".join(sorted(known, key=task_order)) or "none logged yet"
        given = ", ".join(map(as_given, unknown))
        raise UsageError(
            f"{printable(run_dir)}: no task {given} in attempt {attempt}; its tasks: {there}. "
            "Give --task as type:index, e.g. --task worker:1 (repeat it, or separate tasks with commas)."
        )
    return frozenset(names)


@dataclass
class _Tail:
    """Reads one log file from where it stopped last time; hands back whole lines only, until `flush`."""

    task: str
    path: str
    handle: BinaryIO | None = None
    pending: bytes = field(default=b"")
    refused: bool = False
    cutting: bool = False  # inside a line already shown cut: the rest of it, up to its newline, is skipped

    def lines(self, stack: ExitStack) -> Iterator[str]:
        if self.refused:
            return
        if self.handle is None:
            try:
                fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except FileNotFoundError:  # listed, then moved aside (--fresh); nothing more comes from it
                return
            except OSError:  # a symbolic link planted as a log: never followed
                self.pending, self.refused = f"(not shown: {self.path} is not a regular file)".encode(), True
                return
            handle = stack.enter_context(open(fd, "rb"))
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO would block the follower forever
                self.pending, self.refused = f"(not shown: {self.path} is not a regular file)".encode(), True
                return
            self.handle = handle
        while chunk := self.handle.read(_CHUNK):
            data = self.pending + chunk
            if self.cutting:  # the rest of a line already shown cut: skipped up to its newline
                end = data.find(b"\n")
                if end < 0:
                    self.pending = b""
                    continue
                data, self.cutting = data[end + 1 :], False
            *whole, self.pending = data.split(b"\n")
            yield from (_text(line) for line in whole)
            if len(self.pending) > MAX_LINE_BYTES:  # shown cut, as the console shows it; linear in any file
                yield _text(self.pending[:MAX_LINE_BYTES]) + CUT_MARKER
                self.pending, self.cutting = b"", True

    def flush(self) -> Iterator[str]:
        """The last line when the file does not end with a newline (the task died mid-line)."""
        if self.pending:
            line, self.pending = self.pending, b""
            yield _text(line)


def _text(line: bytes) -> str:
    return printable(redact(line.decode("utf-8", "replace")))


@dataclass
class _Printer:
    out: TextIO
    layout: RunLayout
    only: frozenset[str] | None
    stack: ExitStack
    tails: dict[str, _Tail] = field(default_factory=dict)

    def read(self, attempt: int, final: bool = False) -> None:
        """Print what is new in every chosen task's log of `attempt`; `final` also prints unfinished lines."""
        for task, path in task_logs(self.layout, attempt).items():
            if self.only is None or task in self.only:
                self.tails.setdefault(path, _Tail(task, path))
        for tail in self.tails.values():
            for line in tail.lines(self.stack):
                self.out.write(f"[{tail.task}] {line}\n")
            if final:
                for line in tail.flush():
                    self.out.write(f"[{tail.task}] {line}\n")
        self.out.flush()

    def close_attempt(self) -> None:
        for tail in self.tails.values():
            if tail.handle is not None:
                tail.handle.close()
        self.tails.clear()


def _summary_mark(layout: RunLayout) -> tuple[int, int] | None:
    """Which summary.json is there (the launcher replaces it whole, so a new one is a new inode)."""
    try:
        info = os.stat(layout.summary_file)
    except (FileNotFoundError, NotADirectoryError):  # none yet, or the run directory was replaced by a file
        return None
    return info.st_ino, info.st_mtime_ns


def _run_ended(layout: RunLayout, summary_at_start: tuple[int, int] | None) -> bool:
    """Whether nothing more will be logged: a summary written since we began, or no live launcher."""
    mark = _summary_mark(layout)
    if mark is not None and mark != summary_at_start:
        return True
    try:
        status = read_run(layout.run_dir).status
    except RunStatusError:  # the directory went away (set aside by --fresh) or holds a file not ours
        return True
    return status is None or launcher_process(status) is None


def show_logs(
    run_dir: str,
    out: TextIO,
    *,
    follow: bool = False,
    tasks: Sequence[str] = (),
    attempt: int | None = None,
    poll_s: float = POLL_S,
    stop: threading.Event | None = None,
    notes: TextIO | None = None,
) -> int:
    """Print one attempt's task logs to `out`, `[task] line` by line; with `follow`, keep printing
    what is written, into later attempts, until the run ends (or `stop` is set). Returns the exit code.
    UsageError when the run has no such attempt or task (the message lists those it has). `notes` is
    told which of the tasks shown printed nothing (they have no log file)."""
    layout = RunLayout(run_dir)
    attempts = attempts_of(layout)  # first: it says what is wrong with a run directory that is not one
    summary_at_start = _summary_mark(layout)
    wake = stop if stop is not None else threading.Event()
    if follow and not attempts:  # launched moments ago: its first attempt is on its way
        while not attempts and not _run_ended(layout, summary_at_start):
            if wake.wait(poll_s):
                return exit_codes.SUCCEEDED
            attempts = attempts_of(layout)
    current = pick_attempt(run_dir, attempts, attempt)
    # no file lists the tasks of an attempt a launch made a moment ago, nor those of an earlier launch's
    listed, named = _tasks_of_attempt(layout, current)
    known = set(task_logs(layout, current)) | named
    only = pick_tasks(run_dir, current, sorted(known), tasks, listed)
    with ExitStack() as stack:
        printer = _Printer(out, layout, only, stack)
        if not follow:
            printer.read(current, final=True)
            _say_silent(notes, layout, current, only or known, listed)
            return exit_codes.SUCCEEDED
        while True:
            ended = _run_ended(layout, summary_at_start)  # before reading: lines written before the end are read
            later = [n for n in attempts_of(layout) if n > current]
            printer.read(current, final=bool(later) or ended)
            if later:
                printer.close_attempt()
                current = later[0]
                out.write(f"[launch] attempt {current}\n")
                continue
            if ended:
                listed, named = _tasks_of_attempt(layout, current)
                _say_silent(notes, layout, current, only or named, listed)
                return exit_codes.SUCCEEDED
            if wake.wait(poll_s):
                return exit_codes.SUCCEEDED


def _tasks_of_attempt(layout: RunLayout, attempt: int) -> tuple[bool, set[str]]:
    """Whether status.json (the attempt running) or summary.json (one that ended) lists the tasks of
    `attempt`, and those it names: a task has no log file until it prints its first line."""
    known: set[str] = set()
    try:
        run = read_run(layout.run_dir)
    except RunStatusError:  # a file cut short by a crash: the logs are still worth showing
        return False, known
    listed = run.status is not None and run.status.attempt == attempt
    if listed and run.status is not None:
        names = (str(entry["task"]).partition("@")[0] for entry in run.status.tasks)
        known.update(name for name in names if _TASK_NAME.fullmatch(name))
    attempts = run.summary.get("attempts") if isinstance(run.summary, dict) else None
    for entry in attempts if isinstance(attempts, list) else []:
        if isinstance(entry, dict) and entry.get("attempt") == attempt and isinstance(entry.get("tasks"), list):
            listed = True
            given = (task.get("name") for task in entry["tasks"] if isinstance(task, dict))
            known.update(name for name in given if isinstance(name, str) and _TASK_NAME.fullmatch(name))
    return listed, known


def _say_silent(
    notes: TextIO | None, layout: RunLayout, attempt: int, chosen: Collection[str], listed: bool = True
) -> None:
    """Name the chosen tasks that have no log file in `attempt`, in one line: they printed nothing, or
    (where no file lists the attempt's tasks) perhaps never ran there."""
    logged = task_logs(layout, attempt)
    silent = sorted((task for task in chosen if task not in logged), key=task_order)
    if notes is None or not silent:
        return
    names = printable(", ".join(silent[:3])) + (f" and {len(silent) - 3} more" if len(silent) > 3 else "")
    if listed:
        verb = "has" if len(silent) == 1 else "have"
        notes.write(f"[launch] {names} {verb} printed nothing in attempt {attempt}\n")
    else:
        notes.write(f"[launch] no log of {names} in attempt {attempt}: nothing printed there, or no such task\n")
