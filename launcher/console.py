"""What a person sees while a run goes on, and the status file `launch status` reads.

Plain mode (a pipe, a file, CI): every task line prefixed with its task, `[worker:1] ...`.
Live mode (a terminal): a table drawn by `rich`, one row per task (state, attempt, step/total,
steps/s, ETA, loss, CPU and memory as its agent samples them, last line), redrawn in place at most
a few times a second; the launcher's notices scroll above it. Either way `<run dir>/status.json` is
refreshed about once a second.
TensorFlow's known-harmless start-up lines (launcher.common.benign_lines) stay out of the console and
of the last-line column unless `verbose`; `show` names the only tasks whose lines are echoed.
Every task keeps its full log either way. This module only renders; it never starts or stops
anything.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any, TextIO

from launcher.common import json_lines, task_states
from launcher.common.benign_lines import is_benign, is_shutdown_noise, opens_stragglers
from launcher.common.durations import duration_text
from launcher.common.printable import printable
from launcher.common.usage_text import USAGE_KEYS, number, usage_text
from launcher.plan import TaskLaunch
from launcher.supervise.gang import GangStatus
from worker.contract import CONTINUED, DONE, IMPORTED, JOINED, PROGRESS_EVENTS, STARTING, STOPPED, USAGE
from worker.files import write_atomic

_REDRAW_S = 0.25
_STATE_WIDTH = 30  # a longer state (a kill's OOM note) is cut in the table; `launch status` has it whole
_LAST_LINE_MIN = 12  # the task's last line keeps this much before a column is dropped for it
_DROPPED_FIRST = ("attempt", "mem", "ETA", "cpu", "steps/s", "loss")  # the attempt is in the title too
_STATUS_FILE_S = 1.0
_LAST_LINE_KEPT = 300
_QUIET_S = 10.0  # a running task without a step for this long (and five step times) shows it
_HELD_LINES = 500  # shutdown noise held back after a task finished: at most this many are shown should it fail


@dataclass
class TaskView:
    label: str
    state: str = task_states.STARTING
    step: int | None = None
    total: int | None = None
    loss: float | None = None
    rate: float | None = None
    last_line: str = ""
    stragglers: bool = False  # inside a healthy join's "Example stragglers:" list of task names
    in_shutdown_noise: bool = False  # its last line was held back as shutdown noise (see Console.output)
    usage: dict[str, float | None] = field(default_factory=dict)  # the agent's last sample: cpu, rss, gpu, gpu_mem
    milestone: str | None = None  # the last start-up milestone it reported (imported, ...)
    _last_step: tuple[float, int] | None = field(default=None, repr=False)

    def new_attempt(self) -> None:
        self.state, self.rate, self._last_step, self.usage = task_states.STARTING, None, None, {}
        self.milestone = None

    def shown(self, now: float) -> tuple[str, float | None, float | None]:
        """(state, steps/s, ETA) as the table and status.json show them now: a task that made no step for
        longer than _QUIET_S and five of its step times says so, with neither a rate nor an ETA (they are
        stale); one starting says how far it got."""
        quiet = now - self._last_step[0] if self._last_step is not None else None
        if self.state == task_states.RUNNING and quiet is not None and quiet >= max(_QUIET_S, 5 / (self.rate or 1)):
            return f"{task_states.RUNNING}, no step for {quiet:.0f}s", None, None
        if self.state == task_states.STARTING and self.milestone:
            return f"{task_states.STARTING} ({self.milestone})", self.rate, self.eta_s
        return self.state, self.rate, self.eta_s

    def saw_usage(self, data: dict[str, Any]) -> None:
        """The agent's sample (launcher/agent/usage.py): numbers only, never a task's say."""
        self.usage = {key: number(data.get(key)) for key in USAGE_KEYS}

    def saw_step(self, step: int, now: float) -> None:
        if self._last_step is not None and step > self._last_step[1] and now > self._last_step[0]:
            self.rate = (step - self._last_step[1]) / (now - self._last_step[0])
        self._last_step = (now, step)
        self.step = step

    def saw_fields(self, data: dict[str, Any]) -> None:
        """A step event may carry `total` (the run's last step) and `loss`; both are optional."""
        total, loss = data.get("total"), data.get("loss")
        if isinstance(total, int) and not isinstance(total, bool) and total > 0:
            self.total = total
        if isinstance(loss, (int, float)) and not isinstance(loss, bool) and math.isfinite(loss):
            self.loss = float(loss)

    @property
    def eta_s(self) -> float | None:
        if self.total is None or self.step is None or not self.rate or self.step >= self.total:
            return None
        return (self.total - self.step) / self.rate


_TYPE_ORDER = {"chief": 0, "worker": 1, "evaluator": 2}


def own_create_time() -> float:
    """When this process started, as psutil's `create_time()` says it (`launch status` compares the
    two), read from /proc without importing psutil on the launch's own path."""
    try:
        with open("/proc/self/stat", encoding="ascii") as handle:
            ticks = int(handle.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat", encoding="ascii") as handle:
            booted = next(int(line.split()[1]) for line in handle if line.startswith("btime "))
        return ticks / os.sysconf("SC_CLK_TCK") + booted
    except (OSError, ValueError, IndexError, StopIteration):  # no /proc as Linux has it
        import psutil

        return float(psutil.Process().create_time())


def _task_order(view: TaskView) -> tuple[int, str, int, str]:
    """`worker:10@host` after `worker:2`: by type, then index as a number."""
    name, _, host = view.label.partition("@")
    task_type, _, index = name.partition(":")
    return (_TYPE_ORDER.get(task_type, 3), task_type, int(index) if index.isdigit() else -1, host)


def discard(stream: TextIO) -> None:
    """Send what is still buffered for `stream`, and all written to it later, to /dev/null, so that
    nothing raises again (its reader left, its disk is full)."""
    try:
        fd = stream.fileno()
    except (OSError, ValueError, AttributeError):  # not a file (a StringIO): nothing more to write there
        return
    try:
        null = os.open(os.devnull, os.O_WRONLY)
    except OSError:  # no descriptor left (EMFILE), or no /dev/null: the writes keep failing, caught
        return
    try:
        os.dup2(null, fd)
    except OSError:
        pass
    finally:
        os.close(null)


class Console:
    """Renders task output and notices; `live` selects the in-place table."""

    def __init__(
        self,
        quiet: bool = False,
        live: bool = False,
        out: TextIO = sys.stdout,
        err: TextIO = sys.stderr,
        verbose: bool = False,
        show: Collection[str] = (),
        owns_streams: bool = True,
    ) -> None:
        """`owns_streams`: the streams are the process's own (the command line), which may send an
        unwritable one to /dev/null; a caller's (the Python API) are only left alone."""
        self.quiet = quiet
        self._owns_streams = owns_streams
        self.live = live and not quiet
        self.verbose = verbose
        self.show = frozenset(show)  # task names (worker:1) whose lines are echoed; empty: every task
        self._out, self._err = out, err
        self._views: dict[str, TaskView] = {}
        self._status: Callable[[], GangStatus | None] | None = None
        self._status_path: str | None = None
        self._last_draw = 0.0
        self._last_status_write = 0.0
        self._attempt = 0
        self._restarts = 0
        self._restart_at: float | None = None  # backing off: when every task starts again (wall clock)
        self._started: float | None = None
        self._attached_at: float | None = None
        self._live: Any = None  # rich.live.Live while the table is on screen
        self._held: list[tuple[TaskLaunch, str]] = []  # shutdown noise after a task finished (see output)

    def attach(
        self, status: Callable[[], GangStatus | None], status_path: str, tasks: Collection[TaskLaunch] = ()
    ) -> None:
        """Called once the run is ours (its lock taken): a summary written since is this launch's. `tasks`
        get their rows at once (a task that has said nothing yet is listed too)."""
        self._status = status
        self._status_path = status_path
        self._attached_at = time.time()
        for launch in tasks:
            self._view(launch)

    def wait(self, seconds: float) -> None:
        """Sleep `seconds` (a restart's backoff) while the table and status.json keep being updated."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, _STATUS_FILE_S / 2))
            self.flush()

    # ---- callbacks from the supervisor ---------------------------------------------------

    def echoes(self, launch: TaskLaunch, line: str) -> bool:
        """Whether `output` writes this line of this task to the screen."""
        return self._shown(launch) and (self.verbose or not self._benign(launch, line))

    def _benign(self, launch: TaskLaunch, line: str) -> bool:
        """A known-harmless line, or a task name listed after a healthy join's "Example stragglers:"."""
        view = self._views.get(launch.name)
        return is_benign(line) or (view is not None and view.stragglers and opens_stragglers(line, True))

    def _shown(self, launch: TaskLaunch) -> bool:
        return not self.quiet and not self.live and (not self.show or launch.name in self.show)

    def output(self, launch: TaskLaunch, line: str) -> None:
        view = self._view(launch)
        benign = self._benign(launch, line)
        view.stragglers = opens_stragglers(line, view.stragglers)
        if not self.verbose and benign:
            return  # kept in the task's log, which the transport writes before this is called
        view.in_shutdown_noise = not self.verbose and self._after_a_finish(line, view.in_shutdown_noise)
        if view.in_shutdown_noise and len(self._held) < _HELD_LINES:
            self._held.append((launch, line))  # shown at close only if the run does not succeed
        if view.in_shutdown_noise:
            return
        self._echo(launch, line)

    def _echo(self, launch: TaskLaunch, line: str) -> None:
        line = printable(line)  # the log file keeps the bytes; the screen gets text
        self._view(launch).last_line = line
        if self._shown(launch):
            try:
                self._out.write(f"[{launch.label}] {line}\n")
            except (OSError, ValueError) as error:  # ValueError: closed under us (a caller's own stream)
                self._reader_left(error)

    def _after_a_finish(self, line: str, continuing: bool) -> bool:
        """A line of TensorFlow's about the coordination service gone, once a task finished training (reported
        `done` or exited 0): the leader left first (tflaunch.leaving), harmless if the run succeeds."""
        if not is_shutdown_noise(line, continuing):
            return False
        finished = ("exited 0", task_states.DONE)
        if not any(v.state in finished for v in self._views.values()):
            self._sync_states()  # an exit 0 the status has and the rows not yet (rare lines: cheap enough)
        return any(v.state in finished for v in self._views.values())

    def report(self, launch: TaskLaunch, data: dict[str, Any]) -> None:
        view = self._view(launch)
        kind = data.get("event")
        if kind in (STARTING, IMPORTED):
            view.milestone = str(kind)
        if kind == JOINED:
            view.state = task_states.RUNNING
        elif kind == STOPPED:
            view.state = task_states.HELD
        elif kind == CONTINUED:
            view.state = task_states.RUNNING if view.step is not None else task_states.STARTING
        elif kind == USAGE:
            view.saw_usage(data)
        elif kind in PROGRESS_EVENTS and isinstance(data.get("step"), int):
            view.saw_step(data["step"], time.monotonic())
            view.saw_fields(data)
            if kind == DONE:
                view.state = task_states.DONE

    def notice(self, text: str) -> None:
        text = "\n".join(printable(line) for line in text.split("\n"))  # it may quote a task's error file
        if self._live is not None:  # rich prints it above the table and redraws the table below
            self._live.console.print(f"[launch] {text}", markup=False, highlight=False, soft_wrap=True)
            return
        try:
            self._err.write(f"[launch] {text}\n")
            self._err.flush()
        except (OSError, ValueError):  # nobody reads the notices either (or the disk is full, or it was closed)
            pass

    def flush(self) -> None:
        """Called whenever the supervisor has handled every queued event."""
        if self.live:
            self._redraw()
        elif not self.quiet:  # quiet: nothing was written (or it could not be: see _reader_left)
            try:
                self._out.flush()
            except (OSError, ValueError) as error:
                self._reader_left(error)
        self._write_status_file()

    def _reader_left(self, error: OSError | ValueError) -> None:
        """Standard output's reader is gone (`launch ... | head`), or it cannot be written (a full disk):
        the run goes on, as if --quiet; the tasks' output is in their logs. What is still buffered for
        it is dropped (by the command line; the Python API leaves its caller's stream as it is)."""
        self.quiet = True
        if self._owns_streams:
            discard(self._out)
        if isinstance(error, BrokenPipeError):
            why = "was closed by its reader"
        elif isinstance(error, OSError):
            why = f"cannot be written ({error.strerror})"
        else:
            why = "was closed"
        self.notice(f"standard output {why}; the run goes on, and the tasks' output is in their logs")

    def close(self, succeeded: bool = False) -> None:
        """The run is over. Shutdown lines held back after a task finished are shown now if it did not succeed."""
        held, self._held = self._held, []
        for launch, line in [] if succeeded else held:
            self._echo(launch, line)
        if self.live:
            self._redraw(force=True)
            if self._live is not None:
                self._live.stop()  # the final table stays on screen
                self._live = None
            self.live = False  # what follows (the verdict) prints below it
        self._write_status_file(force=True)

    # ---- rendering -------------------------------------------------------------------------

    def _view(self, launch: TaskLaunch) -> TaskView:
        view = self._views.get(launch.name)
        if view is None:
            view = self._views[launch.name] = TaskView(launch.label)
        view.label = launch.label  # a spare host took the task's seat: its row says where it runs now
        return view

    def _sync_states(self) -> GangStatus | None:
        if self._status is None:
            return None
        status = self._status()
        if status is None:  # no attempt has started yet
            return None
        self._restarts = status.restarts
        self._restart_at = status.restart_at
        if status.attempt != self._attempt:  # a new attempt: fresh rows
            self._attempt = status.attempt
            held, self._held = self._held, []  # the attempt before did not succeed: what was held back counts
            for launch, line in held:
                self._echo(launch, line)
            names = {task.name for task in status.tasks}
            for name in [name for name in self._views if names and name not in names]:
                del self._views[name]  # a gang that went on with fewer hosts has fewer tasks
            for view in self._views.values():
                view.new_attempt()
        for task in status.tasks:
            row = self._views.get(task.name)
            if row is None:
                continue
            if "@" in row.label and row.label != f"{task.name}@{task.host}":  # its seat went to a spare host
                row.label = f"{task.name}@{task.host}"
            if task.exit is not None:
                row.state = "exited 0" if task.exit.ok else task.exit.describe()
                row.rate = None  # no longer stepping: neither a rate nor an ETA
            elif status.stopping:
                row.state = task_states.STOPPING
            elif task.joined and row.state in (task_states.STARTING, task_states.STOPPING):
                row.state = task_states.RUNNING
        return status

    def rows(self) -> list[list[str]]:
        """The table's cells, header first: what the live view draws."""
        self._sync_states()
        measured = any(value is not None for view in self._views.values() for value in view.usage.values())
        usage = ["cpu", "mem"] if measured else []  # only once an agent sampled a task
        lines = [["task", "state", "attempt", "step", "steps/s", "ETA", "loss", *usage, "last line"]]
        now = time.monotonic()
        for view in sorted(self._views.values(), key=_task_order):  # chief, worker:0, worker:1, ..., worker:10
            step = "" if view.step is None else str(view.step)
            if view.total is not None and step:
                step = f"{step}/{view.total}"
            state, rate, eta = view.shown(now)
            lines.append(
                [
                    view.label,
                    state,
                    str(self._attempt),
                    step,
                    "" if rate is None else f"{rate:.1f}",
                    duration_text(eta),
                    "" if view.loss is None else f"{view.loss:.4g}",
                    *(usage_text(view.usage) if measured else ()),
                    view.last_line,
                ]
            )
        return lines

    def _table(self, width: int) -> Any:
        """The live table, laid out here to fit `width` columns: the task's name always shows in full;
        a long state (a kill's OOM note) is cut with an ellipsis; then the columns that matter least go
        first; the task's last line takes what is left."""
        from rich.console import Group
        from rich.text import Text

        header, *rows = self.rows()
        widest = [max(len(cells[index]) for cells in [header, *rows]) for index in range(len(header))]
        widest[1] = min(widest[1], _STATE_WIDTH)
        kept = list(range(len(header) - 1))
        for name in _DROPPED_FIRST:
            if sum(widest[i] + 2 for i in kept) <= width - _LAST_LINE_MIN:
                break
            if name in header:
                kept.remove(header.index(name))
        spare = width - _LAST_LINE_MIN - sum(widest[i] + 2 for i in kept)
        widest[1] = max(len(header[1]), widest[1] + min(spare, 0))  # still too wide: the state gives way

        def line(cells: list[str], style: str = "") -> Text:
            parts = []
            for i in kept:
                cell = cells[i] if len(cells[i]) <= widest[i] else cells[i][: widest[i] - 1] + "\u2026"
                numeric = header[i] in ("attempt", "step", "steps/s", "ETA", "loss", "cpu", "mem")
                parts.append(cell.rjust(widest[i]) if numeric else cell.ljust(widest[i]))
            text = Text("  ".join([*parts, cells[-1]]), style=style, no_wrap=True, overflow="ellipsis")
            text.truncate(width, overflow="ellipsis")
            return text  # Text: a task's line is never markup

        left = None if self._restart_at is None else max(self._restart_at - time.time(), 0.0)
        backoff = f"; restarting every task in {math.ceil(left):d}s" if left is not None else ""
        title = Text(f"attempt {self._attempt}, {self._restarts} restart(s){backoff}")
        return Group(title, line(header, "bold"), *(line(cells) for cells in rows))

    def _redraw(self, force: bool = False) -> None:
        if not self.live or (not force and time.monotonic() - self._last_draw < _REDRAW_S):
            return
        self._last_draw = time.monotonic()
        if self._live is None:
            from rich.console import Console as RichConsole
            from rich.live import Live

            screen = RichConsole(file=self._out, force_terminal=True, highlight=False)
            self._live = Live(
                self._table(screen.width),
                console=screen,
                auto_refresh=False,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.start(refresh=True)
            return
        self._live.update(self._table(self._live.console.width), refresh=True)

    def _launcher_started(self) -> float:
        """With the pid, tells `launch status` whether this launcher still runs (pids get reused)."""
        if self._started is None:
            self._started = own_create_time()
        return self._started

    def _write_status_file(self, force: bool = False) -> None:
        if self._status_path is None or (not force and time.monotonic() - self._last_status_write < _STATUS_FILE_S):
            return
        self._last_status_write = time.monotonic()
        status = self._sync_states()
        data = {
            "launcher_pid": os.getpid(),
            "launcher_started": self._launcher_started(),
            "run_since": self._attached_at,  # precise, where the create time may be a second early
            "updated": time.time(),
            "attempt": status.attempt if status else self._attempt,
            "restarts": status.restarts if status else 0,
            "stopping": status.stopping if status else False,
            "restart_at": status.restart_at if status else None,
            "spares": {"ready": status.spares[0], "standing_by": status.spares[1]} if status else None,
            "excluded_hosts": list(status.excluded) if status else [],
            "last_hang": status.last_hang if status else None,
            "tasks": [
                {
                    "task": v.label,
                    **dict(zip(("state", "steps_per_s", "eta_s"), v.shown(time.monotonic()), strict=True)),
                    "step": v.step,
                    "total": v.total,
                    "loss": v.loss,
                    "cpu_percent": v.usage.get("cpu"),
                    "rss_bytes": v.usage.get("rss"),
                    "gpu_percent": v.usage.get("gpu"),
                    "gpu_mem_bytes": v.usage.get("gpu_mem"),
                    "last_line": v.last_line[-_LAST_LINE_KEPT:],
                }
                for v in sorted(self._views.values(), key=_task_order)
            ],
        }
        try:
            write_atomic(self._status_path, json_lines.dumps(data), durable=False)
        except OSError:  # the run directory vanished; the console output still tells
            pass
