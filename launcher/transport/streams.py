"""The readers every transport runs for one task: output, events, and the exit.

Whatever carries a task (a local pipe, an SSH channel), three things arrive from it: output lines
(written to the attempt's log file and handed to the sink with the task's name), event lines
(JSON reports; the helper's `exit`, `files` and `alive` reports are kept back), and the end of the
carrier. The time anything last arrived is kept, for transports that must notice silence.
The exit is announced only after both readers drained, so the last lines are logged first; a
background grandchild may hold a pipe open, so the drain waits a bounded time.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from launcher.plan import TaskLaunch
from launcher.private_files import make_private_dir, open_private
from launcher.transport.base import EventSink, ExitStatus, OutputLine, TaskExited, exit_from_report, parse_report
from worker.contract import ALIVE, ERROR_FILE_VAR, EXIT, FILES, RESULT_FILE_VAR

DRAIN_TIMEOUT_S = 1.0
MAX_LINE_BYTES = 64 * 1024  # a longer line is cut for the console (the log file keeps all of it)
CUT_MARKER = " [... line cut at 64 KiB]"


def bounded_lines(stream: Any, limit: int = MAX_LINE_BYTES) -> Iterator[tuple[bytes, bool]]:
    """(chunk, complete) pairs: whole lines, or a line's pieces of at most `limit` bytes, so one
    endless line never has to fit in memory. `complete` is false for every piece but a line's last."""
    while True:
        chunk = stream.readline(limit)
        if not chunk:
            return
        yield chunk, chunk.endswith(b"\n")


class TaskStreams:
    """Runs the readers of one task on daemon threads; the sink gets TaskExited exactly once.

    `wait()` blocks until the carrier ends and returns the exit to report when the helper sent
    none (it was killed itself, or the connection dropped). `on_files` receives the contents of
    files a remote helper sent back."""

    def __init__(
        self,
        name: str,
        log_path: str,
        sink: EventSink,
        output: Iterable[bytes],
        events: Iterable[bytes],
        wait: Callable[[], ExitStatus],
        on_files: Callable[[dict[str, Any]], None] | None = None,
        on_alive: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self._name = name
        self._log_path = log_path
        self._sink = sink
        self._wait_for_end = wait
        self._on_files = on_files
        self._on_alive = on_alive
        self.last_heard = time.monotonic()
        self._exit_report: dict[str, Any] | None = None
        make_private_dir(Path(log_path).parent)
        self._output = threading.Thread(target=self._read_output, args=(output,), daemon=True, name=f"out-{name}")
        self._events = threading.Thread(target=self._read_events, args=(events,), daemon=True, name=f"ev-{name}")
        self._waiter = threading.Thread(target=self._wait, daemon=True, name=f"wait-{name}")
        for thread in (self._output, self._events, self._waiter):
            thread.start()

    def _read_output(self, stream: Any) -> None:
        cutting = False  # inside a line already shown cut: the rest goes to the log only
        with open_private(self._log_path, "ab") as log_file:
            for raw, complete in bounded_lines(stream):
                self.last_heard = time.monotonic()
                log_file.write(raw)
                if not cutting:
                    text = raw.decode("utf-8", "replace").rstrip("\r\n")
                    self._sink(OutputLine(self._name, text if complete else text + CUT_MARKER))
                cutting = not complete

    def _read_events(self, stream: Iterable[bytes]) -> None:
        for raw in stream:
            self.last_heard = time.monotonic()
            report = parse_report(self._name, raw.decode("utf-8", "replace"))
            if report is None:
                continue
            kind = report.data["event"]
            if kind == ALIVE:
                if self._on_alive is not None:
                    self._on_alive(report.data)
            elif kind == EXIT:
                self._exit_report = report.data
            elif kind == FILES:
                if self._on_files is not None:
                    self._on_files(report.data.get("files") or {})
            else:
                self._sink(report)

    @property
    def ended(self) -> bool:
        return not self._waiter.is_alive()

    def _wait(self) -> None:
        fallback = self._wait_for_end()
        self._events.join(DRAIN_TIMEOUT_S)
        self._output.join(DRAIN_TIMEOUT_S)
        self._sink(TaskExited(self._name, exit_from_report(self._exit_report) or fallback))


def write_mirrored(launch: TaskLaunch, files: dict[str, Any]) -> None:
    """Write the result/error files a remote helper sent back where the launcher reads local ones."""
    targets = {RESULT_FILE_VAR: launch.result_path, ERROR_FILE_VAR: launch.error_path}
    for key, text in files.items():
        path = targets.get(key)
        if path is None or not isinstance(text, str):
            continue
        make_private_dir(os.path.dirname(path))
        tmp = f"{path}.tmp-{os.getpid()}"
        with open_private(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
