"""Where one launch's run lives, decided once per launch and handed to what needs it.

The run directory is `<run_root>/<name>` with run_root's symbolic links resolved, once nobody else
could have swapped one of them (after resolving, a link of theirs would no longer show); the
checkpoint directory is the spec's `checkpoint_dir` or the run directory's `checkpoints`. Resume,
--fresh, the lock, the planner and the transports take these; the plan itself, a pure function, gives
each task the same checkpoint directory by the same rule (spec/paths.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.rundir.refusals import RUN_ROOT_MOUNTED, SAFE_ANCESTRY, refuse_run_dir, refuse_run_root
from launcher.spec.paths import checkpoint_dir_of
from worker.contract import RunLayout

if TYPE_CHECKING:
    from launcher.spec.models import ClusterSpec


@dataclass(frozen=True)
class RunPlace:
    """A run's directory and checkpoint directory, and the directory the launcher runs in (a relative
    checkpoint_dir starts from it)."""

    run_dir: str
    checkpoint_dir: str
    cwd: str

    @property
    def layout(self) -> RunLayout:
        return RunLayout(self.run_dir)


def place_of(spec: ClusterSpec, cwd: str | None = None) -> RunPlace:
    """Decide where the run lives; UsageError when its run_root could be swapped by another user or leads
    through a symbolic link to nothing."""
    refuse_run_dir(os.path.join(os.path.abspath(spec.run_root), spec.name), (SAFE_ANCESTRY,))
    refuse_run_root(spec, (RUN_ROOT_MOUNTED,))
    run_dir = str(Path(spec.run_root).resolve() / spec.name)
    cwd = os.getcwd() if cwd is None else cwd
    return RunPlace(run_dir, checkpoint_dir_of(spec.checkpoint_dir, RunLayout(run_dir), cwd), cwd)
