"""How the agent starts a task's process: leading a process group of its own, with the run's umask,
and killed should the agent die without cleaning up.

Where the agent has its keeper (launcher/agent/keeper.py: a process forked at the agent's start
that kills the listed groups once the agent is gone), the task starts as it is, with the group and
umask set by Popen itself, so Python keeps vfork, and the keeper lists it. Without a keeper (python
older than 3.11, or the keeper was killed), the kernel's parent-death signal does it: code in the
child (a `preexec_fn`) would make Python fork the whole agent for every task instead of using vfork
(~2 ms of the agent's CPU per task), so where util-linux's `setpriv` can set the death signal (2.33
and later) the task starts as `setpriv --pdeathsig KILL -- ARGV` (~1 ms of CPU per task for its
exec); else, or on a python older than 3.11 (no `process_group`), the `preexec_fn` does all three.
Neither way covers an agent that died between the spawn and the keeper's line or setpriv's `prctl`
(a moment); the `preexec_fn` exits then. A task the keeper does not take (it was killed, or read
nothing for WRITE_WAIT_S) is killed at once and started again the kernel's way.

Standard library only.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from launcher.agent import netns
from worker.contract import UMASK_VAR

if TYPE_CHECKING:
    from launcher.agent.keeper import Keeper

_PR_SET_PDEATHSIG = 1


_prctl: list[Any] = []  # libc's prctl once looked up (ctypes is loaded by the agent only, at its first task)


def _libc_prctl() -> Any:
    if not _prctl:
        try:
            import ctypes

            _prctl.append(ctypes.CDLL(None, use_errno=True).prctl)
        except (ImportError, OSError, AttributeError):  # not Linux, or no ctypes: the lifeline alone must do
            _prctl.append(None)
    return _prctl[0]


def _umask_of(env: dict[str, str]) -> int | None:
    try:
        return int(env[UMASK_VAR], 8)
    except (KeyError, ValueError):  # not set (an older launcher): the agent's own umask stays
        return None


def own_group_dying_with(agent_pid: int, env: dict[str, str]) -> Callable[[], None]:
    """In the child before exec: lead a process group of its own (so a stop reaches all of the task
    and nothing else), take the run's umask (files only their owner reads, by default), and get
    SIGKILL should the agent itself die without cleaning up (killed)."""
    umask = _umask_of(env)
    prctl = _libc_prctl()

    def setup() -> None:
        os.setpgrp()
        if umask is not None:
            os.umask(umask)
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != agent_pid:  # the agent died before the request took effect
                os._exit(137)

    return setup


def _exec_error(program: str, env: dict[str, str], cwd: str | None) -> OSError:
    """The error Popen raises for a program exec would not run (see `_startable`), raised without
    starting anything: under nsenter, the process that would say it is nsenter."""
    here = cwd or os.getcwd()
    folders = [""] if "/" in program else env.get("PATH", os.defpath).split(os.pathsep)
    if _found(program, env, cwd) is not None:
        code = errno.ENOEXEC  # there, executable, but no ELF and no working #! line
    elif any(os.path.exists(os.path.join(here, folder, program)) for folder in folders):
        code = errno.EACCES
    else:
        code = errno.ENOENT
    return OSError(code, os.strerror(code), program)


_setpriv: list[str | None] = []  # setpriv's path once found working, or None
_setpriv_lock = threading.Lock()


def setpriv() -> str | None:
    """A `setpriv` that takes `--pdeathsig` (looked for once, on a thread of its own at the agent's start)."""
    with _setpriv_lock:
        if not _setpriv:
            _setpriv.append(_working_setpriv())
        return _setpriv[0]


def _working_setpriv() -> str | None:
    if sys.version_info < (3, 11) or not sys.platform.startswith("linux"):
        return None  # Popen's process_group came in 3.11; the death signal is Linux's
    for folder in [*os.environ.get("PATH", os.defpath).split(os.pathsep), "/usr/bin", "/bin"]:
        path = os.path.join(folder, "setpriv")
        if not os.path.isabs(path) or not os.access(path, os.X_OK):
            continue
        try:  # an older setpriv refuses the option; running itself needs no other program
            done = subprocess.run(
                [path, "--pdeathsig", "KILL", "--", path, "--help"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=5,
            )
        except (OSError, subprocess.SubprocessError):
            continue
        if done.returncode == 0:
            return path
    return None


def exec_path(program: str, path: str, cwd: str | None) -> str | None:
    """Where exec finds `program` as execvp does (each folder of `path`, a PATH, relative to the
    working directory `cwd`; a name with a slash as it is), or None."""
    here = cwd or os.getcwd()
    if "/" in program:
        candidates = [os.path.join(here, program)]
    else:
        candidates = [os.path.join(here, folder, program) for folder in path.split(os.pathsep)]
    return next((found for found in candidates if os.path.isfile(found) and os.access(found, os.X_OK)), None)


def _found(program: str, env: dict[str, str], cwd: str | None) -> str | None:
    """Where exec finds `program` with the task's environment's PATH, or None."""
    return exec_path(program, env.get("PATH", os.defpath), cwd)


def read_head(path: str) -> bytes | None:
    """The first bytes of a file, where exec reads what it is (None: it cannot be read)."""
    try:
        with open(path, "rb") as file:
            return file.read(256)
    except OSError:
        return None


def shebang(head: bytes) -> list[str]:
    """The words of a `#!` line (the interpreter first), or none."""
    if not head.startswith(b"#!"):
        return []
    line = head[2:].split(b"\n", 1)[0]  # split as the kernel does: on spaces and tabs (a \r stays in a name)
    return [os.fsdecode(word) for word in line.replace(b"\t", b" ").split(b" ") if word]


def exec_refusal(head: bytes) -> str | None:
    """Why the kernel would refuse to run a file beginning with `head` (Exec format error: no ELF
    header and no `#!` line, or a `#!` naming no executable file); None when it runs it itself."""
    if head.startswith(b"\x7fELF"):
        return None
    if not head.startswith(b"#!"):
        return "it has no #! line, so the kernel cannot run it (Exec format error): begin it with #!/bin/sh"
    words = shebang(head)
    interpreter = words[0] if words else ""
    if not (os.path.isabs(interpreter) and os.path.isfile(interpreter) and os.access(interpreter, os.X_OK)):
        return f"its #! line names {interpreter or 'nothing'!r}, which is not an executable file there"
    return None


def _runs_as_is(path: str) -> bool:
    """An ELF binary, or a script whose `#!` names an executable file: what the kernel runs itself.
    setpriv's execvp would hand anything else (a script without `#!`, an empty file) to /bin/sh."""
    head = read_head(path)
    return head is not None and exec_refusal(head) is None


def _startable(program: str, env: dict[str, str], cwd: str | None) -> bool:
    """Whether exec would find `program` and run it as it is. When not, the task is started the
    other way, so that Popen itself says why it cannot start, as it always has ("No such file or
    directory", "Exec format error"), rather than setpriv after the task seemed to start."""
    path = _found(program, env, cwd)
    return path is not None and _runs_as_is(path)


def start_task(
    argv: list[str],
    env: dict[str, str],
    cwd: str | None,
    stdout: int,
    pass_fds: tuple[int, ...],
    keeper: Keeper | None = None,
) -> subprocess.Popen[bytes]:
    """Start `argv` in a process group of its own, standard input from /dev/null, standard error
    into `stdout`, listed with `keeper` while it lives; raise OSError as Popen does when it cannot."""
    started: dict[str, Any] = {
        "stdin": subprocess.DEVNULL,
        "stdout": stdout,
        "stderr": subprocess.STDOUT,
        "env": env,
        "cwd": cwd,
        "pass_fds": pass_fds,
        "close_fds": True,
    }
    umask = _umask_of(env)
    own: dict[str, Any] = {"process_group": 0, "umask": -1 if umask is None else umask}
    inside = netns.wrapped(argv)  # argv itself, or under nsenter into the gang's private network
    if inside is not argv and argv and not _startable(argv[0], env, cwd):
        raise _exec_error(argv[0], env, cwd)
    if keeper is not None and keeper.lives():
        proc = subprocess.Popen(inside, **own, **started)
        if keeper.watch(proc.pid):
            return proc
        # the keeper is gone (or stopped): a task it does not list would outlive a killed agent, so
        # this one, started a moment ago, is started again the kernel's way
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    tool = setpriv()
    if tool is not None and argv and _startable(argv[0], env, cwd):
        return subprocess.Popen([tool, "--pdeathsig", "KILL", "--", *inside], **own, **started)
    return subprocess.Popen(inside, preexec_fn=own_group_dying_with(os.getpid(), env), **started)
