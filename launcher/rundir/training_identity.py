"""What a checkpoint belongs to: the training settings that decide what it holds, a command counted by
the program it runs."""

from __future__ import annotations

import shlex
from typing import Any

from launcher.common.printable import printable
from launcher.spec.python_script import program_of

__all__ = ["argv_of", "shown_training", "what_trains"]

# What a checkpoint belongs to: the program, model and optimizer that wrote it, each setting that
# changes what is saved (not steps or logging settings, which a resumed run may change). A command
# counts by its program (see _program), not by its own arguments.
_TRAINING_IDENTITY = (
    "kind",
    "program",
    "target",
    "model",
    "dataset",
    "optimizer",
    "features",
    "hidden_units",
    "mixed_precision",
)


def _training(spec: dict[str, Any] | None) -> dict[str, Any] | None:
    training = spec.get("training") if spec is not None else None
    return training if isinstance(training, dict) else None


def argv_of(spec: dict[str, Any] | None) -> list[str] | None:
    training = _training(spec)
    argv = training.get("argv") if training is not None else None
    return [str(arg) for arg in argv] if isinstance(argv, list) else None


def what_trains(spec: dict[str, Any] | None) -> dict[str, Any] | None:
    """The settings of `spec`'s training that decide what its checkpoints hold; None without one."""
    training = _training(spec)
    if training is None:
        return None
    argv = argv_of(spec)
    identity = {**training, "program": program_of(argv) if argv is not None else None}
    return {key: identity.get(key) for key in _TRAINING_IDENTITY if identity.get(key) is not None}


def shown_training(spec: dict[str, Any] | None) -> str:
    argv = argv_of(spec)
    if argv is not None:
        return printable("command " + shlex.join(argv))
    shown = what_trains(spec) or {}
    return printable(", ".join(f"{key} {value}" for key, value in shown.items()))
