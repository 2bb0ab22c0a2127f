"""Report progress to the launcher on the task's event channel.

The launcher hands every task a pipe (its number in TFLAUNCH_EVENT_FD). Reports are JSON lines:
`joined` once the strategy is built, `step` as training advances, `done` at the end. User
scripts run through `launch -- python train.py` may call `report(...)` too; without a launcher
(no TFLAUNCH_EVENT_FD) every call is a no-op. Never raises: reporting must not break training.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from worker.contract import EVENT_FD_VAR


def report(event: str, **fields: Any) -> None:
    """Send one event, e.g. `report("step", step=120, loss=0.31)`."""
    fd = os.environ.get(EVENT_FD_VAR)
    if not fd:
        return
    payload = json.dumps({"event": event, "time": time.time(), **fields}, default=str)
    try:
        os.write(int(fd), (payload + "\n").encode())
    except (OSError, ValueError):  # the launcher is gone or the fd is not ours; keep training
        pass
