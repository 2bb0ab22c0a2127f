"""Report progress to the launcher on the task's event channel.

The launcher hands every task a pipe (its number in TFLAUNCH_EVENT_FD). Reports are JSON lines:
`joined` once the strategy is built, `step` as training advances, `done` at the end. User
scripts run through `launch -- python train.py` may call `report(...)` too; without a launcher
(no TFLAUNCH_EVENT_FD) every call is a no-op. Never raises: reporting must not break training
(only a fault `launch --inject` asked for, at its step, ends the process on purpose).

Imports nothing of the project's other packages: a user script runs with its own directory first
on sys.path, where a `worker.py` or `launcher.py` of the user's would stand in for them. The two
names it shares with worker/contract.py are checked equal by tests/unit/test_contract.py.
"""

from __future__ import annotations

import json
import operator
import os
import time
from typing import Any

from tflaunch.faults import FAULT_VAR, injected

EVENT_FD_VAR = "TFLAUNCH_EVENT_FD"  # worker.contract.EVENT_FD_VAR
RECORD = "record"  # worker.contract.RECORD: a row of a record file


def report(event: str, **fields: Any) -> None:
    """Send one event, e.g. `report("step", step=120, loss=0.31)`."""
    fd = os.environ.get(EVENT_FD_VAR)
    if not fd:
        return
    for key in ("step", "total"):  # numpy's integers (a TensorFlow step counter's .numpy()) as numbers
        if key in fields:
            fields[key] = _integer(fields[key])
    payload = json.dumps({"event": event, "time": time.time(), **fields}, default=str)
    try:
        os.write(int(fd), (payload + "\n").encode())
    except (OSError, ValueError):  # the launcher is gone or the fd is not ours; keep training
        pass
    step = fields.get("step")
    if event == "step" and type(step) is int and os.environ.get(FAULT_VAR):
        injected().at_step(step)  # an `--inject` rehearsal: fired once its step is reported


def _integer(value: Any) -> Any:
    """An integer of any kind as a Python int (not a bool); anything else as it is."""
    if isinstance(value, int):
        return value
    try:
        return operator.index(value)
    except Exception:  # noqa: BLE001 - whatever its __index__ does, reporting never raises
        return value


def record(stream: str, row: dict[str, Any], fallback_path: str) -> None:
    """One row of a run's record file (metrics, eval). Under a launcher it travels on the event
    channel and the launcher writes it into its own run directory, wherever this task runs;
    without one it is appended to `fallback_path` here."""
    if os.environ.get(EVENT_FD_VAR):
        report(RECORD, stream=stream, row=row)
        return
    os.makedirs(os.path.dirname(fallback_path) or ".", exist_ok=True)
    with open(fallback_path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(row, default=str) + "\n")
