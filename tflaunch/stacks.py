"""Let the launcher's host agent take this process's stacks while it runs: what names a hang.

`allow_stack_dumps()` is called by the built-in runtime at its start, by the python trampoline, and by
`import tflaunch` in a user's script. Under a launcher (TFLAUNCH_STACK_FILE set) and in the process that
leads the task's process group (not in a child that inherited the variable), it
  - registers STACK_SIGNAL (a real-time signal near the top, which programs leave alone) with faulthandler:
    every thread's Python stack is written to the stack file, from the signal handler itself, so even a
    thread blocked in TensorFlow's C++ (an all-reduce) is shown; the file's first line is this pid and the
    signal, and the agent signals only a process that still catches it. A handler the process already has
    on that signal is left in place (and no stacks come by signal);
  - names the agent (its parent) the process's tracer where Yama restricts ptrace to ancestors, so
    `py-spy dump`, which the agent runs as its child, may read it too, with native frames.
Without a launcher it does nothing. Never raises: stacks must not break training.

Imports nothing of the project's other packages (see tflaunch/events.py); the two names it shares with
worker/contract.py are checked equal by tests/unit/test_contract.py.
"""

from __future__ import annotations

import os
import signal
from typing import IO

STACK_FILE_VAR = "TFLAUNCH_STACK_FILE"  # worker.contract.STACK_FILE_VAR
STACK_SIGNAL = int(signal.SIGRTMAX) - 3  # worker.contract.STACK_SIGNAL
_PR_SET_PTRACER = 0x59616D61
_YAMA = "/proc/sys/kernel/yama/ptrace_scope"
# (pid, path) -> the open stack file: faulthandler writes to its descriptor for the process's life. A spare
# forked from a task inherits its entry, and registers anew for the task it becomes.
_held: dict[tuple[int, str], IO[str]] = {}


def allow_stack_dumps() -> None:
    path = os.environ.get(STACK_FILE_VAR)
    if not path or (os.getpid(), path) in _held or os.getpid() != os.getpgrp():
        return
    if signal.getsignal(STACK_SIGNAL) not in (signal.SIG_DFL, None):  # the program's own: never replaced
        return
    try:
        import faulthandler

        handle = open(path, "a", encoding="utf-8")  # noqa: SIM115 - kept open: the handler writes to it
        handle.write(f"{os.getpid()} {STACK_SIGNAL}\n")
        handle.flush()
        faulthandler.register(STACK_SIGNAL, file=handle, all_threads=True)
        _held[(os.getpid(), path)] = handle
    except (OSError, ValueError, RuntimeError):  # a read-only scratch, no such signal: no stacks by signal
        pass
    _let_parent_trace()


def _let_parent_trace() -> None:
    """Under Yama's scope 1 only an ancestor may ptrace: name the agent (the parent) and so its py-spy."""
    try:
        with open(_YAMA, encoding="ascii") as handle:
            if handle.read().strip() != "1":
                return
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PTRACER, os.getppid(), 0, 0, 0)
    except (OSError, ImportError, AttributeError, ValueError):  # no Yama, no ctypes: py-spy needs the privilege
        pass
