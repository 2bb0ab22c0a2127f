"""What a person sees while a run goes on, and the status file `launch status` reads.

Plain mode (a pipe, a file, CI): every task line prefixed with its task, `[worker:1] ...`.
Live mode (a terminal): a compact table per task (state, attempt, step, steps/s, last line)
redrawn in place at most a few times a second; the launcher's notices still scroll above it.
Either way `<run dir>/status.json` is refreshed about once a second.
This module only renders; it never starts or stops anything.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from launcher.gang import GangStatus
from launcher.masking import printable
from launcher.plan import TaskLaunch
from launcher.private_files import open_private
from worker.contract import CONTINUED, DONE, JOINED, PROGRESS_EVENTS, STOPPED

_REDRAW_S = 0.25
_STATUS_FILE_S = 1.0


@dataclass
class TaskView:
    label: str
    state: str = "starting"
    step: int | None = None
    rate: float | None = None
    last_line: str = ""
    _last_step: tuple[float, int] | None = field(default=None, repr=False)

    def new_attempt(self) -> None:
        self.state, self.rate, self._last_step = "starting", None, None

    def saw_step(self, step: int, now: float) -> None:
        if self._last_step is not None and step > self._last_step[1] and now > self._last_step[0]:
            self.rate = (step - self._last_step[1]) / (now - self._last_step[0])
        self._last_step = (now, step)
        self.step = step


class Console:
    """Renders task output and notices; `live` selects the in-place table."""

    def __init__(
        self, quiet: bool = False, live: bool = False, out: TextIO = sys.stdout, err: TextIO = sys.stderr
    ) -> None:
        self.quiet = quiet
        self.live = live and not quiet
        self._out, self._err = out, err
        self._views: dict[str, TaskView] = {}
        self._status: Callable[[], GangStatus | None] | None = None
        self._status_path: str | None = None
        self._drawn_lines = 0
        self._last_draw = 0.0
        self._last_status_write = 0.0
        self._attempt = 0
        self._started: float | None = None

    def attach(self, status: Callable[[], GangStatus | None], status_path: str) -> None:
        self._status = status
        self._status_path = status_path

    # ---- callbacks from the supervisor ---------------------------------------------------

    def output(self, launch: TaskLaunch, line: str) -> None:
        line = printable(line)  # the log file keeps the bytes; the screen gets text
        self._view(launch).last_line = line
        if not self.quiet and not self.live:
            self._out.write(f"[{launch.label}] {line}\n")

    def report(self, launch: TaskLaunch, data: dict[str, Any]) -> None:
        view = self._view(launch)
        kind = data.get("event")
        if kind == JOINED:
            view.state = "running"
        elif kind == STOPPED:
            view.state = "stopped (SIGSTOP?)"
        elif kind == CONTINUED:
            view.state = "running" if view.step is not None else "starting"
        elif kind in PROGRESS_EVENTS and isinstance(data.get("step"), int):
            view.saw_step(data["step"], time.monotonic())
            if kind == DONE:
                view.state = "done"

    def notice(self, text: str) -> None:
        self._clear()
        self._err.write(f"[launch] {text}\n")
        self._err.flush()
        self._redraw(force=True)

    def flush(self) -> None:
        """Called whenever the supervisor has handled every queued event."""
        if self.live:
            self._redraw()
        else:
            self._out.flush()
        self._write_status_file()

    def close(self) -> None:
        if self.live:
            self._redraw(force=True)
            self._drawn_lines = 0  # leave the final table on screen
            self.live = False  # what follows (the verdict) prints below it
        self._write_status_file(force=True)

    # ---- rendering -------------------------------------------------------------------------

    def _view(self, launch: TaskLaunch) -> TaskView:
        view = self._views.get(launch.name)
        if view is None:
            view = self._views[launch.name] = TaskView(launch.label)
        return view

    def _sync_states(self) -> GangStatus | None:
        if self._status is None:
            return None
        status = self._status()
        if status is None:  # no attempt has started yet
            return None
        if status.attempt != self._attempt:  # a new attempt: fresh rows
            self._attempt = status.attempt
            for view in self._views.values():
                view.new_attempt()
        for task in status.tasks:
            row = self._views.get(task.name)
            if row is None:
                continue
            if task.exit is not None:
                row.state = "exited 0" if task.exit.ok else task.exit.describe()
            elif task.joined and row.state == "starting":
                row.state = "running"
        return status

    def rows(self) -> list[str]:
        status = self._sync_states()
        width = shutil.get_terminal_size((100, 20)).columns
        width = width if width >= 60 else 120  # an unsized terminal (some ptys) reports 0
        attempt = status.attempt if status else self._attempt
        header = f"{'task':<22} {'state':<18} {'attempt':>7} {'step':>9} {'steps/s':>8}  last line"
        lines = [header[:width]]
        for view in self._views.values():
            step = "" if view.step is None else str(view.step)
            rate = "" if view.rate is None else f"{view.rate:.1f}"
            line = f"{view.label:<22} {view.state[:18]:<18} {attempt:>7} {step:>9} {rate:>8}  {view.last_line}"
            lines.append(line[:width])
        return lines

    def _clear(self) -> None:
        if self.live and self._drawn_lines:
            self._out.write(f"\x1b[{self._drawn_lines}F\x1b[J")
            self._drawn_lines = 0

    def _redraw(self, force: bool = False) -> None:
        if not self.live or (not force and time.monotonic() - self._last_draw < _REDRAW_S):
            return
        self._last_draw = time.monotonic()
        rows = self.rows()
        self._clear()
        self._out.write("\n".join(rows) + "\n")
        self._out.flush()
        self._drawn_lines = len(rows)

    def _launcher_started(self) -> float:
        """With the pid, tells `launch status` whether this launcher still runs (pids get reused)."""
        if self._started is None:
            import psutil

            self._started = psutil.Process().create_time()
        return self._started

    def _write_status_file(self, force: bool = False) -> None:
        if self._status_path is None or (not force and time.monotonic() - self._last_status_write < _STATUS_FILE_S):
            return
        self._last_status_write = time.monotonic()
        status = self._sync_states()
        data = {
            "launcher_pid": os.getpid(),
            "launcher_started": self._launcher_started(),
            "updated": time.time(),
            "attempt": status.attempt if status else self._attempt,
            "restarts": status.restarts if status else 0,
            "spares": {"ready": status.spares[0], "standing_by": status.spares[1]} if status else None,
            "tasks": [
                {
                    "task": v.label,
                    "state": v.state,
                    "step": v.step,
                    "steps_per_s": v.rate,
                    "last_line": v.last_line[-300:],
                }
                for v in self._views.values()
            ],
        }
        tmp = f"{self._status_path}.tmp"
        try:
            with open_private(tmp, "w", encoding="utf-8") as handle:
                json.dump(data, handle, indent=2)
            os.replace(tmp, self._status_path)
        except OSError:  # the run directory vanished; the console output still tells
            pass
