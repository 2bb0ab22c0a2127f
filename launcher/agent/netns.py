"""How a local agent starts its tasks and spares in the gang's private network.

The launcher makes the network (launcher/transport/private_network.py) and tells the agent where it
is before any task. The agent opens its namespaces at once, checks that they are the ones the
launcher made (not another process's that took the pid), and holds them: they live as long as the
agent does, whatever becomes of the process that made them. As root, with no user namespace, the
agent's command thread (the one that starts every task and spare) also enters the network itself,
once: a network namespace is a thread's, so that thread moves, with the threads it starts later
(the preflight's probes: their ports are checked where the tasks bind them), and the processes it
starts are born inside at no cost. Otherwise (a user namespace, which a thread of a process with
threads cannot enter; or entering failed; or a start from another thread) each process starts
under `nsenter`: about a millisecond of CPU more per task.

Standard library only.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launcher.agent.protocol import NetworkCommand

_CLONE_NEWNET = 0x40000000


class _Network:
    fds: dict[str, int] = {}  # namespace kind -> a descriptor the agent holds
    nsenter = ""  # empty: the machine's network
    thread: int | None = None  # the thread that entered the network itself


def _enter_here(fd: int) -> bool:
    """Move this thread into the network namespace `fd` (root only); False when it could not."""
    if os.geteuid() != 0:
        return False
    try:
        import ctypes  # loaded by the agent only when it has a network to enter

        if ctypes.CDLL(None, use_errno=True).setns(fd, _CLONE_NEWNET) != 0:
            return False
        return os.readlink("/proc/thread-self/ns/net") == os.readlink(f"/proc/self/fd/{fd}")
    except (OSError, AttributeError):
        return False


def enter(command: NetworkCommand) -> None:
    """Every later task and spare starts in the network `command` names. Where its namespaces cannot
    be opened (the process that holds them is gone), every start fails, none outside."""
    forget()
    pid = int(command["pid"])
    try:
        for kind in command["namespaces"]:
            _Network.fds[kind] = os.open(f"/proc/{pid}/ns/{kind}", os.O_RDONLY | os.O_CLOEXEC)
        if os.readlink(f"/proc/self/fd/{_Network.fds['net']}") != command["net"]:
            raise OSError("not the network the launcher made: its process is gone and the pid is another's")
    except (OSError, KeyError):  # wrapped() then names a namespace that is not there: nsenter says so, per task
        forget()
    _Network.nsenter = str(command["nsenter"])
    if not _Network.fds:
        return
    if list(_Network.fds) == ["net"] and _enter_here(_Network.fds["net"]):
        _Network.thread = threading.get_ident()


def wrapped(argv: list[str]) -> list[str]:
    """`argv` as started from this thread: as it is outside a network, or inside one this thread (or
    the thread that started it) entered; else under nsenter, which opens the namespaces the agent
    holds through the agent's /proc (so the task inherits no descriptor of them)."""
    if not _Network.nsenter or _Network.thread == threading.get_ident():
        return argv
    if not _Network.fds:
        return [_Network.nsenter, "--net=/nonexistent/the-private-network-is-gone", "--", *argv]
    held = [f"--{kind}=/proc/{os.getpid()}/fd/{fd}" for kind, fd in _Network.fds.items()]
    credentials = ["--preserve-credentials"] if "user" in _Network.fds else []
    return [_Network.nsenter, *held, *credentials, "--", *argv]


def forget() -> None:
    """Later starts from other threads on the machine's network again, the descriptors closed (tests;
    a thread that entered the network stays in it)."""
    for fd in _Network.fds.values():
        try:
            os.close(fd)
        except OSError:
            pass
    _Network.fds, _Network.nsenter, _Network.thread = {}, "", None  # a new dict: the class's stays empty
