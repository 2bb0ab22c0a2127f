"""A task's CPU and memory as the live view and `launch status` show them (the agent samples them:
launcher/agent/usage.py). Values come from files a user could edit: anything but a number is not shown."""

from __future__ import annotations

import math
from collections.abc import Mapping

USAGE_KEYS = ("cpu", "rss", "gpu", "gpu_mem")


_LARGEST = 1e18  # no CPU share nor memory of a task is larger: a file that says so is not the launcher's


def number(value: object) -> float | None:
    """A finite, non-negative number as a float; None for anything else (a string, a boolean, NaN, 10**400)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        found = float(value)
    except OverflowError:
        return None
    return found if math.isfinite(found) and 0 <= found <= _LARGEST else None


def usage_text(usage: Mapping[str, object]) -> tuple[str, str]:
    """The CPU and memory cells: "97%", "1.2 GiB"; with a GPU's: "97% gpu 40%", "1.2 GiB gpu 3.0 GiB"."""
    cpu, rss, gpu, gpu_mem = (number(usage.get(key)) for key in USAGE_KEYS)
    cpu_text = f"{cpu:.0f}%" if cpu is not None else ""
    mem_text = size_text(rss) if rss is not None else ""
    if gpu is not None:
        cpu_text += f" gpu {gpu:.0f}%"
    if gpu_mem is not None:
        mem_text += f" gpu {size_text(gpu_mem)}"
    return cpu_text.strip(), mem_text.strip()


def size_text(size: float) -> str:
    for unit in ("B", "KiB", "MiB"):
        if size < 1024:
            return f"{size:.0f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"
