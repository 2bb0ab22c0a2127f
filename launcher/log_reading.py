"""Read the end of a task's log and find the exception that ended it.

The report's root cause shows, for any task (a user's own script included), the exception from the
last Python traceback in its log (type and the start of its message), then the log's tail. Logs are
read as the launcher wrote them, but a run directory may hold anything: only a regular file is
read (never through a symbolic link, never a FIFO that would block), and only its last 4 MiB.
"""

from __future__ import annotations

import os
import re
import stat
from collections import deque
from dataclasses import dataclass

__all__ = ["LoggedException", "last_exception", "read_end", "tail_lines"]

READ_LIMIT = 4 << 20
_TRACEBACK = "Traceback (most recent call last):"
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")
_CPP_LOG = re.compile(r"^[IWEF]\d{4} ")  # TensorFlow's C++ log lines end an exception's message
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
        """One line: `UnknownError: Could not start gRPC server`, whitespace collapsed, cut at `limit`."""
        text = " ".join(f"{self.short_type}: {self.message}".split()) if self.message else self.short_type
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


def last_exception(text: str) -> LoggedException | None:
    """The exception of the last Python traceback in `text`; None when there is no traceback or it
    was cut before its exception line. With chained exceptions, the last one printed."""
    lines = text.splitlines()
    start = next((i for i in range(len(lines) - 1, -1, -1) if lines[i].rstrip() == _TRACEBACK), None)
    if start is None:
        return None
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
        if _CPP_LOG.match(line) or line.startswith(_CHAINED) or line.rstrip() == _TRACEBACK:
            break
        message.append(line)
    while message and not message[-1].strip():
        message.pop()
    return LoggedException(found.group(1), "\n".join(message))
