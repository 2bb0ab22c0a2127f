"""A SIGTERM between the strategy's start and the training loop's preemption handler.

Building MultiWorkerMirroredStrategy installs TensorFlow's own SIGTERM notifier, which records the
signal and nothing more; PreemptionCheckpointHandler installs its handler only later, once the model
is restored. A SIGTERM in between (a Ctrl-C of the launcher just after the gang joined) was lost: the
task trained on until its grace period ran out and SIGKILL came. `hold()` keeps such a signal and
`pass_on()` sends it again once the handler listens, so the task saves and leaves as from any other
preemption.
"""

from __future__ import annotations

import os
import signal
from types import FrameType

_held: list[int] = []


def _keep(signum: int, frame: FrameType | None) -> None:
    _held.append(signum)


def hold() -> None:
    """From now until `pass_on()`, a SIGTERM is kept rather than lost (main thread only)."""
    signal.signal(signal.SIGTERM, _keep)


def pass_on() -> bool:
    """Send a kept SIGTERM again, to whatever handler is installed now; says whether there was one."""
    if not _held:
        return False
    _held.clear()
    os.kill(os.getpid(), signal.SIGTERM)
    return True
