"""How a local agent starts its tasks and spares in the gang's private network.

The launcher makes the network (launcher/transport/local_network.py) and tells the agent where it is
before any task. As root, with no user namespace, the agent's command thread (the one that starts
every task and spare) enters the network itself, once: a network namespace is a thread's, so that
thread alone moves, and the processes it starts are born inside at no cost. A mount namespace (a
private resolv.conf) is entered the same way once the thread has its own working directory and root
(`unshare(CLONE_FS)`), which it then takes back. Otherwise (a user namespace, which a thread of a
process with threads cannot enter; or entering failed; or a start from another thread) each process
starts under `nsenter`, about a millisecond of CPU more per task.

Standard library only.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from launcher.agent.protocol import NetworkCommand

_CLONE_FS = 0x00000200
_FLAGS = {"net": 0x40000000, "mount": 0x00020000}


class _Network:
    enter: list[str] = []  # nsenter and its options; empty: the machine's network
    wd = False  # nsenter enters a mount namespace: give it the working directory again
    thread: int | None = None  # the thread that entered the network itself


def _libc() -> Any:
    import ctypes  # loaded by the agent only when it has a network to enter

    return ctypes.CDLL(None, use_errno=True)


def _enter_here(pid: int, namespaces: list[str]) -> bool:
    """Move this thread into `pid`'s namespaces (root, no user namespace); False when it could not
    (the thread is then as it was, or its network changed but the caller falls back to nsenter)."""
    if os.geteuid() != 0 or any(kind not in _FLAGS for kind in namespaces):
        return False
    try:
        libc = _libc()
        cwd = os.getcwd()
        for kind in namespaces:
            if kind == "mount" and libc.unshare(_CLONE_FS) != 0:
                return False
            fd = os.open(f"/proc/{pid}/ns/{'mnt' if kind == 'mount' else kind}", os.O_RDONLY | os.O_CLOEXEC)
            try:
                if libc.setns(fd, _FLAGS[kind]) != 0:
                    return False
            finally:
                os.close(fd)
        if "mount" in namespaces:
            os.chdir(cwd)  # entering a mount namespace took this thread to its root
        return os.readlink("/proc/thread-self/ns/net") == os.readlink(f"/proc/{pid}/ns/net")
    except (OSError, AttributeError):
        return False


def enter(command: NetworkCommand) -> None:
    """Every later task and spare starts in the network `command` names."""
    _Network.enter = list(command["enter"])
    _Network.wd = bool(command["wd"])
    _Network.thread = None
    if _enter_here(int(command["pid"]), list(command["namespaces"])):
        _Network.thread = threading.get_ident()


def active() -> bool:
    return bool(_Network.enter)


def wrapped(argv: list[str], cwd: str | None) -> list[str]:
    """`argv` as started from this thread: as it is outside a network, or inside one this thread
    entered; else under nsenter."""
    if not _Network.enter or _Network.thread == threading.get_ident():
        return argv
    wd = [f"--wd={os.path.abspath(cwd or os.getcwd())}"] if _Network.wd else []
    return [*_Network.enter, *wd, "--", *argv]


def forget() -> None:
    """The machine's network again for later starts (tests)."""
    _Network.enter, _Network.wd, _Network.thread = [], False, None
