"""The words a live task's state is shown in (the console, status.json), read back by `launch status`."""

from __future__ import annotations

STARTING = "starting"
RUNNING = "running"
STOPPING = "stopping"  # being stopped by the launcher (to restart, or to end the run)
HELD = "stopped (SIGSTOP?)"  # its agent saw it stopped: held by a signal or a debugger
DONE = "done"  # reported its last step, not exited yet
LIVE = frozenset({STARTING, RUNNING, STOPPING, HELD, DONE})  # what is not an exit
