"""Fewer malloc arenas for a launcher with a thread per SSH host.

glibc gives threads that allocate at the same moment arenas of their own, up to 8 per core: with a
paramiko transport thread per host, a launcher on a big machine would carry an arena per host, each
keeping its own free pages. Python allocates small objects in pools of its own, not through malloc's
arenas, so few are needed: 8, whatever the cores. On 2 cores at 64 hosts, 8 arenas took about 2 MiB
off the launcher's peak; 2 arenas took 3 MiB but slowed the start-up by about a tenth (threads
waiting on each other's arena locks). The cap is set before the transports' threads start; glibc
keeps arenas it already made. A user's own setting (MALLOC_ARENA_MAX, or glibc.malloc.arena_max in
GLIBC_TUNABLES) is left as it is.
"""

from __future__ import annotations

import os

_M_ARENA_MAX = -8  # glibc's malloc.h
ARENAS = 8


def limit_malloc_arenas(arenas: int = ARENAS) -> bool:
    """Let malloc make at most `arenas` arenas in this process; False where it was not changed
    (a user's setting, or a libc without glibc's mallopt)."""
    if "MALLOC_ARENA_MAX" in os.environ or "arena_max" in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    import ctypes  # loaded only by launches that reach SSH hosts

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):  # not glibc (musl, macOS): nothing to tune
        return False
    return bool(mallopt(_M_ARENA_MAX, arenas))
