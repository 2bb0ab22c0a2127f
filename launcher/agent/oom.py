"""How many processes the kernel's out-of-memory killer has ended on this host so far.

`oom_kill` in /proc/vmstat (Linux 4.13 and later) counts every kill of the OOM killer, whether the
whole machine or a cgroup's memory limit ran out. A task killed by SIGKILL while it did not move
was not killed by it. Standard library only.
"""

from __future__ import annotations

VMSTAT = "/proc/vmstat"


def oom_kills(path: str = VMSTAT) -> int | None:
    """The host's count of OOM kills; None where it cannot be read (not Linux, an older kernel)."""
    try:
        with open(path, "rb") as table:
            text = b"\n" + table.read()
        at = text.index(b"\noom_kill ") + len(b"\noom_kill ")
        return int(text[at : text.index(b"\n", at)])
    except (OSError, ValueError):
        return None
