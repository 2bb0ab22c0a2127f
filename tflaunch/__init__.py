"""The user-facing API of tflaunch, kept small.

    from tflaunch import report         # in a training script run by `launch -- python train.py`
    report("step", step=120, loss=0.31)

    import tflaunch                     # in a notebook or a pipeline
    result = tflaunch.launch("cluster.json")

`report` and `record` never import TensorFlow nor the launcher; `launch` imports the launcher (never
TensorFlow) when it is first called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from launcher import __version__
from worker.events import record, report

if TYPE_CHECKING:
    from tflaunch.api import LaunchResult

__all__ = ["__version__", "launch", "record", "report"]


def launch(spec: Any, **options: Any) -> LaunchResult:
    """Run a cluster spec to its end and return its result; see `tflaunch.api.launch`."""
    from tflaunch.api import launch as _launch

    return _launch(spec, **options)
