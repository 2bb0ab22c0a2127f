"""Read the end of a task's log and find the exception that ended it.

The report's root cause shows, for any task (a user's own script included), the exception from the
last Python traceback in its log (type and the start of its message), then the log's tail. A
traceback that a thread printed (`Exception in thread NAME:`, such as TensorFlow's shutdown noise)
counts only when the main thread printed none after it; a task that died without any traceback
gives its last fatal TensorFlow log line (`F0000 ... file.cc:12] Check failed: ...`). Logs are
read as the launcher wrote them, but a run directory may hold anything: only a regular file is
read (never through a symbolic link, never a FIFO that would block), and only its last 4 MiB.
"""

from __future__ import annotations

import os
import re
import stat
from collections import deque
from dataclasses import dataclass

__all__ = ["LoggedException", "ending_exception", "last_exception", "read_end", "tail_lines"]

READ_LIMIT = 4 << 20
_TRACEBACK = "Traceback (most recent call last):"
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")
_CPP_LOG = re.compile(r"^[IWEF]\d{4} ")  # TensorFlow's C++ log lines end an exception's message
_CPP_FATAL = re.compile(r"^F\d{4} [\d:.]+\s+\d+ ([^\]\s]+)\] (.*)$")  # absl's: F0000 00:00:1.2  345 file.cc:12] msg
_IN_THREAD = "Exception in thread "
_FUNCTION_NODE = re.compile(r"^\{\{function_node [^}]*\}\}\s*")  # where TensorFlow ran the op, not what failed
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*)(?::\s?(.*))?$")
_MESSAGE_LINES = 200  # of a message spread over lines (a tensor's repr); the rest is not needed
SHOWN_CHARS = 300


@dataclass(frozen=True)
class LoggedException:
    type: str  # as printed: `tensorflow.python.framework.errors_impl.UnknownError`
    message: str  # every line of it, as printed (up to _MESSAGE_LINES)

    @property
    def short_type(self) -> str:
        return self.type.rsplit(".", 1)[-1]

    def shown(self, limit: int = SHOWN_CHARS) -> str:
        """One line: `UnknownError: Could not start gRPC server`, whitespace collapsed, TensorFlow's
        `{{function_node ...}}` prefix left out, cut at `limit`."""
        message = _FUNCTION_NODE.sub("", self.message)
        text = " ".join(f"{self.short_type}: {message}".split()) if message else self.short_type
        return text if len(text) <= limit else text[: limit - 3] + "..."


def read_end(path: str, limit: int = READ_LIMIT) -> str:
    """The last `limit` bytes of a regular file as text; "" when it is missing or not a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:  # never written: the task did not get that far (or a link was planted)
        return ""
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return ""
        os.lseek(fd, max(info.st_size - limit, 0), os.SEEK_SET)
        chunks: list[bytes] = []
        read = 0
        while read < limit and (data := os.read(fd, min(1 << 20, limit - read))):
            chunks.append(data)
            read += len(data)
        return b"".join(chunks).decode("utf-8", errors="replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


def tail_lines(text: str, lines: int) -> list[str]:
    return list(deque(text.splitlines(), maxlen=lines))


def _main_traceback(lines: list[str]) -> int | None:
    """The index of the last traceback the main thread printed, else of the last one at all.

    A chained exception's tracebacks belong to the thread of the first one in its chain."""
    last = last_main = None
    in_thread = False
    before = ""  # the last non-blank line before this one
    for index, line in enumerate(lines):
        if line.rstrip() == _TRACEBACK:
            in_thread = before.startswith(_IN_THREAD) or (before.startswith(_CHAINED) and in_thread)
            last = index
            if not in_thread:
                last_main = index
        if line.strip():
            before = line
    return last_main if last_main is not None else last


def _last_fatal(lines: list[str]) -> LoggedException | None:
    for line in reversed(lines):
        found = _CPP_FATAL.match(line.rstrip())
        if found is not None:
            return LoggedException("fatal", f"{found.group(2)} ({found.group(1)})")
    return None


def last_exception(text: str) -> LoggedException | None:
    """The exception of the main thread's last Python traceback in `text` (with chained exceptions,
    the last one printed); else of a thread's; else the last fatal TensorFlow log line, as type
    `fatal`. None when there is none of these or the traceback was cut before its exception line."""
    lines = text.splitlines()
    start = _main_traceback(lines)
    if start is None:
        return _last_fatal(lines)
    index = start + 1
    while index < len(lines) and (lines[index].startswith((" ", "\t")) or not lines[index].strip()):
        index += 1  # the frames: `  File ...`, the source line, the carets
    if index >= len(lines):
        return None
    found = _EXCEPTION.match(lines[index].rstrip())
    if found is None:
        return None
    message = [found.group(2) or ""]
    for line in lines[index + 1 : index + _MESSAGE_LINES]:
        if _CPP_LOG.match(line) or line.startswith((*_CHAINED, _IN_THREAD)) or line.rstrip() == _TRACEBACK:
            break
        message.append(line)
    while message and not message[-1].strip():
        message.pop()
    return LoggedException(found.group(1), "\n".join(message))


def ending_exception(text: str) -> LoggedException | None:
    """The last Python traceback's exception when its line is the last the log holds (TensorFlow's
    C++ log lines and blank lines after it aside): how the process ended. A message of several lines,
    or anything printed after it, gives None: it cannot be told from a traceback printed and handled."""
    found = last_exception(text)
    if found is None or found.type == "fatal":
        return None
    lines = [line.rstrip() for line in text.splitlines() if line.strip() and not _CPP_LOG.match(line)]
    first = found.message.split("\n", 1)[0]
    expected = f"{found.type}: {first}" if first else found.type
    return found if lines and lines[-1] in (expected, f"{found.type}:{first}") else None
