"""What a relay brought from one agent, until its session reads it (standard library only).

The relay's pipe carries every host's output, so no host's reader may hold it up: the frames of a
channel go into its inbox at once, and its session's reader takes lines from there. A session
whose reader falls behind (a slow console holds it) asks its relay to stop reading that one channel
once its inbox holds HIGH bytes, and to go on below LOW, as an SSH window would; never while the
reader waits for the rest of a line longer than that (it is bounded by the reader's limit).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

HIGH = 4 << 20
LOW = 1 << 20


class Inbox:
    """A channel's output: `feed` and `end` from the relay's reader, `readline` from the session's."""

    def __init__(self, pause: Callable[[], None], resume: Callable[[], None]) -> None:
        self._pause, self._resume = pause, resume
        self._cond = threading.Condition()
        self._data = bytearray()
        self._start = 0  # what was read already, cut off the front now and then
        self._scanned = 0  # no newline before this
        self._paused = False
        self._waiting = False  # the reader waits for more: a line not whole yet
        self.ended = False
        self.reason: str | None = None  # why the far side ended, when it said

    def _held(self) -> int:
        return len(self._data) - self._start

    def feed(self, data: bytes) -> None:
        with self._cond:
            if self.ended:
                return
            self._data += data
            self._cond.notify()
            pause = not self._paused and not self._waiting and self._held() >= HIGH
            self._paused = self._paused or pause
        if pause:
            self._pause()

    def end(self, reason: str | None) -> None:
        with self._cond:
            if not self.ended:
                self.ended, self.reason = True, reason
            self._cond.notify_all()

    def readline(self, limit: int = -1) -> bytes:
        """The next line with its newline, or at most `limit` bytes of one; b"" at the end."""
        with self._cond:
            while True:
                cut = self._data.find(b"\n", max(self._start, self._scanned)) + 1
                if cut:
                    break
                if 0 <= limit <= self._held() or self.ended:
                    cut = len(self._data)
                    break
                self._scanned = len(self._data)
                if self._paused:  # what it holds is part of one long line: it needs the rest
                    self._paused = False
                    self._cond.release()
                    try:
                        self._resume()
                    finally:
                        self._cond.acquire()
                    continue
                self._waiting = True
                self._cond.wait()
                self._waiting = False
            if limit >= 0:
                cut = min(cut, self._start + limit)
            line = bytes(self._data[self._start : cut])
            self._start = cut
            if self._start > len(self._data) // 2:
                del self._data[: self._start]
                self._scanned = max(0, self._scanned - self._start)
                self._start = 0
            resume = self._paused and self._held() < LOW
            self._paused = self._paused and not resume
        if resume:
            self._resume()
        return line

    def __iter__(self) -> Inbox:
        return self

    def __next__(self) -> bytes:
        line = self.readline()
        if not line:
            raise StopIteration
        return line
