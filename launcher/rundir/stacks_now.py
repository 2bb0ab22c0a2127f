"""`launch stacks RUN [--task T]`: every running task's stack now, from a run that looks slow, stopping nothing.

The command cannot reach the tasks itself (their hosts' agents answer the launcher alone), so it asks the
run's launcher through the run directory: it writes `stacks/request-ID.json` (the tasks asked for), and
the launcher, which looks for requests between the events it handles (StackRequests.poll, at most twice
a second), has every host's agent take the stacks (launcher/agent/stacks.py) and writes them, masked, to
`stacks/ID.json`; the command prints them and removes both files. Two commands at once each get their
own answer; a request the launcher never answered (it ended) is removed by the command that made it.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Callable
from typing import Any

from launcher.common.errors import UsageError
from launcher.common.log_reading import read_end
from launcher.common.masking import redact
from launcher.common.private_files import make_private_dir
from launcher.plan import TaskLaunch
from launcher.rundir.status import launcher_process, read_run, summary_outcome
from launcher.supervise import hang
from launcher.supervise.stacks import render
from worker.files import write_atomic

DEFAULT_TIMEOUT_S = 90.0  # the agents bound their own stack taking well under this
_POLL_S = 0.5
_REQUEST = "request-"


def stacks_dir(run_dir: str) -> str:
    return os.path.join(run_dir, "stacks")


class StackRequests:
    """The launcher's side: answers `launch stacks` between events. `running` gives the tasks running now."""

    def __init__(self, run_dir: str, transport: Any, running: Callable[[], list[TaskLaunch]]) -> None:
        self._dir = stacks_dir(run_dir)
        self._transport = transport
        self._running = running
        self._next = 0.0

    def poll(self) -> None:
        if time.monotonic() < self._next:
            return
        self._next = time.monotonic() + _POLL_S
        try:
            asked = [n for n in os.listdir(self._dir) if n.startswith(_REQUEST) and n.endswith(".json")]
        except OSError:  # no request was ever made
            return
        for name in asked:
            self._answer(os.path.join(self._dir, name), name[len(_REQUEST) : -len(".json")])

    def _answer(self, path: str, ident: str) -> None:
        try:
            request = json.loads(read_end(path, 65536))
            os.unlink(path)
        except (OSError, ValueError):
            return
        wanted = request.get("tasks") if isinstance(request, dict) else None
        launches = [t for t in self._running() if not wanted or t.name in wanted]
        taken = hang.take(self._transport, launches)
        at = time.time()
        texts = {t.name: redact(render(taken[t.name], t.host, at)) for t in launches}
        try:
            write_atomic(os.path.join(self._dir, f"{ident}.json"), json.dumps({"tasks": texts}), durable=False)
        except OSError:  # the run directory went away: the command says it got no answer
            pass


def _running_launcher(run_dir: str) -> int:
    files = read_run(run_dir)
    status = files.status
    if status is None or files.summary_is_current or launcher_process(status) is None:
        ended = f": {summary_outcome(files.summary)}" if files.summary is not None else ""
        raise UsageError(f"{run_dir}: not running{ended}; its stacks can be taken only while it runs.")
    return status.pid


def take_now(run_dir: str, tasks: list[str] | None, timeout_s: float, say: Callable[[str], object]) -> dict[str, str]:
    """Ask the run's launcher for the stacks of `tasks` (all, for None) and wait for them: task -> its text."""
    pid = _running_launcher(run_dir)
    folder = stacks_dir(run_dir)
    ident = secrets.token_hex(8)
    request, answer = os.path.join(folder, f"{_REQUEST}{ident}.json"), os.path.join(folder, f"{ident}.json")
    make_private_dir(folder)
    write_atomic(request, json.dumps({"tasks": tasks, "pid": os.getpid()}), durable=False)
    say(f"{run_dir}: asked the launcher (pid {pid}) for the stacks of {', '.join(tasks) if tasks else 'every task'}")
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            try:
                data = json.loads(read_end(answer, 64 * 2**20))
            except (OSError, ValueError):
                time.sleep(0.1)
                continue
            found = data.get("tasks") if isinstance(data, dict) else None
            return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}
        _running_launcher(run_dir)  # it ended meanwhile: says so
        raise UsageError(f"{run_dir}: the launcher (pid {pid}) sent no stacks within {timeout_s:g}s.")
    finally:
        for path in (request, answer):
            try:
                os.unlink(path)
            except OSError:
                pass


__all__ = ["DEFAULT_TIMEOUT_S", "StackRequests", "stacks_dir", "take_now"]
