"""Whether a launch resumes its run's checkpoints: only those of the same training, said aloud."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from launcher.common.errors import AlreadyTrained, UsageError
from launcher.common.log_reading import read_end
from launcher.common.printable import printable
from launcher.rundir.checkpoint_mark import (
    SPEC_LIMIT,
    latest_checkpoint,
    parsed,
    read_mark,
    refuse_if_in_use,
    refuse_if_unsafe,
    resumable,
    writer_of,
    written_before_any_launch,
)
from launcher.rundir.fresh import start_over
from launcher.rundir.place import RunPlace
from launcher.rundir.refusals import NOT_RUNNING, OWNED, refuse_run_dir
from launcher.rundir.training_identity import argv_of, shown_training, what_trains
from launcher.spec.masked import recorded_spec
from worker.contract import is_url

if TYPE_CHECKING:
    from launcher.spec.models import ClusterSpec

__all__ = [
    "CLI_WORDS",
    "PYTHON_WORDS",
    "ResumeWords",
    "Resuming",
    "resume_notice",
    "resume_or_start_over",
]


@dataclass(frozen=True)
class ResumeWords:
    """How the user asks to start over or to keep both runs, in the words of where they launched from."""

    fresh: str
    name: str


CLI_WORDS = ResumeWords(fresh="--fresh", name="--name NAME")
PYTHON_WORDS = ResumeWords(fresh="fresh=True", name="name=")


def resume_or_start_over(
    spec: ClusterSpec, place: RunPlace, fresh: bool, say: Callable[[str], None], words: ResumeWords = CLI_WORDS
) -> None:
    """Before a launch, from the command line or Python alike: with `fresh` move the run's old files
    aside, else refuse another training's checkpoints and say when this one resumes its own."""

    if fresh:
        for line in start_over(spec, place):
            say(f"{words.fresh}: moved {line}")
    elif (resuming := resume_notice(spec, place, words)) is not None:
        if resuming.finished is not None:
            raise AlreadyTrained(
                f"run {spec.name} {resuming.trained()} (its checkpoints are in {printable(resuming.checkpoints)}), so "
                f"nothing was started: raise training.steps to train further, or give {words.fresh} to start over"
            )
        say(resuming.said(spec.name, words))


@dataclass(frozen=True)
class Resuming:
    """A launch that will resume: from which checkpoints, and what else the user should know of them."""

    checkpoints: str
    remarks: tuple[str, ...] = ()
    finished: int | None = None  # the run's checkpoints are at this step, at or past training.steps: nothing is left
    latest: str | None = None  # the checkpoint TensorFlow restores (its `checkpoint` file names it)
    steps: int | None = None  # training.steps, with `finished`

    def trained(self) -> str:
        """What a finished run trained, as `already trained all its training.steps=N` says it."""
        if self.steps is None or self.finished == self.steps:
            return f"already trained all its training.steps={self.finished}"
        return f"is already at step {self.finished}, past its training.steps={self.steps}"

    def _where(self) -> str:
        where = printable(self.checkpoints)
        return f"{where} (latest: {printable(self.latest)})" if self.latest else where

    def said(self, run_name: str, words: ResumeWords = CLI_WORDS) -> str:
        """As a launch says it: `run NAME: resuming from the checkpoints in DIR ('--fresh' starts over); ...`."""
        line = f"run {run_name}: resuming from the checkpoints in {self._where()} ('{words.fresh}' starts over)"
        return "; ".join((line, *self.remarks))

    def would(self) -> str:
        """As `--check` and `--dry-run` say it, of a launch not made."""
        if self.finished is not None:
            return (
                f"the launch would start nothing: the run {self.trained()}; its checkpoints are in {self._where()}; "
                "raise training.steps to train further, or give --fresh to start over"
            )
        return "; ".join((f"the launch would resume from the checkpoints in {self._where()}", *self.remarks))


def new_run_would(checkpoint_dir: str) -> str:
    """What `--check` and `--dry-run` say of a launch that finds no checkpoint to resume from."""

    if is_url(checkpoint_dir):
        return (
            f"the launch would start the run; its tasks resume from {checkpoint_dir} if it holds checkpoints "
            "(the launcher does not read that storage itself)"
        )
    return f"the launch would start from the beginning: no checkpoints in {checkpoint_dir} to resume from"


def resume_notice(spec: ClusterSpec, place: RunPlace, words: ResumeWords = CLI_WORDS) -> Resuming | None:
    """Whether a launch will resume from earlier checkpoints of the same run; UsageError when the run
    directory or the checkpoint directory is not safe to use, its run is still going, or its
    checkpoints are another training's."""

    layout, checkpoints = place.layout, place.checkpoint_dir
    # another user's, or swappable: refused before anything is read from it; still running: before any word
    refuse_run_dir(layout.run_dir, (*OWNED, NOT_RUNNING))
    refuse_if_in_use(checkpoints, layout.run_dir)  # another run writes there now, checkpoints or not yet
    refuse_if_unsafe(checkpoints)  # as the preflight would, but before any word of resuming
    if not resumable(checkpoints, layout.run_dir):
        return None

    marked = read_mark(checkpoints)  # what wrote them, whichever run it was
    writer = writer_of(marked)
    saved = marked if what_trains(marked) is not None else _read_json(layout.spec_file)
    now = recorded_spec(spec)
    before, after = what_trains(saved), what_trains(now)
    if before is not None and before != after:
        keep = words.name if checkpoints.startswith(layout.run_dir.rstrip("/") + "/") else "another checkpoint_dir"
        raise UsageError(
            f"{printable(checkpoints)} holds the checkpoints of another training ({shown_training(saved)}; now "
            f"{shown_training(now)}), which this one cannot resume: give {words.fresh} to start over (the old "
            f"files are moved aside, not deleted) or {keep} to keep both. Nothing was started."
        )
    remarks = []
    if writer is not None and writer != layout.run_dir:
        remarks.append(f"they were written by the run in {printable(writer)}")
    old_argv, new_argv = argv_of(saved), argv_of(now)
    latest = latest_checkpoint(checkpoints)
    if written_before_any_launch(checkpoints, latest, marked):
        remarks.append(
            "no launch wrote them (they were there before this run's first launch): whatever wrote them, the "
            "training restores them as they are; give another checkpoint_dir to start from step 0"
        )
    elif before is None:
        remarks.append(
            f"which training wrote them is not known ({printable(layout.spec_file)} is missing or unreadable)"
        )
    elif old_argv is not None and old_argv != new_argv:
        remarks.append(
            f"the command's arguments changed since they were written (was: {shown_training(saved)}; now: "
            f"{shown_training(now)})"
        )
    finished = _finished_at(layout.summary_file, spec, latest)
    steps = getattr(spec.training, "steps", None)
    done = Resuming(checkpoints, (), finished, latest, steps if isinstance(steps, int) else None)
    return Resuming(checkpoints, tuple(remarks), finished, latest, done.steps)


def _finished_at(summary_file: str, spec: ClusterSpec, latest: str | None) -> int | None:
    """The step a finished built-in run stands at, when it is at or past training.steps (nothing is left:
    every task would start only to restore and end): its last launch succeeded (so its model was exported
    too; a run stopped after its last checkpoint but before the export is started again, and exports),
    and the checkpoint TensorFlow would restore (`latest`, as its `checkpoint` index names it: `ckpt-N`,
    N the step) is that step or later. None for anything else: a command or `fit` (whose checkpoints only
    they name), an object store, a checkpoint rolled back, a run with steps left."""
    steps = getattr(spec.training, "steps", None)
    if getattr(spec.training, "kind", None) != "builtin" or not isinstance(steps, int):
        return None
    summary = _read_json(summary_file)
    if summary is None or summary.get("state") != "succeeded":
        return None
    named = re.fullmatch(r"ckpt-(\d{1,18})", latest or "")
    if named is None or int(named[1]) < steps:
        return None
    return int(named[1])


def _read_json(path: str) -> dict[str, Any] | None:
    """The JSON object in `path` (the run's spec.json), or None when there is none to read."""

    return parsed(read_end(path, SPEC_LIMIT))
