"""The user-facing API of tflaunch, kept small.

    from tflaunch import report         # in a training script run by `launch -- python train.py`
    report("step", step=120, loss=0.31)
    wait_for_leader()                   # before the strategy: see tflaunch.leader
    leave_after_peers()                 # at the very end: see tflaunch.leaving

    import tflaunch                     # in a notebook or a pipeline
    result = tflaunch.launch("cluster.json")

`report`, `record`, `wait_for_leader` and `leave_after_peers` import neither TensorFlow nor the project's
`launcher` and `worker` packages, so a `worker.py` or `launcher.py` beside a user's script cannot break them;
`launch` imports the launcher (never TensorFlow) when it is first called. Imported under a launcher, it lets
the host's agent take this task's stacks (tflaunch/stacks.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tflaunch.events import record, report
from tflaunch.leader import wait_for_leader
from tflaunch.leaving import leave_after_peers
from tflaunch.stacks import allow_stack_dumps

if TYPE_CHECKING:
    from launcher.common.errors import LaunchError as LaunchError
    from launcher.common.errors import SpecError as SpecError
    from launcher.common.errors import UsageError as UsageError
    from tflaunch.api import LaunchResult

# `from tflaunch import *` gives what a training script uses, and never loads the launcher
__all__ = ["__version__", "launch", "leave_after_peers", "record", "report", "wait_for_leader"]
allow_stack_dumps()  # under a launcher, its agent may take this task's stacks (tflaunch/stacks.py)
_ERRORS = ("LaunchError", "SpecError", "UsageError")  # what `launch` raises, to catch without the launcher's name
__version__ = "0.1.0"  # launcher.__version__ and pyproject's, as tests/unit/test_contract.py checks


def launch(spec: Any, **options: Any) -> LaunchResult:
    """Run a cluster spec to its end and return its result; see `tflaunch.api.launch`."""
    from tflaunch.api import launch as _launch  # the launcher, loaded by a launch only (see tflaunch/api.py)

    return _launch(spec, **options)


def __getattr__(name: str) -> Any:
    """The errors `launch` raises, imported only when asked for by name (`report` stays free of the
    launcher). Where the launcher cannot be imported (a `launcher.py` of the user's shadows it), the
    errors are not there, as `launch` would not be."""
    if name in _ERRORS:
        try:
            from launcher.common import errors  # asked for by name only: `report` stays free of the launcher
        except Exception as error:  # noqa: BLE001 - shadowed or broken: whatever it raised, the errors are not there
            raise AttributeError(f"tflaunch.{name} needs the launcher, which cannot be imported: {error}") from None
        return getattr(errors, name)
    raise AttributeError(f"module 'tflaunch' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_ERRORS])
