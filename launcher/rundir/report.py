"""Turn a RunResult into summary.json and into the text the CLI shows at the end.

Reads only the files the run wrote (logs, error and result files); never touches processes. The
root cause names the first failed task, the exception that ended it (from its error file, else from
the last traceback in its log), a known TensorFlow/Keras failure when it is one (launcher.
known_failures), and its log's tail. Every line taken from a file is redacted and stripped of
terminal control sequences before it is shown.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from launcher.common import json_lines
from launcher.common.benign_lines import benign_lines
from launcher.common.log_reading import LoggedException, last_exception, read_end, tail_lines
from launcher.common.masking import redact, redacted
from launcher.common.printable import printable
from launcher.supervise.gang import RunResult, TaskResult
from worker.contract import RunLayout
from worker.files import write_atomic

if TYPE_CHECKING:
    from launcher.rundir.known_failures import KnownFailure

LOG_TAIL_LINES = 15
TAIL_LINE_CHARS = 1000  # of one line of the tail: a printed tensor must not bury the error below it
_CUT = " [... cut; the log has the whole line]"
_MATCHED_LINES = 200  # of the log's end, searched for a known failure


def _shown(text: object) -> str:
    return printable(redact(str(text)))


def log_tail(path: str, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The log's last `lines` lines, leaving out TensorFlow's known-harmless start-up lines: a task
    that failed early would otherwise show little else (they stay in the log)."""
    text = read_end(path).splitlines()
    kept = [line for line, benign in zip(text, benign_lines(text), strict=True) if not benign]
    shown = kept[len(kept) - lines :] if lines < len(kept) else kept
    return [_shown(line if len(line) <= TAIL_LINE_CHARS else line[:TAIL_LINE_CHARS] + _CUT) for line in shown]


@dataclass(frozen=True)
class Diagnosis:
    """What the root-cause task's files say: the exception that ended it and a known failure."""

    exception: LoggedException | None
    known: KnownFailure | None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self.exception is not None:
            message = " ".join(self.exception.message.split())[:2000]  # one line, as the report shows it
            data["exception"] = {"type": self.exception.type, "message": redact(message)}
        if self.known is not None:
            data["known_cause"] = {"says": self.known.says, "see": self.known.see}
        return data


def diagnose(task: TaskResult) -> Diagnosis:
    from launcher.rundir.known_failures import known_failure  # a failure's only: not loaded by every launch

    text = read_end(task.log_path)
    tail = "\n".join(tail_lines(text, _MATCHED_LINES))
    exception = last_exception(text)
    error = task.error or {}
    error_text = f"{error.get('type', '')}: {error.get('message', '')}\n{error.get('traceback', '')}" if error else ""
    said = f"{exception.type}: {exception.message}" if exception is not None else ""
    known = known_failure(said, error_text)
    if known is None and exception is None and not error:
        # Only a task that left no exception is judged by its output: after a user's own error, a
        # line such as the shutdown's `Socket closed` would name a cause that is not this one.
        known = known_failure(tail)
    return Diagnosis(exception, known or known_failure(task.describe_exit))


def _pid(task: TaskResult) -> str:
    """` (pid N)`, or nothing for a task that never got a process."""
    return f" (pid {task.pid})" if task.pid else ""


def _failure_time(task: TaskResult) -> float:
    if task.error and isinstance(task.error.get("time"), (int, float)):
        return float(task.error["time"])
    return task.ended_at or float("inf")


def failures(result: RunResult) -> list[tuple[int, TaskResult]]:
    """Every task of every attempt that failed on its own (not stopped by the launcher), earliest first
    (error-file time, else exit time).

    A lost host is never the launcher's doing, even when it was found lost while being stopped, and it
    comes first in its attempt: the other tasks' collectives fail because of it, not the other way round."""
    found = [
        (attempt.attempt, task)
        for attempt in result.attempts
        for task in attempt.tasks
        if not task.sidecar and task.failed and (task.lost is not None or not task.stopped)
    ]
    return sorted(found, key=lambda pair: (pair[0], pair[1].lost is None, _failure_time(pair[1])))


def final_step(result: RunResult) -> int | None:
    """The step the run stands at: the last attempt's, else (one stopped before its first step, a
    Ctrl-C during a restart) that of the latest attempt that reported one."""
    for attempt in reversed(result.attempts):
        steps = [
            (t.result or {}).get("step") if isinstance((t.result or {}).get("step"), int) else t.step
            for t in attempt.tasks
        ]
        known = [s for s in steps if isinstance(s, int)]
        if known:
            return max(known)
    return None


def _made(log_path: str) -> str | None:
    """The task's log file, or None when none was made (a log file is made at a task's first line)."""
    return log_path if os.path.lexists(log_path) else None


def _task_json(task: TaskResult) -> dict[str, Any]:
    data = dict(vars(task))  # a copy of the fields alone: the JSON written from it copies the rest
    data["log_path"] = _made(task.log_path)
    data["exit"] = task.describe_exit
    if task.result:
        data["fingerprint"] = task.result.get("fingerprint")
    return data


def summary(result: RunResult) -> dict[str, Any]:
    ordered = failures(result)
    first = None
    if ordered:
        attempt, task = ordered[0]
        first = {
            **diagnose(task).to_json(),
            "attempt": attempt,
            "task": task.name,
            "host": task.host,
            "exit": task.describe_exit,
            "exit_code": task.exit_code,
            "signal": task.signal,
            "error": task.error,
            "log": _made(task.log_path),
        }
    if first is None:
        first = _hung_first(result)
    return {
        "run_name": result.run_name,
        "run_dir": result.run_dir,
        "state": result.state.value,
        "final_step": final_step(result),
        "restarts": sum(1 for a in result.attempts[:-1] if a.kind != "preempted" and not a.regrouped),
        "preemptions": sum(1 for a in result.attempts[:-1] if a.kind == "preempted" and not a.regrouped),
        "first_failure": first,
        "outputs": result.outputs,
        "excluded_hosts": result.excluded,
        "attempts": [
            {
                "attempt": a.attempt,
                "reason": a.reason,
                "kind": a.kind,
                "cause": a.cause,
                "started_at": a.started_at,
                "ended_at": a.ended_at,
                **({"recovery": a.recovery} if a.recovery is not None else {}),
                **({"regrouped": True} if a.regrouped else {}),
                **({"hang": a.hang} if a.hang is not None else {}),
                "tasks": [_task_json(t) for t in a.tasks],
            }
            for a in result.attempts
        ],
    }


_HUNG = {
    "stalled": "hung: no progress (stopped by the launcher)",
    "start_timeout": "hung in start-up (stopped by the launcher)",
}


def _hung_first(result: RunResult) -> dict[str, Any] | None:
    """For a run that failed by a hang, whose tasks all were stopped by the launcher: the task behind, as the
    root cause (the laggard its stacks named, else the one quiet longest)."""
    last = result.attempts[-1] if result.attempts else None
    if result.state.value != "failed" or last is None or last.kind not in _HUNG or last.cause is None:
        return None
    task = next((t for t in last.tasks if t.name == last.cause), None)
    if task is None:
        return None
    named = (last.hang or {}).get("named")
    return {
        "attempt": last.attempt,
        "task": task.name,
        "host": task.host,
        "exit": _HUNG[last.kind],
        "exit_code": task.exit_code,
        "signal": task.signal,
        "error": None,
        "log": _made(task.log_path),
        **({"hang": named} if isinstance(named, str) and named else {}),
    }


def write_summary(result: RunResult) -> str:
    path = RunLayout(result.run_dir).summary_file
    os.makedirs(result.run_dir, exist_ok=True)
    write_atomic(path, json_lines.dumps(redacted(summary(result)), default=str))
    return path


def failure_text(result: RunResult) -> str:
    """Name the first failure as the root cause, with its error and log tail; list the rest."""
    ordered = failures(result)
    last = result.attempts[-1] if result.attempts else None
    lines = [f"launch {result.state.value}: {_shown(last.reason) if last else 'nothing ran'}"]
    if ordered:
        attempt, task = ordered[0]
        lines.append(f"root cause: {task.name} on {task.host}{_pid(task)} {task.describe_exit} in attempt {attempt}")
        diagnosis = diagnose(task)
        if task.error:
            lines.append(f"  {_shown(task.error.get('type'))}: {_shown(task.error.get('message'))}")
            trace = str(task.error.get("traceback", "")).rstrip().splitlines()[-6:]
            lines += [f"    {_shown(line)}" for line in trace]
        elif diagnosis.exception is not None:
            lines.append(f"  {_shown(diagnosis.exception.shown())}")
        if diagnosis.known is not None:
            lines.append(f"  {diagnosis.known.line()}")
        tail = log_tail(task.log_path)
        if tail:
            lines.append(f"  last lines of {task.log_path}:")
            lines += [f"    | {line}" for line in tail]
        elif not os.path.lexists(task.log_path):  # a log file is made at a task's first line
            lines.append("  no output of it reached the launcher (no log file)")
        others = [f"{t.name} {t.describe_exit} (attempt {a})" for a, t in ordered[1:]]
        if others:
            lines.append("other failures: " + "; ".join(others[:12]) + (" ..." if len(others) > 12 else ""))
    elif last is not None and last.kind == "start_timeout":
        late = [t for t in last.tasks if not t.joined]
        for task in [t for t in late if t.name == last.cause] or late:
            lines.append(f"never joined: {task.name} on {task.host}{_pid(task)}; last lines of {task.log_path}:")
            lines += [f"    | {line}" for line in log_tail(task.log_path)] or [_nothing_shown(task.log_path)]
    elif last is not None and last.cause:
        cause = next((t for t in last.tasks if t.name == last.cause), None)
        if cause is not None:
            lines.append(f"  last lines of {cause.log_path}:")
            lines += [f"    | {line}" for line in log_tail(cause.log_path)] or [_nothing_shown(cause.log_path)]
    if last is not None and last.hang:
        lines += hang_lines(last.hang)
    if len(result.attempts) > 1:
        lines.append("attempts:")
        lines += [f"  {a.attempt}: {_shown(a.reason)}" for a in result.attempts]
    return "\n".join(lines)


def _nothing_shown(log_path: str) -> str:
    """What the report says of a log whose tail shows nothing: empty, or only TensorFlow's start-up lines."""
    if read_end(log_path, 1):
        return "    (only TensorFlow's known start-up lines; `launch logs` shows them)"
    return "    (no output)"


def hang_lines(hang: dict[str, Any]) -> list[str]:
    """Where a hang's stacks are, and which tasks have none and why (summary.json's or status.json's `hang`)."""
    files = hang.get("stack_files")
    missing = hang.get("no_stack")
    lines = []
    if isinstance(files, dict) and files:
        folders = ", ".join(sorted({os.path.dirname(str(path)) for path in files.values()}))
        lines.append(f"  the tasks' stacks, taken before they were killed: {_shown(folders)} (*.stack.txt)")
    if isinstance(missing, dict):
        lines += [f"  no stack of {_shown(task)}: {_shown(why)}" for task, why in missing.items()]
    return lines


def success_text(result: RunResult) -> str:
    attempts = len(result.attempts)
    step = final_step(result)
    prints = {(t.result or {}).get("fingerprint") for t in result.attempts[-1].tasks} if result.attempts else set()
    prints.discard(None)
    text = f"launch succeeded: {result.run_name} finished"
    if step is not None:
        text += f" at step {step}"
    if attempts > 1:
        text += f" after {attempts} attempts"
    if len(prints) == 1:
        text += f"; every replica has weights {prints.pop()}"
    elif len(prints) > 1:
        text += f"; WARNING: replicas disagree on final weights ({', '.join(sorted(str(p) for p in prints))})"
    return "\n".join([text, *recovery_lines(result)])


def recovery_lines(result: RunResult) -> list[str]:
    """A line per restarted attempt: how long the gang took back to its first step, and how many of its
    tasks ran in a warm spare (summary.json's `recovery` has the phases)."""
    lines = []
    for attempt in result.attempts[1:]:
        recovery = attempt.recovery or {}
        total, warm, tasks = recovery.get("total_s"), recovery.get("warm_tasks"), recovery.get("tasks")
        if not isinstance(total, (int, float)) or not isinstance(tasks, int) or not tasks:
            continue
        phases = recovery.get("phases_s")
        # a hang has no moment of failure: counted from the decision to restart (launcher/supervise/recovery.py)
        since = "failure" if isinstance(phases, dict) and phases.get("detect") is not None else "decision to restart"
        spares = f"{warm} of {tasks} task(s) in warm spares" if warm else "every task started cold"
        lines.append(f"  attempt {attempt.attempt}: first step {total:.2f} s after the {since}; {spares}")
    return lines
