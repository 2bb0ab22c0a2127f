"""The wire format between the launcher and a host agent, both directions. Standard library only.

Agent to launcher: one frame per line, `\\x1e KIND ID JSON\\n`, so a frame survives any carrier
that keeps lines whole (a pipe, an SSH channel, srun's `--label`ed output). KIND is one of

    O  task ID's output: a JSON string (bytes decoded with surrogateescape, so a log gets the
       exact bytes back)
    E  task ID's event: a JSON object (the task's own reports, and the agent's: exit, stopped,
       continued, warm, spare)
    A  the agent's own message (ID is the request it answers, 0 for none): ready, alive, answer

Anything else on the agent's output (a shell's "command not found", a crash's traceback) is the
agent's raw text: kept for the error message. Launcher to agent: one JSON command per line on
the agent's standard input (see launcher/agent/main.py for the commands).
"""

from __future__ import annotations

import json
from typing import Any

MARK = "\x1e"
OUTPUT = "O"
EVENT = "E"
AGENT = "A"
KINDS = (OUTPUT, EVENT, AGENT)
OUTPUT_CHUNK = 16 * 1024  # bytes of a task's output per frame: the launcher's memory per read stays small
MAX_EVENT_BYTES = 1024 * 1024  # a longer event line is dropped (and says so) before it is framed
# The longest frame: an event line at its bound, or an exit with two mirrored files of 64 KiB whose
# every byte became a 6-character JSON escape (an output chunk is smaller still).
MAX_FRAME_BYTES = max(6 * OUTPUT_CHUNK, MAX_EVENT_BYTES, 2 * 6 * 64 * 1024) + 4096


def output_frame(task: int, data: bytes) -> bytes:
    text = json.dumps(data.decode("utf-8", "surrogateescape"))
    return f"{MARK}{OUTPUT} {task} {text}\n".encode()


def event_frame(task: int, event: dict[str, Any] | str) -> bytes:
    """`event` as a dict, or a task's raw event line already known to be one line."""
    text = event if isinstance(event, str) else json.dumps(event)
    return f"{MARK}{EVENT} {task} {text}\n".encode("utf-8", "surrogateescape")


def agent_frame(message: dict[str, Any], answers: int = 0) -> bytes:
    return f"{MARK}{AGENT} {answers} {json.dumps(message)}\n".encode()


def parse_frame(line: bytes) -> tuple[str, int, Any] | None:
    """(kind, id, payload) of one frame line; None for anything that is not a well-formed frame.
    An output payload comes back as the task's exact bytes."""
    if not line.startswith(MARK.encode()):
        return None
    try:
        head, ident, body = line[1:].rstrip(b"\n").split(b" ", 2)
        kind = head.decode()
        value = json.loads(body)
    except ValueError:  # a cut or garbled line: not a frame
        return None
    if kind not in KINDS or not ident.isdigit():
        return None
    if kind == OUTPUT:
        if not isinstance(value, str):
            return None
        return kind, int(ident), value.encode("utf-8", "surrogateescape")
    if not isinstance(value, dict):
        return None
    return kind, int(ident), value
