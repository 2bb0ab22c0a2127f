"""One thread that reads every SSH channel of a relay (launcher/transport/ssh_relay.py).

A paramiko channel's `fileno()` is a pipe that paramiko makes readable while the channel holds data
and for good once it has ended, so one selector serves every channel of a relay: a thread per host
would cost a relay of 256 hosts 256 more threads and their memory. A paused channel is left out of
the selector until it is resumed (its data waits in paramiko's buffer, then its window). Channels
are added, paused, resumed and ended from other threads through a queue of changes the pump thread
applies itself; a channel's pipe is closed only after the pump let go of it.
"""

from __future__ import annotations

import logging
import os
import selectors
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

CHUNK = 1 << 16
ROUND = 4  # chunks read from one channel before the others (and the changes asked for) get their turn


class Pump:
    """`forward(ident, data)` for what a channel prints; `ended(ident)` once, when it ended (its pipe then
    no longer watched)."""

    def __init__(self, forward: Callable[[int, bytes], None], ended: Callable[[int], None]) -> None:
        self._forward, self._ended = forward, ended
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._lock = threading.Lock()
        self._changes: list[tuple[str, int, Any]] = []
        self._channels: dict[int, Any] = {}  # ident -> its paramiko channel, while watched or paused
        self._watched: dict[int, int] = {}  # ident -> the fd registered for it
        threading.Thread(target=self._run, daemon=True, name="pump").start()

    def add(self, ident: int, channel: Any) -> None:
        self._change("add", ident, channel)

    def pause(self, ident: int) -> None:
        self._change("pause", ident, None)

    def resume(self, ident: int) -> None:
        self._change("resume", ident, None)

    def drop(self, ident: int) -> None:
        """Stop watching it (it is being closed): `ended` follows, as for a channel that ended by itself."""
        self._change("drop", ident, None)

    def _change(self, what: str, ident: int, channel: Any) -> None:
        with self._lock:
            self._changes.append((what, ident, channel))
        try:
            os.write(self._wake_w, b".")
        except BlockingIOError:  # the pipe is full of wake-ups already: one is enough
            pass

    def _run(self) -> None:
        while True:
            for key, _ in self._selector.select():
                try:
                    if key.data is None:
                        self._apply()
                    else:
                        self._drain(key.data)
                except Exception:  # a bug must not stop every other channel: this one ends, the rest go on
                    log.exception("the SSH relay's reader")
                    if key.data is not None and key.data in self._channels:
                        self._end(key.data)

    def _apply(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass
        with self._lock:
            changes, self._changes = self._changes, []
        for what, ident, channel in changes:
            if what == "add":
                self._channels[ident] = channel
                self._watch(ident)
            elif what == "pause":
                self._unwatch(ident)
            elif what == "resume":
                self._watch(ident)
            elif what == "drop" and ident in self._channels:
                self._end(ident)

    def _watch(self, ident: int) -> None:
        channel = self._channels.get(ident)
        if channel is not None and ident not in self._watched:
            fd = channel.fileno()
            self._selector.register(fd, selectors.EVENT_READ, ident)
            self._watched[ident] = fd

    def _unwatch(self, ident: int) -> None:
        fd = self._watched.pop(ident, None)
        if fd is not None:
            self._selector.unregister(fd)

    def _drain(self, ident: int) -> None:
        channel = self._channels[ident]
        try:
            for _ in range(ROUND):
                if not channel.recv_ready():
                    break
                data = channel.recv(CHUNK)  # does not wait: data is there
                if not data:
                    break
                self._forward(ident, data)
            if channel.recv_ready() or not (channel.eof_received or channel.closed):
                return  # more to read at its next turn, or nothing yet
        except (OSError, EOFError, ValueError):  # a broken channel has ended like one at its end
            pass
        self._end(ident)

    def _end(self, ident: int) -> None:
        self._unwatch(ident)
        del self._channels[ident]
        self._ended(ident)
