"""How the agent starts a task's process: leading a process group of its own, with the run's umask,
and killed by the kernel should the agent die without cleaning up.

Standard library only.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

from worker.contract import UMASK_VAR

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
