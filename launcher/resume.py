"""Whether a launch resumes its run's checkpoints: only those of the same training, said aloud."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from launcher.errors import UsageError
from launcher.masking import printable

if TYPE_CHECKING:
    from launcher.spec import ClusterSpec

__all__ = ["CLI_WORDS", "PYTHON_WORDS", "ResumeWords", "resume_notice", "resume_or_start_over", "what_trains"]


@dataclass(frozen=True)
class ResumeWords:
    """How the user asks to start over or to keep both runs, in the words of where they launched from."""

    fresh: str
    name: str


CLI_WORDS = ResumeWords(fresh="--fresh", name="--name NAME")
PYTHON_WORDS = ResumeWords(fresh="fresh=True", name="name=")


def resume_or_start_over(
    spec: ClusterSpec, fresh: bool, say: Callable[[str], None], words: ResumeWords = CLI_WORDS
) -> None:
    """Before a launch, from the command line or Python alike: with `fresh` move the run's old files
    aside, else refuse another training's checkpoints and say when this one resumes its own."""
    from launcher.run import run_dir_of

    if fresh:
        from launcher.fresh import start_over

        for line in start_over(spec, run_dir_of(spec), os.getcwd()):
            say(f"{words.fresh}: moved {line}")
    elif (notice := resume_notice(spec, words)) is not None:
        say(notice)


def resume_notice(spec: ClusterSpec, words: ResumeWords = CLI_WORDS) -> str | None:
    """Say so when a launch will resume from earlier checkpoints of the same run; UsageError when the
    run directory is not safe to use, its run is still going, or its checkpoints are another training's."""
    from launcher.fresh import has_checkpoints
    from launcher.plan import checkpoint_dir_of
    from launcher.run import run_dir_of
    from launcher.run_lock import check_run_dir, refuse_if_running
    from worker.contract import RunLayout

    layout = RunLayout(str(run_dir_of(spec)))
    check_run_dir(layout.run_dir)  # another user's, or swappable: refused before anything is read from it
    refuse_if_running(layout.run_dir)  # said before any word of resuming
    checkpoints = checkpoint_dir_of(spec, layout, os.getcwd())
    if not has_checkpoints(checkpoints):
        return None
    from launcher.bundle import recorded_spec

    saved, now = _saved_spec(layout.spec_file), recorded_spec(spec)
    before, after = what_trains(saved), what_trains(now)
    if before is not None and before != after:
        raise UsageError(
            f"{layout.run_dir} holds the checkpoints of another training ({_shown_training(saved)}; now "
            f"{_shown_training(now)}), which this one cannot resume: give {words.fresh} to start over (the old "
            f"files are moved aside, not deleted) or {words.name} to keep both. Nothing was started."
        )
    resuming = f"run {spec.name}: resuming from the checkpoints in {checkpoints} ('{words.fresh}' starts over)"
    old_argv, new_argv = _argv(saved), _argv(now)
    if old_argv is not None and old_argv != new_argv:
        resuming += f"; the command's arguments changed since they were written (was: {_shown_training(saved)})"
    return resuming


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
_PYTHON_OPTIONS_WITH_VALUE = frozenset({"-W", "-X", "-Q"})


def _saved_spec(path: str) -> dict[str, Any] | None:
    """The spec the run's last launch kept (spec.json), or None when there is none to read."""
    from launcher.log_reading import read_end

    try:
        data = json.loads(read_end(path))
    except ValueError:  # none (an older run), or not a regular file
        return None
    return data if isinstance(data, dict) else None


def _training(spec: dict[str, Any] | None) -> dict[str, Any] | None:
    training = spec.get("training") if spec is not None else None
    return training if isinstance(training, dict) else None


def _argv(spec: dict[str, Any] | None) -> list[str] | None:
    training = _training(spec)
    argv = training.get("argv") if training is not None else None
    return [str(arg) for arg in argv] if isinstance(argv, list) else None


def _program(argv: list[str]) -> list[str]:
    """What a command runs, not what it is told: a python's script (`-m` module, `-c` code) whatever
    the python is called and its options; any other program with the words before its first option
    (and a shell's `-c` code).
    `python3 train.py --steps 40` and `python ./train.py` run the same program."""
    if not argv:
        return []
    if _PYTHON.fullmatch(os.path.basename(argv[0])) is None:
        head = [os.path.normpath(argv[0])]
        for index, arg in enumerate(argv[1:], start=1):
            if arg == "-c":  # a shell's code (`bash -c '...'`) is its program
                return [*head, arg, *argv[index + 1 : index + 2]]
            if arg.startswith("-"):
                break
            head.append(os.path.normpath(arg))
        return head
    rest = iter(argv[1:])
    for arg in rest:
        if arg in ("-m", "-c"):
            return [arg, next(rest, "")]
        if arg.startswith(("-m", "-c")):
            return [arg[:2], arg[2:]]
        if arg in _PYTHON_OPTIONS_WITH_VALUE:
            next(rest, None)
        elif not arg.startswith("-"):
            return [os.path.normpath(arg)]
    return ["python"]


def what_trains(spec: dict[str, Any] | None) -> dict[str, Any] | None:
    """The settings of `spec`'s training that decide what its checkpoints hold; None without one."""
    training = _training(spec)
    if training is None:
        return None
    argv = _argv(spec)
    identity = {**training, "program": _program(argv) if argv is not None else None}
    return {key: identity.get(key) for key in _TRAINING_IDENTITY if identity.get(key) is not None}


def _shown_training(spec: dict[str, Any] | None) -> str:
    argv = _argv(spec)
    if argv is not None:
        return printable("command " + " ".join(argv))
    shown = what_trains(spec) or {}
    return printable(", ".join(f"{key} {value}" for key, value in shown.items()))
