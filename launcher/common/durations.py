"""How long something has left, as the live view and `launch status` show it: 0:42, 12:05, 3h07m."""

from __future__ import annotations

__all__ = ["duration_text"]


def duration_text(seconds: float | None) -> str:
    if seconds is None:
        return ""
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}:{seconds % 60:02d}"
