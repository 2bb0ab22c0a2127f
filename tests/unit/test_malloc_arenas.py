"""A launcher with a thread per SSH host caps malloc's arenas: threads share two instead of one each."""

from __future__ import annotations

import subprocess
import sys

import pytest

_COUNT_ARENAS = """
import ctypes, sys, threading
from launcher.malloc_arenas import limit_malloc_arenas
limited = sys.argv[1] == "limit" and limit_malloc_arenas()
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


def _arenas(mode: str) -> int:
    proc = subprocess.run(
        [sys.executable, "-c", _COUNT_ARENAS, mode], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return sum(line.startswith("Arena ") for line in proc.stderr.splitlines())


def test_threads_share_two_arenas() -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("glibc's mallopt and malloc_stats")
    assert _arenas("default") > 2, "the threads got no arenas of their own: this test shows nothing"
    assert _arenas("limit") <= 2
