"""The runtime's way to report to the launcher: `tflaunch.events`, which user scripts import too."""

from __future__ import annotations

from tflaunch.events import record, report

__all__ = ["record", "report"]
