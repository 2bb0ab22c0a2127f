"""The frames between the launcher and its SSH relays (launcher/transport/ssh_relay.py): one pipe each
way, many hosts' channels on it.

A frame is a kind (one byte), a number (the channel's, or for OPEN and LOST the host's index) and a
payload, length first. Both ends are this launcher's own processes, started together from the same
installation: what the launcher sends a relay may be a pickle; what a relay sends back, which can
quote what a host said, never is.
"""

from __future__ import annotations

import struct
import threading
from typing import BinaryIO

_HEADER = struct.Struct("!cII")

# launcher -> relay
OPEN = b"o"  # number: the channel id; payload: pickle of (host index, SshTarget, command, first line)
DATA = b"d"  # bytes for the channel's standard input
CLOSE = b"c"  # end the channel once what was sent before it is written
PAUSE = b"p"  # stop reading the channel: the launcher holds enough of its output
RESUME = b"r"
LOST = b"l"  # number: the host's index; its connection is dropped, the next open connects afresh

# relay -> launcher
OPENED = b"O"
FAILED = b"F"  # payload: JSON [address, cause], a HostError's parts
OUTPUT = b"D"  # what the channel's agent printed
ENDED = b"E"  # the channel ended; payload: why (utf-8), or empty when the far side gave no status
LOG = b"L"  # number: a logging level; payload: JSON [logger name, message]
LAUNCHER_KINDS = frozenset({OPEN, DATA, CLOSE, PAUSE, RESUME, LOST})
RELAY_KINDS = frozenset({OPENED, FAILED, OUTPUT, ENDED, LOG})
MAX_RELAY_PAYLOAD = 1 << 20  # a relay's frames: output in chunks of 64 KiB, a message, a log record


class FrameWriter:
    """Whole frames onto one stream, from any thread."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def send(self, kind: bytes, number: int, payload: bytes = b"") -> None:
        """OSError or ValueError when the stream is closed."""
        with self._lock:
            self._stream.write(_HEADER.pack(kind, number, len(payload)))
            if payload:
                self._stream.write(payload)
            self._stream.flush()


def read_frame(
    stream: BinaryIO, kinds: frozenset[bytes] | None = None, most: int | None = None
) -> tuple[bytes, int, bytes] | str | None:
    """The next frame, or None at the end of the stream (a frame cut short is an end too); with `kinds` and
    `most`, a header of another kind or a longer payload is not waited for: what was wrong with it."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    kind, number, length = _HEADER.unpack(header)
    if kinds is not None and kind not in kinds:
        return f"sent what is not a frame ({header!r})"
    if most is not None and length > most:
        return f"sent a frame of {length} bytes (at most {most})"
    payload = stream.read(length) if length else b""
    if len(payload) < length:
        return None
    return kind, number, payload
