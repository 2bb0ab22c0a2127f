"""Start tasks on this machine, each in its own process group under the task_runner helper.

The helper leads the task's process group and holds a lifeline pipe to the launcher: when the
launcher dies, even by SIGKILL, the pipe closes and the helper kills the group. TF_CONFIG goes
into the task's environment only, never into the launcher's. Output is read line by line,
written to the attempt's log file and handed to the sink with the task's name.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from launcher import task_runner
from launcher.plan import TaskLaunch
from worker.contract import EVENT_FD_VAR, EXIT
from launcher.transport.base import EventSink, OutputLine, TaskExit, TaskExited, exit_from_report, parse_report

log = logging.getLogger(__name__)

_HELPER = str(Path(task_runner.__file__).resolve())
# Each task gets a process group of its own (so a stop reaches all of it and nothing else), but
# stays in the launcher's session: Linux schedules every session as its own CPU group
# (autogroup), which measurably slowed two synchronous workers sharing two cores.
_OWN_GROUP: dict[str, Any] = {"process_group": 0} if sys.version_info >= (3, 11) else {"start_new_session": True}
_DRAIN_TIMEOUT_S = 1.0


def group_alive(pgid: int) -> bool:
    """Whether any process of group `pgid` is still running (zombies do not count)."""
    import psutil  # only needed at the end of a task; keeps the launcher's start-up short

    for proc in psutil.process_iter(["status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(proc.pid) == pgid:
                return True
        except (ProcessLookupError, psutil.NoSuchProcess):  # exited while we looked
            continue
    return False


class LocalTask:
    """One running local task. Invariant: after `gone()` is true, no process of it remains."""

    def __init__(self, launch: TaskLaunch, sink: EventSink) -> None:
        self.launch = launch
        self._sink = sink
        self._exit_report: dict[str, object] | None = None
        Path(launch.log_path).parent.mkdir(parents=True, exist_ok=True)
        read_fd, write_fd = os.pipe()
        env = {**os.environ, **launch.env, EVENT_FD_VAR: str(write_fd)}
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", _HELPER, "--", *launch.argv],
                cwd=launch.cwd,
                env=env,
                stdin=subprocess.PIPE,  # the lifeline: closes when the launcher dies
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                pass_fds=(write_fd,),
                **_OWN_GROUP,
            )
        finally:
            os.close(write_fd)
        self.pid = self._proc.pid
        self.started_at = time.time()
        assert self._proc.stdout is not None
        self._output = threading.Thread(target=self._read_output, args=(self._proc.stdout,), daemon=True, name=f"out-{launch.name}")
        self._events = threading.Thread(target=self._read_events, args=(read_fd,), daemon=True, name=f"ev-{launch.name}")
        self._waiter = threading.Thread(target=self._wait, daemon=True, name=f"wait-{launch.name}")
        for thread in (self._output, self._events, self._waiter):
            thread.start()

    def _read_output(self, stream: IO[bytes]) -> None:
        with open(self.launch.log_path, "ab", buffering=0) as log_file:
            for raw in stream:
                log_file.write(raw)
                self._sink(OutputLine(self.launch.name, raw.decode("utf-8", "replace").rstrip("\r\n")))
        stream.close()

    def _read_events(self, fd: int) -> None:
        with os.fdopen(fd, "r", encoding="utf-8", errors="replace") as stream:
            for raw in stream:
                report = parse_report(self.launch.name, raw)
                if report is None:
                    continue
                if report.data["event"] == EXIT:
                    self._exit_report = report.data
                else:
                    self._sink(report)

    def _wait(self) -> None:
        status = self._proc.wait()
        # Let the readers drain so the last lines are logged before the exit is announced;
        # a background grandchild may hold the pipes open, so do not wait forever.
        self._events.join(_DRAIN_TIMEOUT_S)
        self._output.join(_DRAIN_TIMEOUT_S)
        task_exit = exit_from_report(self._exit_report)
        if task_exit is None:  # the helper itself was killed (a SIGKILL to the whole group)
            task_exit = TaskExit(None, -status) if status < 0 else TaskExit(status, None)
        self._sink(TaskExited(self.launch.name, task_exit))

    def signal(self, signum: int) -> None:
        try:
            os.killpg(self.pid, signum)
        except ProcessLookupError:  # the whole group has already exited
            pass

    def gone(self) -> bool:
        return self._proc.poll() is not None and not group_alive(self.pid)

    def close(self) -> None:
        if self._proc.stdin is not None:
            try:
                self._proc.stdin.close()
            except BrokenPipeError:  # helper already exited
                pass


class LocalTransport:
    """Starts tasks on this machine."""

    def start(self, launch: TaskLaunch, sink: EventSink) -> LocalTask:
        log.debug("starting %s: %s", launch.name, launch.argv)
        return LocalTask(launch, sink)

    def close(self) -> None:
        """Nothing shared to release; each LocalTask owns its own resources."""
