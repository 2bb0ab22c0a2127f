"""A task's processes on its host: killing a process group, an exit code read without reaping, a
process's state, the result and error files a task mirrors back, and a program found on PATH.
Standard library only.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
from collections.abc import Callable

from launcher.agent.keeper import proc_stat

Send = Callable[[bytes], None]


MIRROR_MAX_BYTES = (
    64 * 1024
)  # result and error files are small JSON; a bigger one is not sent (the exit frame must fit)


def which(program: str) -> str | None:
    """Where `program` is on PATH, as shutil.which finds it on POSIX. Not shutil's: importing it loads
    the compression modules it tries, 0.6 MiB in every agent, which each agent's exit unmaps again."""
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(folder, program)
        if os.access(path, os.F_OK | os.X_OK) and not os.path.isdir(path):
            return path
    return None


def kill_group(pgid: int, signum: int = signal.SIGKILL) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):  # the group is empty already (or was never ours)
        pass


def close_fds(*fds: int) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:  # already closed
            pass


def exit_code_unreaped(proc: subprocess.Popen[bytes]) -> int | None:
    """`proc`'s exit code (negative: its signal) once it has ended, None before; it is not reaped, so
    its pid stays its own until the keeper forgot it."""
    if proc.returncode is not None:
        return proc.returncode
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # reaped already
        return proc.poll()
    if info is None:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def process_state(pid: int) -> str | None:
    """The one-letter state in /proc/PID/stat ('T' is stopped); None when it cannot be read."""
    fields = proc_stat(pid)
    return fields[0].decode("ascii", "replace") if fields else None


def read_mirrored(path: str) -> str | None:
    """A result or error file the task wrote in the scratch directory, removed once read; None when
    there is none, or it is not a regular file (a FIFO must not block the agent)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:  # the task never wrote it (or left a link)
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, MIRROR_MAX_BYTES + 1)
    finally:
        os.close(fd)
        remove_quietly(path)
    return data.decode("utf-8", "replace")


def remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:  # already gone (or never made)
        pass
