"""Whether a launch resumes its run's checkpoints: only those of the same training, said aloud."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import shlex
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from launcher.errors import UsageError
from launcher.masking import printable
from launcher.run_lock import RunLock

if TYPE_CHECKING:
    from launcher.spec import ClusterSpec

MARKER = ".tflaunch-training.json"  # in a checkpoint directory: which run and training write there
__all__ = [
    "CLI_WORDS",
    "MARKER",
    "PYTHON_WORDS",
    "ResumeWords",
    "mark_checkpoints",
    "marked_writer",
    "refuse_if_in_use",
    "resume_notice",
    "resume_or_start_over",
    "what_trains",
]


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

    marked = _read_mark(checkpoints)  # what wrote them, whichever run it was
    writer = _writer_of(marked)
    saved = marked if what_trains(marked) is not None else _read_json(layout.spec_file)
    now = recorded_spec(spec)
    before, after = what_trains(saved), what_trains(now)
    if before is not None and before != after:
        keep = words.name if checkpoints.startswith(layout.run_dir.rstrip("/") + "/") else "another checkpoint_dir"
        raise UsageError(
            f"{printable(checkpoints)} holds the checkpoints of another training ({_shown_training(saved)}; now "
            f"{_shown_training(now)}), which this one cannot resume: give {words.fresh} to start over (the old "
            f"files are moved aside, not deleted) or {keep} to keep both. Nothing was started."
        )
    resuming = (
        f"run {spec.name}: resuming from the checkpoints in {printable(checkpoints)} ('{words.fresh}' starts over)"
    )
    if writer is not None and writer != layout.run_dir:
        resuming += f"; they were written by the run in {printable(writer)}"
    old_argv, new_argv = _argv(saved), _argv(now)
    if before is None:
        resuming += f"; which training wrote them is not known ({layout.spec_file} is missing or unreadable)"
    elif old_argv is not None and old_argv != new_argv:
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
_SPEC_LIMIT = 64 << 20  # a spec whose env is large is still read whole
_PYTHON_FLAGS_WITH_VALUE = "WXQ"  # python's short options that take a value


def mark_checkpoints(spec: ClusterSpec, run_dir: str, checkpoints: str) -> RunLock | None:
    """Leave in the checkpoint directory which run and training write there, and hold its lock while
    the launch runs: a later launch checks both, whatever its run directory (two runs may share a
    `checkpoint_dir`). UsageError when another launch holds it. Only a directory of this machine,
    of the user's own, is marked; elsewhere the run's spec.json serves alone."""
    from launcher.bundle import recorded_spec

    fd = _open_mark(checkpoints, os.O_RDWR | os.O_CREAT)
    if fd is None:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        os.close(fd)
        if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise _in_use(checkpoints) from None
        return None  # a file system without locks: the run's spec.json still tells
    record = json.dumps({"run_dir": run_dir, "training": recorded_spec(spec).get("training")}, indent=2)
    try:
        os.ftruncate(fd, 0)
        with open(fd, "w", encoding="utf-8", closefd=False) as handle:
            handle.write(record)
    except OSError:  # a full disk: the mark says less, its lock still holds
        pass
    return RunLock(fd)  # a lock like the run's: released when the launch ends


def refuse_if_in_use(checkpoints: str, run_dir: str) -> None:
    """UsageError when another launch than `run_dir`'s writes to `checkpoints` now (it holds the
    mark's lock); a mark left by a launch that has ended holds no lock and is only a record."""
    fd = _open_mark(checkpoints, os.O_RDONLY)
    if fd is None:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as error:
        if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN) and marked_writer(checkpoints) != run_dir:
            raise _in_use(checkpoints) from None
    finally:
        os.close(fd)


def _open_mark(checkpoints: str, flags: int) -> int | None:
    """The mark's descriptor when it is (or, with O_CREAT, becomes) a regular file of the user's own."""
    try:
        fd = os.open(os.path.join(checkpoints, MARKER), flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    except OSError:  # none, a link, not ours to open, no such directory here
        return None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
        os.close(fd)
        return None
    return fd


def _in_use(checkpoints: str) -> UsageError:
    writer = marked_writer(checkpoints) or "an unknown directory"
    return UsageError(
        f"{printable(checkpoints)} is being written by another launch now (the run in {writer}): "
        "wait for it to end or stop it, or give this run another checkpoint_dir. Nothing was started."
    )


def marked_writer(checkpoints: str) -> str | None:
    """The run directory of the run that last wrote to `checkpoints`, as its mark says; None without one."""
    return _writer_of(_read_mark(checkpoints))


def _writer_of(marked: dict[str, Any] | None) -> str | None:
    writer = marked.get("run_dir") if marked is not None else None
    if not isinstance(writer, str) or not os.path.isabs(writer) or printable(writer) != writer:
        return None  # not one launch writes: an absolute path of plain text
    return writer


def _read_mark(checkpoints: str) -> dict[str, Any] | None:
    """The checkpoint directory's mark, when it is a regular file of this user's (a mark another user
    planted, or a link, is not believed)."""
    fd = _open_mark(checkpoints, os.O_RDONLY)
    if fd is None:
        return None
    with open(fd, "rb") as handle:
        return _parsed(handle.read(_SPEC_LIMIT + 1))


def _read_json(path: str) -> dict[str, Any] | None:
    """The JSON object in `path` (the run's spec.json), or None when there is none to read."""
    from launcher.log_reading import read_end

    return _parsed(read_end(path, _SPEC_LIMIT))


def _parsed(text: str | bytes) -> dict[str, Any] | None:
    if len(text) > _SPEC_LIMIT:
        return None  # more than launch writes
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # none (an older run), cut short, or not ours
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
    argv = _argv(spec)
    identity = {**training, "program": _program(argv) if argv is not None else None}
    return {key: identity.get(key) for key in _TRAINING_IDENTITY if identity.get(key) is not None}


def _shown_training(spec: dict[str, Any] | None) -> str:
    argv = _argv(spec)
    if argv is not None:
        return printable("command " + shlex.join(argv))
    shown = what_trains(spec) or {}
    return printable(", ".join(f"{key} {value}" for key, value in shown.items()))
