"""`launch status RUN_DIR`: describe a running, finished or abandoned run from the files it left.

Reads `status.json` (refreshed by a live launcher about once a second) and `summary.json`
(written when a launch ends), and says what they tell with the exit code of the run's state
(launcher/common/exit_codes.py). Either file may be missing, cut short by a crash, or not ours at all;
every such case is a RunStatusError naming the file, never a traceback. `read_run` and
`launcher_process` also serve `launch logs -f` and `launch stop`. Never starts, signals or writes
anything.
"""

from __future__ import annotations

import glob
import json
import os
import posixpath
import shlex
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from launcher.common import exit_codes, task_states
from launcher.common.durations import duration_text
from launcher.common.errors import UsageError
from launcher.common.json_lines import NOT_FINITE
from launcher.common.log_reading import LoggedException
from launcher.common.masking import redact
from launcher.common.printable import escaped, printable
from launcher.common.usage_text import usage_text
from launcher.rundir.checkpoint_mark import has_checkpoints
from launcher.rundir.lock import run_around
from launcher.rundir.report import hang_lines
from worker.contract import RunLayout

if TYPE_CHECKING:
    import psutil

__all__ = [
    "SUMMARY_EXIT_CODES",
    "LauncherStatus",
    "RunDescription",
    "RunFiles",
    "RunStatusError",
    "describe_run",
    "launcher_process",
    "read_run",
    "summary_outcome",
]

# The exit code of each terminal state a summary can hold (the values of launcher.supervise.gang.LaunchState's
# terminal members; spelled here because importing that module costs `launch status` the spec's
# pydantic models, and a unit test keeps the two in step).
SUMMARY_EXIT_CODES: dict[str, int] = {
    "succeeded": exit_codes.SUCCEEDED,
    "failed": exit_codes.FAILED,
    "preempted": exit_codes.PREEMPTED,
    "interrupted": exit_codes.INTERRUPTED,
}
_SAME_PROCESS_S = 1.0  # create times of one process, as psutil computes them twice, differ by far less
_URL_SCHEME = "://"  # gs://, s3://, hdfs://, https://: another machine's to hold; never checked here


class RunStatusError(UsageError):
    """RUN_DIR is not a run directory, or one of its files is unreadable or not ours."""


@dataclass(frozen=True)
class RunDescription:
    """What `launch status` prints, and what it exits with (see launcher/common/exit_codes.py)."""

    text: str
    exit_code: int


@dataclass(frozen=True)
class LauncherStatus:
    """One snapshot of status.json: the launcher writing it, and its tasks when it last wrote."""

    pid: int
    started: float | None  # the launcher's create time (psutil); None in files from before it was written
    updated: float
    attempt: int
    restarts: int
    tasks: tuple[dict[str, Any], ...]
    stopping: bool = False  # its tasks were being stopped (to restart, or to end the run)
    since: float | None = None  # when that launcher took the run (None in files from before it was written)
    restart_at: float | None = None  # backing off: when it starts every task again
    excluded: tuple[dict[str, Any], ...] = ()  # hosts taken out of the gang, and why
    last_hang: dict[str, Any] | None = None  # the launch's latest hang: the task behind, the stack files


@dataclass(frozen=True)
class RunFiles:
    """status.json and summary.json of one run directory, read once; either may be absent."""

    run_dir: str
    status: LauncherStatus | None
    summary: dict[str, Any] | None
    status_mtime: float | None
    summary_mtime: float | None

    @property
    def layout(self) -> RunLayout:
        return RunLayout(self.run_dir)

    @property
    def summary_is_current(self) -> bool:
        """Whether summary.json tells how the launch that wrote status.json ended (else it is from an
        earlier launch of this run, or there is none)."""
        if self.summary_mtime is None:
            return False
        if self.status is None or self.status_mtime is None:
            return True
        if self.status.since is not None:
            return self.summary_mtime >= self.status.since
        if self.status.started is not None:  # a create time, from whole seconds of boot time: up to 1 s early
            return self.summary_mtime >= self.status.started
        # an older status.json: its launcher's last status write comes just before or after its summary
        return self.summary_mtime >= self.status_mtime - 2


MAX_FILE_BYTES = 64 * 2**20  # far above what launch writes; a bigger file is not ours


def _load(path: str) -> tuple[dict[str, Any], float] | None:
    """The JSON object in `path` and the file's mtime; None when the file does not exist. Only a
    regular file is read (a FIFO would hang, a link could point anywhere), and only so much of it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise RunStatusError(f"{path}: cannot read it ({error.strerror or error}; a symbolic link?).") from None
    try:
        with open(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise RunStatusError(f"{path}: not a regular file; was it written by launch?")
            if info.st_size > MAX_FILE_BYTES:
                raise RunStatusError(f"{path}: {info.st_size} bytes, more than launch ever writes; not shown.")
            mtime = info.st_mtime
            data = json.loads(handle.read().decode("utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise RunStatusError(f"{path}: cannot read it ({error}).") from None
    except RecursionError:
        raise RunStatusError(f"{path}: nested deeper than launch ever writes; not shown.") from None
    except json.JSONDecodeError as error:
        raise RunStatusError(
            f"{path}: not valid JSON at line {error.lineno} (cut short by a crash, or not written by "
            "launch); nothing to show from it."
        ) from None
    if not isinstance(data, dict):
        raise RunStatusError(f"{path}: not a launch {os.path.basename(path)} (a JSON object was expected).")
    return data, mtime


def _field(data: dict[str, Any], key: str, kinds: type | tuple[type, ...], path: str) -> Any:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, kinds):  # no field here is a boolean
        raise RunStatusError(
            f"{path}: field {key!r} is missing or has the wrong type; was this file written by launch?"
        )
    return value


def _launcher_status(data: dict[str, Any], path: str) -> LauncherStatus:
    tasks = _field(data, "tasks", list, path)
    for task in tasks:
        if not isinstance(task, dict) or not isinstance(task.get("task"), str):
            raise RunStatusError(f"{path}: a task entry has no name; was this file written by launch?")
    updated = _time_of(_field(data, "updated", (int, float), path))
    if updated is None:
        raise RunStatusError(f"{path}: field 'updated' is not a time; was this file written by launch?")
    return LauncherStatus(
        pid=_field(data, "launcher_pid", int, path),
        started=_time_of(data.get("launcher_started")),
        updated=updated,
        attempt=_field(data, "attempt", int, path),
        restarts=_field(data, "restarts", int, path),
        tasks=tuple(tasks),
        stopping=data.get("stopping") is True,
        since=_time_of(data.get("run_since")),
        restart_at=_time_of(data.get("restart_at")),
        excluded=tuple(e for e in _listed(data.get("excluded_hosts")) if isinstance(e, dict)),
        last_hang=data["last_hang"] if isinstance(data.get("last_hang"), dict) else None,
    )


_LATEST_TIME = 1e11  # seconds since 1970: the year 5138; a file saying later is not ours to believe


def _float_of(value: object) -> float | None:
    """A number of status.json as a float (a loss of "NaN" too: launcher/common/json_lines.py); None for
    any other string, a boolean, or a number too large for a float (which a forged file may hold)."""
    if isinstance(value, str):
        return NOT_FINITE.get(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return None


def _time_of(value: object) -> float | None:
    """A time (seconds since 1970) from status.json, or None for anything else, NaN and infinity too."""
    seconds = _float_of(value)
    return seconds if seconds is not None and 0 <= seconds <= _LATEST_TIME else None


def not_a_run_dir(run_dir: str) -> str:
    """The message for a run directory that is not one: missing, or a file."""
    what = "not a directory" if os.path.lexists(run_dir) else "no such directory"
    inside = _run_above(run_dir) if os.path.lexists(run_dir) else ""  # a log file of a run, say
    return (
        f"{escaped(run_dir)}: {what}; give a run directory such as runs/example, or the name of a run under ./runs "
        f"(--run-root DIR for a run under DIR).{inside}"
    )


def _run_above(path: str) -> str:
    """` It lies inside the run R: give that.` for a path inside a run (an attempt-N directory, a log file
    in it, its checkpoints), looked for up to three directories up; else ""."""

    around = run_around(os.path.dirname(os.path.realpath(path)), 3)
    return f" It lies inside the run {escaped(around[0])}: give that." if around is not None else ""


def no_run_files(run_dir: str, missing: str = "no summary.json, status.json or attempt directory") -> str:
    """The message for a directory holding no run's files; for one inside a run, the run to give instead."""
    return (
        f"{escaped(run_dir)}: has {missing}; is it a run directory (<run_root>/<name>, e.g. runs/example)?"
        f"{_run_above(run_dir)}"
    )


def read_run(run_dir: str) -> RunFiles:
    """status.json and summary.json of `run_dir`; RunStatusError when the directory is missing, a file
    is unreadable or cut short, or status.json is not launch's (a summary's fields are checked by
    what reads them)."""
    if not os.path.isdir(run_dir):
        raise RunStatusError(not_a_run_dir(run_dir))
    layout = RunLayout(run_dir)
    status = _load(layout.status_file)
    summary = _load(layout.summary_file)
    return RunFiles(
        run_dir=run_dir,
        status=_launcher_status(status[0], layout.status_file) if status is not None else None,
        summary=summary[0] if summary is not None else None,
        status_mtime=status[1] if status is not None else None,
        summary_mtime=summary[1] if summary is not None else None,
    )


def launcher_process(status: LauncherStatus) -> psutil.Process | None:
    """The process that wrote `status` when it still runs, else None. A pid alone is not enough: once
    the launcher is gone its pid may be given to any later process, whose create time differs. With no
    create time in the file (an older launcher) the pid is trusted."""
    import psutil

    if status.pid <= 0:  # 0 and negative numbers name process groups to kill(2), never one process
        return None
    try:
        process = psutil.Process(status.pid)
        if process.status() == psutil.STATUS_ZOMBIE:  # exited; its parent has not reaped it yet
            return None
        if status.started is not None and abs(process.create_time() - status.started) >= _SAME_PROCESS_S:
            return None
    except (psutil.NoSuchProcess, psutil.AccessDenied):  # gone, or another user's process
        return None
    return process


def _step_text(task: dict[str, Any]) -> str:
    step, total = task.get("step"), task.get("total")
    if not _is_int(step):
        return ""
    return f"{step}/{total}" if _is_int(total) else str(step)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _task_rows(tasks: tuple[dict[str, Any], ...]) -> list[str]:
    with_loss = any(_float_of(task.get("loss")) is not None for task in tasks)
    loss_head = f" {'loss':>9}" if with_loss else ""
    with_eta = any(_eta_text(task.get("eta_s")) for task in tasks)
    eta_head = f" {'ETA':>7}" if with_eta else ""
    usage = [usage_text({key: task.get(field) for key, field in _USAGE_FIELDS.items()}) for task in tasks]
    with_usage = any(cpu or mem for cpu, mem in usage)
    usage_head = f" {'cpu':>14} {'mem':>20}" if with_usage else ""
    lines = [f"  {'task':<22} {'state':<18} {'step':>13} {'steps/s':>8}{eta_head}{loss_head}{usage_head}  last line"]
    for task, (cpu, mem) in zip(tasks, usage, strict=True):
        rate, loss, eta = task.get("steps_per_s"), task.get("loss"), task.get("eta_s")
        loss_cell = f" {_number_text(loss, '.4g'):>9}" if with_loss else ""
        eta_cell = f" {_eta_text(eta):>7}" if with_eta else ""
        rate_cell = f"{_number_text(rate, '.1f'):>8}"
        usage_cell = f" {cpu:>14} {mem:>20}" if with_usage else ""
        lines.append(
            f"  {str(task['task']):<22} {str(task.get('state', ''))[:18]:<18} {_step_text(task):>13} "
            f"{rate_cell}{eta_cell}{loss_cell}{usage_cell}  {str(task.get('last_line', ''))[:60]}"
        )
    return lines


# status.json's fields of a task's usage, by the agent's names (launcher/console.py writes them)
_USAGE_FIELDS = {"cpu": "cpu_percent", "rss": "rss_bytes", "gpu": "gpu_percent", "gpu_mem": "gpu_mem_bytes"}


def _number_text(value: object, spec: str) -> str:
    """A number of status.json as the table shows it; "" for anything else."""
    number = _float_of(value)
    return "" if number is None else format(number, spec)


_LONGEST_ETA_S = 10 * 365 * 86400.0  # more than any run: a file that says more is not ours to believe


def _eta_text(value: object) -> str:
    seconds = _float_of(value)
    return duration_text(seconds) if seconds is not None and 0 <= seconds <= _LONGEST_ETA_S else ""  # not NaN


def _as_last_seen(task: dict[str, Any]) -> dict[str, Any]:
    """A task row of a launcher that is gone: its state is what was last seen, its rate no longer is."""
    state = str(task.get("state", ""))
    live = state.split(",")[0].split(" (")[0] in task_states.LIVE  # "running, no step for 40s", "starting (imported)"
    last_seen = f"was {state}" if live else state  # an exit stays what it was
    return {**task, "state": last_seen, "steps_per_s": None, "eta_s": None, "cpu_percent": None}


def summary_outcome(summary: dict[str, Any]) -> str:
    """`failed at step 40 after 2 attempt(s) (...)`; without a step, "before any step" when the tasks
    reported (the built-in runtime does from its start), else "with no step reported": a script that
    never calls `report("step", ...)` may well have trained."""
    attempts = summary.get("attempts")
    step = summary.get("final_step")
    listed = attempts if isinstance(attempts, list) else []
    if _is_int(step):
        at = f"at step {step}"
    else:
        at = "before any step" if _any_reported(listed) else "with no step reported"
    count = len(listed)
    first = listed[0].get("attempt") if listed and isinstance(listed[0], dict) else 0
    # a resumed run numbers its attempts on from the launches before it: say whose attempts are counted
    these = " of this launch" if isinstance(first, int) and first > 0 else ""
    return (
        f"{summary.get('state')} {at} after {count} attempt(s){these} "
        f"({summary.get('restarts', 0)} restart(s), {summary.get('preemptions', 0)} preemption(s))"
    )


def _any_reported(attempts: list[Any]) -> bool:
    """Whether any task of these summary attempts sent the launcher a report of its own."""
    for attempt in attempts:
        tasks = attempt.get("tasks") if isinstance(attempt, dict) else None
        for task in tasks if isinstance(tasks, list) else []:
            if isinstance(task, dict) and task.get("reported") is True:
                return True
    return False


def _rebased(where: str, written_in: object, run_dir: str) -> str:
    """`where` under `run_dir` when it was under the run directory the summary was written in: the run
    may have been moved since (--fresh sets it aside) or be read from another working directory."""
    if isinstance(written_in, str) and written_in:
        prefix = written_in.rstrip("/") + "/"
        if where.startswith(prefix):
            return posixpath.join(run_dir, where[len(prefix) :])
    return where


def _present(where: str) -> bool:
    """Whether an output is there to be found: a URL is another system's and kept; a path must exist
    (a pattern such as attempt-* must match something), and a directory must hold something besides
    the launcher's checkpoint mark (the checkpoint directory is made, and marked, for every run)."""

    if _URL_SCHEME in where:
        return True
    if glob.has_magic(where):
        return bool(glob.glob(where))
    return has_checkpoints(where) if os.path.isdir(where) else os.path.exists(where)


def _outputs(run_dir: str, summary: dict[str, Any]) -> list[str]:
    outputs = summary.get("outputs")
    if not isinstance(outputs, dict):
        return []
    found = [
        (str(name), where)
        for name, written in outputs.items()
        if isinstance(written, str) and _present(where := _rebased(written, summary.get("run_dir"), run_dir))
    ]
    return ["  outputs:", *(f"    {name:<12} {where}" for name, where in found)] if found else []


def _listed(value: object) -> list[Any]:
    """A list a launch wrote, or nothing (a hand-edited file may hold anything there)."""
    return value if isinstance(value, list) else []


def excluded_rows(excluded: Iterable[dict[str, Any]]) -> list[str]:
    """One line per host taken out of the gang: why, what took its seat, until when it stays out."""
    rows = []
    for e in excluded:
        until = _time_of(e.get("until"))
        when = time.strftime("%H:%M:%S", time.localtime(until)) if until is not None else "?"
        spare, rejoined = e.get("replaced_by"), _time_of(e.get("rejoined_at"))
        if e.get("seat") is None:
            instead = "kept out of the gang"
        else:
            instead = f"{spare} took its tasks" if spare else "the gang went on without it"
        back = f"rejoined at {time.strftime('%H:%M:%S', time.localtime(rejoined))}" if rejoined else f"out until {when}"
        rows.append(f"  excluded: {e.get('host')} ({e.get('reason')}); {instead}; {back}"[:600])
    return rows


def _hang_rows(hang: dict[str, Any] | None, attempt: object = None) -> list[str]:
    """A hang's lines: the task behind, named, and where every task's stack is."""
    if not hang:
        return []
    attempt = hang.get("attempt", attempt)
    named = f": {hang['named']}" if hang.get("named") else ""
    return [f"  hang in attempt {attempt}{named}"[:600], *(line[:600] for line in hang_lines(hang))]


def _describe_summary(run_dir: str, summary: dict[str, Any], path: str) -> list[str]:
    lines = [f"{run_dir}: {summary_outcome(summary)}"]
    for attempt in _field(summary, "attempts", list, path):
        if not isinstance(attempt, dict):
            raise RunStatusError(f"{path}: an attempt entry is not an object; was this file written by launch?")
        lines.append(f"  attempt {attempt.get('attempt')}: {attempt.get('reason', '')}")
        if isinstance(attempt.get("hang"), dict):
            lines += hang_lines(attempt["hang"])
        for task in attempt.get("tasks") or []:
            if not isinstance(task, dict):
                continue
            result: dict[str, Any] = task["result"] if isinstance(task.get("result"), dict) else {}
            step = result.get("step") if _is_int(result.get("step")) else task.get("step")  # the last it reported
            extra = f" step {step}" if _is_int(step) else ""
            extra += f" weights {result['fingerprint']}" if result.get("fingerprint") else ""
            lines.append(
                f"    {str(task.get('name')):<12} on {str(task.get('host')):<16} {task.get('exit', '')}{extra}"
            )
    lines += _outputs(run_dir, summary)
    lines += excluded_rows(e for e in _listed(summary.get("excluded_hosts")) if isinstance(e, dict))
    first = summary.get("first_failure")
    if isinstance(first, dict):
        error = first.get("error") if isinstance(first.get("error"), dict) else {}
        exception = first.get("exception") if isinstance(first.get("exception"), dict) else {}
        if error:
            cause = f": {error.get('type')}: {error.get('message')}"
        elif exception:
            cause = f": {LoggedException(str(exception.get('type')), str(exception.get('message'))).shown()}"
        else:
            cause = ""
        lines.append(
            f"  first failure: {first.get('task')} on {first.get('host')} {first.get('exit')} "
            f"(attempt {first.get('attempt')}){cause}"[:600]
        )
        if first.get("hang"):
            lines.append(f"  where: {first['hang']}"[:600])
        known = first.get("known_cause") if isinstance(first.get("known_cause"), dict) else {}
        if known:
            lines.append(f"  known cause: {known.get('says')} (see {known.get('see')})"[:600])
        if "log" in first and first["log"] is None:  # summary.json names no log file that was not made
            lines.append("  its log: none, it printed nothing")
        elif isinstance(first.get("attempt"), int) and isinstance(first.get("task"), str):
            where = shlex.join([run_dir, "--attempt", str(first["attempt"]), "--task", first["task"]])
            lines.append(f"  its log: launch logs {printable(where)}"[:600])
    return lines


def describe_run(run_dir: str) -> RunDescription:
    """A running run from status.json (exit 3); a finished one from summary.json (exit by its state);
    one whose launcher died without a summary as stopped (exit 5)."""
    files = read_run(run_dir)
    live = files.status
    if live is not None and not files.summary_is_current:
        age = time.time() - live.updated
        if launcher_process(live) is not None:
            doing = "stopping its tasks" if live.stopping else "running"
            if live.restart_at is not None:
                doing = f"backing off: every task starts again in {max(live.restart_at - time.time(), 0):.0f}s"
            head = (
                f"{run_dir}: {doing} (launcher pid {live.pid}, "
                f"attempt {live.attempt}, restarts {live.restarts}, updated {age:.0f}s ago)"
            )
            code = exit_codes.RUNNING
        else:
            head = (
                f"{run_dir}: stopped: its launcher (pid {live.pid}) is gone and wrote no summary "
                f"(killed?); last status from {age:.0f}s ago, attempt {live.attempt}, restarts {live.restarts}"
            )
            code = exit_codes.STOPPED
        tasks = live.tasks if code == exit_codes.RUNNING else tuple(_as_last_seen(task) for task in live.tasks)
        lines = [head, *_task_rows(tasks), *excluded_rows(live.excluded), *_hang_rows(live.last_hang)]
        return RunDescription(_screen_text(lines), code)
    layout = files.layout
    if files.summary is None:
        raise RunStatusError(no_run_files(run_dir, "neither summary.json nor status.json"))
    _field(files.summary, "attempts", list, layout.summary_file)
    state = _field(files.summary, "state", str, layout.summary_file)
    if state not in SUMMARY_EXIT_CODES:
        raise RunStatusError(
            f"{layout.summary_file}: state {state!r} is not one launch writes ({', '.join(SUMMARY_EXIT_CODES)}); "
            "was this file written by launch?"
        )
    text = _screen_text(_describe_summary(run_dir, files.summary, layout.summary_file))
    return RunDescription(text, SUMMARY_EXIT_CODES[state])


def _screen_text(lines: list[str]) -> str:
    """What a run's files say, as text for a screen: no terminal control sequences, no secrets."""
    return "\n".join(printable(redact(line)) for line in lines)
