"""Write the JSON error file the launcher reads to name a failure's root cause."""

from __future__ import annotations

import importlib
import json
import os
import re
import time
import traceback

from worker.files import write_atomic

# Where TensorFlow ran the failed op (`{{function_node __wrapped__...}} `), not what failed:
# launcher.common.log_reading's
_FUNCTION_NODE = re.compile(r"^\{\{function_node [^}]*\}\}\s*")
_NOT_THEIRS = (
    os.path.dirname(os.path.abspath(__file__)) + os.sep,
    os.path.dirname(importlib.__file__) + os.sep,
    "<frozen ",
)


def user_traceback(error: BaseException) -> str:
    """The traceback of what a mistake in the user's code raised (an import failing inside their
    module), without the runtime's own frames or importlib's; empty when none of the frames are theirs."""
    cause = error.__cause__
    if cause is None:
        return ""
    frames = [
        frame for frame in traceback.extract_tb(cause.__traceback__) if not frame.filename.startswith(_NOT_THEIRS)
    ]
    if not frames:
        return ""
    shown = "".join(traceback.format_list(frames)) + "".join(traceback.format_exception_only(cause))
    return "Traceback (most recent call last):\n" + shown


def write_error_file(path: str, task: str, error: BaseException, *, usage: bool = False) -> None:
    """Record type, message, traceback and time of an uncaught exception (best effort). A usage
    error (a mistake in what the worker was asked to run) keeps only the user's own frames."""
    data = {
        "task": task,
        "type": type(error).__name__,
        "message": _FUNCTION_NODE.sub("", str(error))[:4000],
        "traceback": (user_traceback(error) if usage else "".join(traceback.format_exception(error)))[-8000:],
        "time": time.time(),
        "pid": os.getpid(),
    }
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        write_atomic(path, json.dumps(data, indent=2))
    except OSError:  # the error itself still reaches the log through stderr
        pass
