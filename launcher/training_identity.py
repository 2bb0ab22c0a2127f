"""What a checkpoint belongs to: the training settings that decide what it holds, a command counted by
the program it runs."""

from __future__ import annotations

import os
import re
import shlex
from typing import Any

from launcher.masking import printable

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
_PYTHON = re.compile(r"python(\d+(\.\d+)*)?")
_PYTHON_FLAGS_WITH_VALUE = "WXQ"  # python's short options that take a value


def _training(spec: dict[str, Any] | None) -> dict[str, Any] | None:
    training = spec.get("training") if spec is not None else None
    return training if isinstance(training, dict) else None


def argv_of(spec: dict[str, Any] | None) -> list[str] | None:
    training = _training(spec)
    argv = training.get("argv") if training is not None else None
    return [str(arg) for arg in argv] if isinstance(argv, list) else None


def _program(argv: list[str]) -> list[str]:
    """What a command runs, not what it is told: for a python, its script (or `-m` module and the
    words after it up to an option, or `-c` code) whatever the python is called and its own flags, so
    `python3 train.py --steps 40` and `python ./train.py` run one program. Any other command counts
    whole: which of its words name its program is not ours to guess (`env`, `mpirun`, `sh -x`)."""
    if not argv or _PYTHON.fullmatch(os.path.basename(argv[0])) is None:
        return list(argv)
    rest = argv[1:]
    index = 0
    while index < len(rest):
        arg = rest[index]
        index += 1
        if arg == "--":  # what follows is the script
            return [os.path.normpath(rest[index])] if index < len(rest) else ["python"]
        if arg == "-" or not arg.startswith("-"):  # the script (or standard input)
            return [arg if arg == "-" else os.path.normpath(arg)]
        if arg.startswith("--"):  # --check-hash-based-pycs MODE: python's one long option with a value
            index += arg == "--check-hash-based-pycs"
            continue
        for position, flag in enumerate(arg[1:], start=2):  # combined flags: `-um x` is `-u -m x`
            attached = arg[position:]
            if flag in "mc" or flag in _PYTHON_FLAGS_WITH_VALUE:
                value = attached or (rest[index] if index < len(rest) else "")
                index += not attached
                if flag == "c":
                    return ["-c", value]
                if flag == "m":
                    return ["-m", value, *_leading_words(rest[index:])]
                break  # -W ignore, -Xdev: a value of python's own
    return ["python"]


def _leading_words(words: list[str]) -> list[str]:
    """The words before the first option: a module's own program words (`-m coverage run a.py`)."""
    leading = []
    for word in words:
        if word.startswith("-"):
            break
        leading.append(word)
    return leading


def what_trains(spec: dict[str, Any] | None) -> dict[str, Any] | None:
    """The settings of `spec`'s training that decide what its checkpoints hold; None without one."""
    training = _training(spec)
    if training is None:
        return None
    argv = argv_of(spec)
    identity = {**training, "program": _program(argv) if argv is not None else None}
    return {key: identity.get(key) for key in _TRAINING_IDENTITY if identity.get(key) is not None}


def shown_training(spec: dict[str, Any] | None) -> str:
    argv = argv_of(spec)
    if argv is not None:
        return printable("command " + shlex.join(argv))
    shown = what_trains(spec) or {}
    return printable(", ".join(f"{key} {value}" for key, value in shown.items()))
