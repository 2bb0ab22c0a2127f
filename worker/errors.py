"""Write the JSON error file the launcher reads to name a failure's root cause."""

from __future__ import annotations

import json
import os
import time
import traceback

from worker.files import write_atomic


def write_error_file(path: str, task: str, error: BaseException) -> None:
    """Record type, message, traceback and time of an uncaught exception (best effort)."""
    data = {
        "task": task,
        "type": type(error).__name__,
        "message": str(error)[:4000],
        "traceback": "".join(traceback.format_exception(error))[-8000:],
        "time": time.time(),
        "pid": os.getpid(),
    }
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        write_atomic(path, json.dumps(data, indent=2))
    except OSError:  # the error itself still reaches the log through stderr
        pass
