"""`launch status RUN_DIR`: describe a running, finished or abandoned run from the files it left.

Reads `status.json` (refreshed by a live launcher about once a second) and `summary.json`
(written when a launch ends). Either may be missing, cut short by a crash, or not ours at all;
every such case is a RunStatusError naming the file, never a traceback. Never starts, stops or
writes anything.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Any

from launcher.errors import UsageError
from worker.contract import RunLayout


class RunStatusError(UsageError):
    """RUN_DIR is not a run directory, or one of its files is unreadable or not ours."""


def _load(path: str) -> dict[str, Any] | None:
    """The JSON object in `path`; None when the file does not exist."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as error:
        raise RunStatusError(f"{path}: cannot read it ({error}).") from None
    except json.JSONDecodeError as error:
        raise RunStatusError(
            f"{path}: not valid JSON at line {error.lineno} (cut short by a crash, or not written by "
            "launch); nothing to show from it."
        ) from None
    if not isinstance(data, dict):
        raise RunStatusError(f"{path}: not a launch {os.path.basename(path)} (a JSON object was expected).")
    return data


def _field(data: dict[str, Any], key: str, kinds: type | tuple[type, ...], path: str) -> Any:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, kinds):  # no field here is a boolean
        raise RunStatusError(
            f"{path}: field {key!r} is missing or has the wrong type; was this file written by launch?"
        )
    return value


@dataclass(frozen=True)
class _Live:
    pid: int
    started: float | None
    updated: float
    attempt: int
    restarts: int
    tasks: list[dict[str, Any]]


def _live(data: dict[str, Any], path: str) -> _Live:
    tasks = _field(data, "tasks", list, path)
    for task in tasks:
        if not isinstance(task, dict) or not isinstance(task.get("task"), str):
            raise RunStatusError(f"{path}: a task entry has no name; was this file written by launch?")
    started = data.get("launcher_started")
    return _Live(
        pid=_field(data, "launcher_pid", int, path),
        started=started if isinstance(started, (int, float)) else None,
        updated=float(_field(data, "updated", (int, float), path)),
        attempt=_field(data, "attempt", int, path),
        restarts=_field(data, "restarts", int, path),
        tasks=tasks,
    )


def _launcher_alive(live: _Live) -> bool:
    import psutil

    try:
        process = psutil.Process(live.pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        # a recycled pid belongs to a process started after our launcher
        return live.started is None or abs(process.create_time() - live.started) < 1.0
    except (psutil.NoSuchProcess, psutil.AccessDenied):  # gone, or someone else's
        return False


def _task_rows(tasks: list[dict[str, Any]]) -> list[str]:
    lines = [f"  {'task':<22} {'state':<18} {'step':>9} {'steps/s':>8}  last line"]
    for task in tasks:
        rate = task.get("steps_per_s")
        step = task.get("step")
        lines.append(
            f"  {str(task['task']):<22} {str(task.get('state', ''))[:18]:<18} "
            f"{step if isinstance(step, int) else '':>9} "
            f"{f'{rate:.1f}' if isinstance(rate, (int, float)) else '':>8}  {str(task.get('last_line', ''))[:60]}"
        )
    return lines


def _describe_summary(run_dir: str, summary: dict[str, Any], path: str) -> list[str]:
    attempts = _field(summary, "attempts", list, path)
    state = _field(summary, "state", str, path)
    step = summary.get("final_step")
    lines = [
        f"{run_dir}: {state} at step {step} after {len(attempts)} attempt(s) "
        f"({summary.get('restarts', 0)} restart(s), {summary.get('preemptions', 0)} preemption(s))"
    ]
    for attempt in attempts:
        if not isinstance(attempt, dict):
            raise RunStatusError(f"{path}: an attempt entry is not an object; was this file written by launch?")
        lines.append(f"  attempt {attempt.get('attempt')}: {attempt.get('reason', '')}")
        for task in attempt.get("tasks") or []:
            if not isinstance(task, dict):
                continue
            result: dict[str, Any] = task["result"] if isinstance(task.get("result"), dict) else {}
            extra = f" step {result['step']}" if isinstance(result.get("step"), int) else ""
            extra += f" weights {result['fingerprint']}" if result.get("fingerprint") else ""
            lines.append(
                f"    {str(task.get('name')):<12} on {str(task.get('host')):<16} {task.get('exit', '')}{extra}"
            )
    outputs = summary.get("outputs")
    if isinstance(outputs, dict) and outputs:
        lines.append("  outputs:")
        lines += [f"    {str(name):<12} {where}" for name, where in outputs.items()]
    first = summary.get("first_failure")
    if isinstance(first, dict):
        error = first.get("error") if isinstance(first.get("error"), dict) else {}
        cause = f": {error.get('type')}: {error.get('message')}" if error else ""
        lines.append(
            f"  first failure: {first.get('task')} on {first.get('host')} {first.get('exit')} "
            f"(attempt {first.get('attempt')}){cause}"
        )
    return lines


def describe_run(run_dir: str) -> str:
    """A running run from status.json; a finished one from summary.json; an abandoned one as stopped."""
    if not os.path.isdir(run_dir):
        raise RunStatusError(f"{run_dir}: no such directory; give a run directory such as runs/example.")
    layout = RunLayout(run_dir)
    summary_path, status_path = layout.summary_file, layout.status_file
    status = _load(status_path)
    summary = _load(summary_path)
    live = _live(status, status_path) if status is not None else None
    if live is not None and (summary is None or os.path.getmtime(summary_path) < os.path.getmtime(status_path) - 2):
        age = time.time() - live.updated
        if _launcher_alive(live):
            head = (
                f"{run_dir}: running (launcher pid {live.pid}, attempt {live.attempt}, restarts {live.restarts}, "
                f"updated {age:.0f}s ago)"
            )
        else:
            head = (
                f"{run_dir}: stopped: its launcher (pid {live.pid}) is gone and wrote no summary "
                f"(killed?); last status from {age:.0f}s ago, attempt {live.attempt}, restarts {live.restarts}"
            )
        return "\n".join([head, *_task_rows(live.tasks)])
    if summary is None:
        raise RunStatusError(
            f"{run_dir}: has neither {os.path.basename(summary_path)} nor {os.path.basename(status_path)}; "
            "is it a run directory "
            "(<run_root>/<name>, e.g. runs/example)?"
        )
    return "\n".join(_describe_summary(run_dir, summary, summary_path))
