"""Waiting for what a test awaits (a line in a log, a daemon up, a process gone), with a deadline and
a failure that says what never came."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(
    predicate: Callable[[], object],
    timeout: float,
    what: Callable[[], str] | str,
    interval: float = 0.05,
    while_alive: Callable[[], bool] | None = None,
) -> None:
    """Poll `predicate` until it holds. After `timeout` (or once `while_alive()` is false: the process
    that would make it hold has ended), fail with `what` (a callable is evaluated then, e.g. the logs)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        ended = while_alive is not None and not while_alive()
        if ended or time.monotonic() > deadline:
            said = what() if callable(what) else what
            why = "the process it waited on ended" if ended else f"timed out after {timeout:g}s"
            raise AssertionError(f"{why} waiting for {said}")
        time.sleep(interval)


def wait_for_text(path: object, text: str, timeout: float = 30, while_alive: Callable[[], bool] | None = None) -> None:
    """Wait until the file at `path` holds `text`; on failure show the file's end."""
    from pathlib import Path

    file = Path(str(path))

    def holds() -> bool:
        return file.exists() and text in file.read_text(errors="replace")

    def end() -> str:
        shown = file.read_text(errors="replace")[-3000:] if file.exists() else "(no file)"
        return f"{text!r} in {file}; it ends:\n{shown}"

    wait_for(holds, timeout, end, while_alive=while_alive)
