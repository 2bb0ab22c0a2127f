"""Whether a launch resumes its run's checkpoints: only those of the same training, said aloud."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from launcher.errors import UsageError
from launcher.masking import printable

if TYPE_CHECKING:
    from launcher.spec import ClusterSpec

__all__ = ["resume_or_start_over", "resume_notice", "what_trains"]


def resume_or_start_over(spec: ClusterSpec, fresh: bool, say: Callable[[str], None]) -> None:
    """Before a launch, from the command line or Python alike: with `fresh` move the run's old files
    aside, else refuse another training's checkpoints and say when this one resumes its own."""
    from launcher.run import run_dir_of

    if fresh:
        from launcher.fresh import start_over

        for line in start_over(spec, run_dir_of(spec), os.getcwd()):
            say(f"--fresh: moved {line}")
    elif (notice := resume_notice(spec)) is not None:
        say(notice)


def resume_notice(spec: ClusterSpec) -> str | None:
    """Say so when a launch will resume from earlier checkpoints of the same run."""
    from launcher.fresh import has_checkpoints
    from launcher.plan import checkpoint_dir_of
    from launcher.run import run_dir_of
    from launcher.run_lock import check_run_dir
    from worker.contract import RunLayout

    layout = RunLayout(str(run_dir_of(spec)))
    check_run_dir(layout.run_dir)  # another user's, or swappable: refused before anything is read from it
    checkpoints = checkpoint_dir_of(spec, layout, os.getcwd())
    if not has_checkpoints(checkpoints):
        return None
    from launcher.bundle import recorded_spec

    before, now = what_trains(_saved_spec(layout.spec_file)), what_trains(recorded_spec(spec))
    if before is not None and before != now:
        raise UsageError(
            f"{layout.run_dir} holds the checkpoints of another training ({_shown_training(before)}; now "
            f"{_shown_training(now or {})}), which this one cannot resume: give --fresh (fresh=True in Python) to "
            "start over (the old files are moved aside, not deleted) or --name NAME (name=) to keep both. Nothing "
            "was started."
        )
    return f"run {spec.name}: resuming from the checkpoints in {checkpoints} ('--fresh' starts over)"


# What a checkpoint belongs to: the program, model and optimizer that wrote it, each setting that
# changes what is saved (not steps or logging settings, which a resumed run may change).
_TRAINING_IDENTITY = (
    "kind",
    "argv",
    "target",
    "model",
    "dataset",
    "optimizer",
    "features",
    "hidden_units",
    "mixed_precision",
)


def _saved_spec(path: str) -> dict[str, Any] | None:
    """The spec the run's last launch kept (spec.json), or None when there is none to read."""
    from launcher.log_reading import read_end

    try:
        data = json.loads(read_end(path))
    except ValueError:  # none (an older run), or not a regular file
        return None
    return data if isinstance(data, dict) else None


def what_trains(spec: dict[str, Any] | None) -> dict[str, Any] | None:
    training = spec.get("training") if spec is not None else None
    if not isinstance(training, dict):
        return None
    return {key: training.get(key) for key in _TRAINING_IDENTITY if training.get(key) is not None}


def _shown_training(training: dict[str, Any]) -> str:
    if isinstance(training.get("argv"), list):
        return printable("command " + " ".join(str(arg) for arg in training["argv"]))
    return printable(", ".join(f"{key} {value}" for key, value in training.items()))
