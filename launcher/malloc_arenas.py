"""Fewer malloc arenas for a launcher with a thread per SSH host.

glibc gives threads that allocate at the same moment arenas of their own, up to 8 per core; with a
paramiko transport thread per host, each arena keeps its own free pages, which the launcher's
resident memory then carries (about 3 MiB at 64 hosts). Two arenas are enough: Python allocates
small objects under its own lock (the GIL) in pools of its own, not through malloc's arenas.
"""

from __future__ import annotations

_M_ARENA_MAX = -8  # glibc's malloc.h
ARENAS = 2


def limit_malloc_arenas(arenas: int = ARENAS) -> bool:
    """Cap this process's malloc arenas, before its threads start; False where libc has no mallopt."""
    import ctypes  # loaded only by launches that reach SSH hosts

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):  # not glibc (musl, macOS): nothing to tune
        return False
    return bool(mallopt(_M_ARENA_MAX, arenas))
