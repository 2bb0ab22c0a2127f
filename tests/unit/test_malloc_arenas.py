"""A launcher with a thread per SSH host caps malloc's arenas: threads share them instead of one each."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

_COUNT_ARENAS = """
import ctypes, sys, threading
from launcher.transport.malloc_arenas import limit_malloc_arenas
limited = sys.argv[1] == "limit" and limit_malloc_arenas(2)
held = []
together = threading.Barrier(8)
def allocate():
    held.append(bytearray(100_000))  # above pymalloc's sizes, below the mmap threshold: from an arena
    together.wait()  # all alive at once, as a launcher's transport threads are
threads = [threading.Thread(target=allocate) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
ctypes.CDLL(None).malloc_stats()  # one "Arena n:" block per arena, on stderr
"""


def _glibc() -> bool:
    import ctypes

    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return False
    return hasattr(libc, "mallopt") and hasattr(libc, "malloc_stats")


def test_a_users_own_setting_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    from launcher.transport.malloc_arenas import limit_malloc_arenas

    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert not limit_malloc_arenas()
    monkeypatch.delenv("MALLOC_ARENA_MAX")
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=4")
    assert not limit_malloc_arenas()


def _arenas(mode: str) -> int:
    env = {k: v for k, v in os.environ.items() if k not in ("MALLOC_ARENA_MAX", "GLIBC_TUNABLES")}
    proc = subprocess.run(
        [sys.executable, "-c", _COUNT_ARENAS, mode], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return sum(line.startswith("Arena ") for line in proc.stderr.splitlines())


def test_threads_share_two_arenas() -> None:
    if not _glibc():
        pytest.skip("glibc's mallopt and malloc_stats")
    assert _arenas("default") > 2, "the threads got no arenas of their own: this test shows nothing"
    assert _arenas("limit") <= 2
