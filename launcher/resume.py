"""Whether a launch resumes its run's checkpoints: only those of the same training, said aloud."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from launcher.checkpoint_mark import SPEC_LIMIT, parsed, read_mark, refuse_if_in_use, writer_of
from launcher.errors import UsageError
from launcher.masking import printable
from launcher.training_identity import argv_of, shown_training, what_trains

if TYPE_CHECKING:
    from launcher.spec import ClusterSpec

__all__ = ["CLI_WORDS", "PYTHON_WORDS", "ResumeWords", "resume_notice", "resume_or_start_over"]


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
    refuse_if_in_use(checkpoints, layout.run_dir)  # another run writes there now, checkpoints or not yet
    if not has_checkpoints(checkpoints):
        return None
    from launcher.bundle import recorded_spec

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
    resuming = (
        f"run {spec.name}: resuming from the checkpoints in {printable(checkpoints)} ('{words.fresh}' starts over)"
    )
    if writer is not None and writer != layout.run_dir:
        resuming += f"; they were written by the run in {printable(writer)}"
    old_argv, new_argv = argv_of(saved), argv_of(now)
    if before is None:
        resuming += f"; which training wrote them is not known ({layout.spec_file} is missing or unreadable)"
    elif old_argv is not None and old_argv != new_argv:
        resuming += f"; the command's arguments changed since they were written (was: {shown_training(saved)})"
    return resuming


def _read_json(path: str) -> dict[str, Any] | None:
    """The JSON object in `path` (the run's spec.json), or None when there is none to read."""
    from launcher.log_reading import read_end

    return parsed(read_end(path, SPEC_LIMIT))
