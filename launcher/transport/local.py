"""Open agents on this machine: a child process per local host, its pipes the channel.

The agent leads a process group of its own (a Ctrl-C at the terminal reaches the launcher, which
decides, not the agent or the tasks) and holds its standard input as the lifeline: when the
launcher dies, even by SIGKILL, the pipe closes and the agent kills every task. Its standard
error joins its output, so a python that cannot start says why in the same place.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from typing import IO, Any

from launcher.agent.bootstrap import agent_argv
from launcher.common.errors import HostError
from launcher.transport.channel import Channel

# A local agent never ends itself on silence (its pipe closes with the launcher); it beats four
# times a second whatever the spec's timeout, so its first line is the same for every launch and
# can be sent before the spec is even read (start_early).
LOCAL_BEAT_S = 1.0
_OWN_GROUP: dict[str, Any] = {"process_group": 0} if sys.version_info >= (3, 11) else {"start_new_session": True}
_CLOSE_WAIT_S = 10.0


def exit_text(code: int | None) -> str | None:
    if code is None:
        return None
    return f"the agent exited with code {code}" if code >= 0 else f"the agent was killed by signal {-code}"


def pipe_channel(proc: subprocess.Popen[bytes]) -> Channel:
    """A channel over a child's pipes (a local agent, or an srun running agents)."""
    stdin = proc.stdin
    assert stdin is not None and proc.stdout is not None  # stdin=PIPE, stdout=PIPE

    def write(data: bytes) -> None:
        stdin.write(data)
        stdin.flush()

    def close() -> None:
        try:
            stdin.close()
        except OSError:  # the agent already exited
            pass
        try:
            proc.wait(timeout=_CLOSE_WAIT_S)
        except subprocess.TimeoutExpired:  # an agent that never leaves: not ours to keep
            proc.kill()
            proc.wait()

    def ended() -> str | None:
        """Asked once the output ended: the process is on its way out, so wait for its status."""
        try:
            return exit_text(proc.wait(timeout=1))
        except subprocess.TimeoutExpired:  # it closed its output but lives on
            return None

    return Channel(write, proc.stdout, close, ended)


# Agents started ahead share the cores with the launcher's own start-up: on two cores, two ahead
# brought the first task on earliest (four slowed the validation they were meant to overlap).
EARLY_AGENTS_MOST = max(2, len(os.sched_getaffinity(0)) // 2)
_early: dict[tuple[str, bytes], list[tuple[subprocess.Popen[bytes], Channel]]] = {}


def start_early(python: str, first_line: bytes, count: int = 1) -> None:
    """Start local agents ahead (`count`, at most EARLY_AGENTS_MOST), while the launcher still imports
    and validates: their own start-up (an interpreter, the agent's code) then overlaps the
    launcher's on another core. `open_local` takes one for each local host run by the same python
    with the same first line; those not taken are closed with the transport, or end by themselves
    when this process does."""
    started = _early.setdefault((python, first_line), [])
    for _ in range(min(count, EARLY_AGENTS_MOST)):
        try:
            started.append(_spawn("localhost", python, first_line))
        except HostError:  # the usual start will say why
            return


def close_early() -> None:
    while _early:
        for _, channel in _early.popitem()[1]:
            channel.close()


def open_local(address: str, python: str, first_line: bytes) -> Channel:
    waiting = _early.get((python, first_line), [])
    while True:
        try:
            proc, channel = waiting.pop(0)  # hosts are opened side by side: one pop each, under the GIL
        except IndexError:
            return _spawn(address, python, first_line)[1]
        if proc.poll() is None:
            return channel
        channel.close()


def _spawn(address: str, python: str, first_line: bytes) -> tuple[subprocess.Popen[bytes], Channel]:
    try:
        proc = subprocess.Popen(
            agent_argv(python),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            **_OWN_GROUP,
        )
    except OSError as error:
        raise HostError(address, f"cannot run {python!r}: {error.strerror}; set python for this host") from None
    channel = pipe_channel(proc)
    channel.kill = proc.kill  # given up for its silence: frozen, and ours to end (launcher/transport/channel.py)
    _hold(proc.stdin, len(first_line))
    try:
        channel.write(first_line)
    except OSError:  # it died at once; the session reads why
        pass
    return proc, channel


def _hold(stream: IO[bytes] | None, size: int) -> None:
    """Let the pipe hold `size` bytes, so that the agent's first line (its code, about 450 KiB) is
    written at once and the launcher goes on while the agent's interpreter starts; a pipe of the
    default 64 KiB held it until the agent had read the rest (about 20 ms). Where the pipe cannot
    grow (the user's pipe budget is spent), the line is written as the agent reads it."""
    try:
        if stream is not None and hasattr(fcntl, "F_SETPIPE_SZ"):
            fcntl.fcntl(stream.fileno(), fcntl.F_SETPIPE_SZ, size)
    except OSError:
        pass
