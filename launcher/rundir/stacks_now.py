"""`launch stacks RUN [--task T]`: every running task's stack now, from a run that looks slow, stopping nothing.

The command cannot reach the tasks itself (their hosts' agents answer the launcher alone), so it asks the
run's launcher through the run directory: it writes `stacks/request-ID.json` (the tasks asked for), and
the launcher answers on a thread of its own (StackRequests; never holding up the supervision, and during a
restart's backoff too): every host's agent takes the stacks (launcher/agent/stacks.py), and the launcher
writes them, masked, with the task it finds behind, to `stacks/ID.json`; the command prints them and removes
both files. `stacks/` must be the user's own and writable by nobody else, or neither side uses it. Two
commands at once each get their own answer; an answer nobody fetched is removed after ANSWER_KEPT_S.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import stat
import threading
import time
from collections.abc import Callable
from typing import Any

from launcher.common.errors import UsageError
from launcher.common.log_reading import read_end
from launcher.common.masking import redact
from launcher.common.printable import escaped, printable
from launcher.common.private_files import make_private_dir
from launcher.plan import TaskLaunch
from launcher.rundir.lock import is_run_dir
from launcher.rundir.status import launcher_process, no_run_files, read_run, summary_outcome
from launcher.supervise import hang
from launcher.supervise.gang import TaskStatus
from launcher.supervise.stacks import name_the_hang, none_behind, render
from worker.files import write_atomic

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 90.0  # the agents bound their own stack taking well under this
ANSWER_KEPT_S = 300.0
_POLL_S = 0.5
_FRESH_S = 2.0  # the supervisor publishes the running tasks at least every _POLL_S; never waited for longer
_REQUEST = "request-"
_MOST_TASKS = 100_000  # named in one request


def stacks_dir(run_dir: str) -> str:
    return os.path.join(run_dir, "stacks")


def _private_problem(folder: str) -> str | None:
    """Why `folder` may not carry requests and answers: not a directory of this user's, or writable by others."""
    try:
        info = os.lstat(folder)
    except OSError as error:
        return error.strerror
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        return "it is not a directory of this user's"
    if info.st_mode & 0o022:
        return f"other users may write in it (mode {stat.S_IMODE(info.st_mode):04o}); `chmod 700` it"
    return None


def _load(path: str) -> Any:
    """A JSON file of this user's (a regular file, not a link), or None for anything else."""
    try:
        if os.lstat(path).st_uid != os.geteuid():
            return None
        return json.loads(read_end(path, 64 * 2**20) or "null")
    except (OSError, ValueError, RecursionError):
        return None


class StackRequests:
    """The launcher's side. `publish` (from the supervisor's thread) hands it the tasks running now;
    `start` answers requests on a thread until `close`."""

    def __init__(self, run_dir: str, transport: Any) -> None:
        self._dir = stacks_dir(run_dir)
        self._transport = transport
        self._lock = threading.Lock()
        self._running: tuple[list[TaskLaunch], list[TaskStatus], float] = ([], [], 0.0)
        self._published = 0.0
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self._warned = False

    def publish(self, running: Callable[[], tuple[list[TaskLaunch], list[TaskStatus], float]]) -> None:
        """At most twice a second: the running tasks' launches, statuses and the supervisor's clock."""
        if time.monotonic() - self._published < _POLL_S:
            return
        self._published = time.monotonic()
        found = running()
        with self._lock:
            self._running = found

    def start(self) -> None:
        self._thread = threading.Thread(target=self._serve, daemon=True, name="stack-requests")
        self._thread.start()

    def close(self) -> None:
        self._closed.set()

    def _serve(self) -> None:
        while not self._closed.wait(_POLL_S):
            try:
                self.poll()
            except Exception as error:  # noqa: BLE001 - a request must never end the run
                log.warning("`launch stacks`: %s", error)

    def poll(self) -> None:
        try:
            names = os.listdir(self._dir)
        except OSError:  # no request was ever made
            return
        problem = _private_problem(self._dir)
        if problem is not None:
            if not self._warned:
                log.warning("%s is not used for `launch stacks`: %s", self._dir, problem)
                self._warned = True
            return
        for name in names:
            path = os.path.join(self._dir, name)
            if name.startswith(_REQUEST) and name.endswith(".json"):
                self._answer(path, name[len(_REQUEST) : -len(".json")])
            elif name.endswith(".json"):
                _remove_if_older(path, ANSWER_KEPT_S)

    def _answer(self, path: str, ident: str) -> None:
        request = _load(path)
        try:
            os.unlink(path)
        except OSError:
            return  # another launcher's, or gone: not ours to answer
        wanted = request.get("tasks") if isinstance(request, dict) else None
        if not isinstance(request, dict) or not _task_names(wanted):
            self._write(ident, {"error": "a malformed request (not written by `launch stacks`)"})
            return
        asked_at = time.monotonic()  # the tasks as they are once the request came: the next view published
        while self._published < asked_at and time.monotonic() - asked_at < _FRESH_S and not self._closed.is_set():
            time.sleep(0.02)
        with self._lock:
            launches, statuses, now = self._running
        chosen = [t for t in launches if not wanted or t.name in wanted]
        taken = hang.take(self._transport, chosen)
        at = time.time()
        behind = "" if wanted else (name_the_hang(statuses, taken, now) or none_behind(statuses))  # the gang's
        self._write(
            ident,
            {
                "running": [t.name for t in launches],
                "behind": redact(behind),
                "tasks": {t.name: redact(render(taken[t.name], t.host, at)) for t in chosen},
            },
        )

    def _write(self, ident: str, answer: dict[str, Any]) -> None:
        try:
            write_atomic(os.path.join(self._dir, f"{ident}.json"), json.dumps(answer), durable=False)
        except OSError:  # the run directory went away: the command says it got no answer
            pass


def _task_names(wanted: object) -> bool:
    """Whether a request's `tasks` is null (every task) or a list of names."""
    if wanted is None:
        return True
    return isinstance(wanted, list) and len(wanted) <= _MOST_TASKS and all(isinstance(w, str) for w in wanted)


def _remove_if_older(path: str, age_s: float) -> None:
    try:
        if time.time() - os.lstat(path).st_mtime > age_s:
            os.unlink(path)
    except OSError:
        pass


def _running_launcher(run_dir: str) -> tuple[int, Any]:
    """The run's launcher's pid and process; UsageError saying why there is none."""
    files = read_run(run_dir) if is_run_dir(run_dir) else None
    if files is None:
        raise UsageError(f"{no_run_files(run_dir)} No stacks to take.")
    status = files.status
    if status is None or files.summary_is_current:
        ended = f": {summary_outcome(files.summary)}" if files.summary is not None else ""
        raise UsageError(f"{escaped(run_dir)}: not running{ended}; its stacks can be taken only while it runs.")
    process = launcher_process(status)
    if process is None:
        raise UsageError(
            f"{escaped(run_dir)}: its launcher (pid {status.pid}) is gone and wrote no summary (killed?); "
            "no task of it runs, so there are no stacks to take."
        )
    return status.pid, process


def take_now(run_dir: str, tasks: list[str] | None, timeout_s: float, say: Callable[[str], object]) -> dict[str, Any]:
    """Ask the run's launcher for the stacks of `tasks` (all, for None) and wait for them: its answer,
    {"running": [...], "behind": "...", "tasks": {task: text}}, every text printable."""
    pid, process = _running_launcher(run_dir)
    folder = stacks_dir(run_dir)
    make_private_dir(folder)
    problem = _private_problem(folder)
    if problem is not None:
        raise UsageError(f"{escaped(folder)}: not used for `launch stacks`: {problem}.")
    ident = secrets.token_hex(8)
    request, answer = os.path.join(folder, f"{_REQUEST}{ident}.json"), os.path.join(folder, f"{ident}.json")
    write_atomic(request, json.dumps({"tasks": tasks, "pid": os.getpid()}), durable=False)
    asked = ", ".join(escaped(t) for t in tasks) if tasks else "every task"
    say(f"{escaped(run_dir)}: asked the launcher (pid {pid}) for the stacks of {asked}")
    deadline, next_look = time.monotonic() + timeout_s, time.monotonic() + 1.0
    try:
        while time.monotonic() < deadline:
            data = _load(answer)
            if isinstance(data, dict):
                return _printable_answer(data)
            if time.monotonic() >= next_look:  # a launcher killed meanwhile answers nothing: say so at once
                next_look = time.monotonic() + 1.0
                if not process.is_running():
                    _running_launcher(run_dir)
            time.sleep(0.1)
        raise UsageError(f"{escaped(run_dir)}: the launcher (pid {pid}) sent no stacks within {timeout_s:g}s.")
    finally:
        for path in (request, answer):
            try:
                os.unlink(path)
            except OSError:
                pass


def _printable_answer(data: dict[str, Any]) -> dict[str, Any]:
    if isinstance(data.get("error"), str):
        raise UsageError(f"the launcher refused the request: {printable(data['error'])}")
    texts = data["tasks"] if isinstance(data.get("tasks"), dict) else {}
    running = data.get("running")
    return {
        "running": [printable(str(name)) for name in running] if isinstance(running, list) else [],
        "behind": printable(str(data.get("behind") or "")),
        "tasks": {printable(str(k)): _printable_text(str(v)) for k, v in texts.items()}
        if isinstance(texts, dict)
        else {},
    }


def _printable_text(text: str) -> str:
    return "\n".join(printable(line) for line in text.split("\n"))


__all__ = ["DEFAULT_TIMEOUT_S", "StackRequests", "stacks_dir", "take_now"]
