"""When a run directory (or the run_root above it) is refused, as tables: one row per refusal.

A row names the refusal, finds the problem in a path (its fields, or None when there is none) and
words it from a template; `refuse_run_dir` and `refuse_run_root` walk a table and raise at the first
row that finds something. A new refusal is a new row. Every message ends by saying nothing was started.
Never starts a process; never writes.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from launcher.agent.safe_paths import unsafe_ancestry
from launcher.common.errors import LaunchError, RunDirError, UsageError
from launcher.common.printable import escaped, printable
from launcher.rundir.lock import RUNNING, foreign_files, holder_of, run_around

if TYPE_CHECKING:
    from launcher.spec.models import ClusterSpec

Fields = dict[str, Any]
NOTHING_STARTED = " Nothing was started."


def _usage(path: str, said: str) -> LaunchError:
    return UsageError(said + NOTHING_STARTED)


@dataclass(frozen=True)
class Refusal:
    """One refusal: `finds` returns the problem's fields (None: no problem); `says` is its message's template,
    filled with `shown` (the path, printable) and those fields; `error` makes the exception."""

    name: str
    finds: Callable[[str], Fields | None]
    says: str
    error: Callable[[str, str], LaunchError] = _usage


def _lstat(path: str) -> os.stat_result | OSError | None:
    """The path's own status; None when it is missing (made later), the error when it cannot be looked at."""
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):  # made later; a file in the way is reported then
        return None
    except OSError as error:  # too long a path, a loop of links, no permission to look
        return error


def _ancestry(path: str) -> Fields | None:
    problem = unsafe_ancestry(path)
    return None if problem is None else {"problem": printable(problem)}


def _unreadable(path: str) -> Fields | None:
    found = _lstat(path)
    return {"why": found.strerror} if isinstance(found, OSError) else None


def _stat_is(path: str, test: Callable[[os.stat_result], Fields | None]) -> Fields | None:
    found = _lstat(path)
    return test(found) if isinstance(found, os.stat_result) else None


def _others_may_write(info: os.stat_result) -> Fields | None:
    if not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return None
    return {"mode": f"{stat.S_IMODE(info.st_mode):04o}"}


def _running(path: str) -> Fields | None:
    holder = holder_of(path)
    return None if holder is None else {"pid": str(holder) if holder > 0 else "?"}


def _foreign(path: str) -> Fields | None:
    foreign = foreign_files(path)
    if not foreign:
        return None
    more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
    return {"files": ", ".join(printable(n) for n in foreign[:3]) + more}


SAFE_ANCESTRY = Refusal(
    "safe-ancestry",
    _ancestry,
    "{shown} is not safe to write in: {problem}, so another user could put their own directory in its place. "
    "Use a --run-root whose directories only you or root can change.",
)
# A run directory the launcher may write in: only its owner can change it, and nobody could swap it.
OWNED: tuple[Refusal, ...] = (
    SAFE_ANCESTRY,
    Refusal(
        "can-be-looked-at",
        _unreadable,
        "{shown} cannot be used as the run directory ({why}); use another --name or --run-root.",
    ),
    Refusal(
        "not-a-symbolic-link",
        lambda path: _stat_is(path, lambda info: {} if stat.S_ISLNK(info.st_mode) else None),
        "{shown} is a symbolic link: the launcher writes only in a directory of its own there. Remove it, or use "
        "another --name or --run-root.",
    ),
    Refusal(
        "a-directory",
        lambda path: _stat_is(path, lambda info: None if stat.S_ISDIR(info.st_mode) else {}),
        "it exists and is not a directory",
        lambda path, said: RunDirError(path, said),
    ),
    Refusal(
        "yours",
        lambda path: _stat_is(path, lambda info: None if info.st_uid == os.geteuid() else {"uid": info.st_uid}),
        "{shown} belongs to uid {uid}, not to you (uid {you}): another user could have planted files there. Use "
        "another --name or --run-root.",
    ),
    Refusal(
        "yours-alone",
        lambda path: _stat_is(path, _others_may_write),
        "{shown} is writable by others (mode {mode}): another user could plant files or symlinks where the "
        "launcher writes. Make it yours alone (chmod 700 {shown}) or use another --name.",
    ),
)
NOT_ANOTHER_DIRECTORY = Refusal(
    "not-another-directory",
    _foreign,
    "{shown} exists and holds files no launch wrote ({files}): a launch writes its spec.json, summary.json and "
    "logs there. Give the run another --name or --run-root, or move those files.",
)
NOT_RUNNING = Refusal("not-running", _running, RUNNING)
# What a launch (and its --check, and --fresh) refuses, in this order.
FOR_A_LAUNCH: tuple[Refusal, ...] = (*OWNED, NOT_ANOTHER_DIRECTORY, NOT_RUNNING)


def refuse_run_dir(run_dir: str, rows: tuple[Refusal, ...] = FOR_A_LAUNCH) -> None:
    """Raise the first refusal of `rows` that finds a problem with `run_dir`."""
    for row in rows:
        found = row.finds(run_dir)
        if found is not None:
            raise row.error(run_dir, row.says.format(shown=printable(run_dir), you=os.geteuid(), **found))


def _dangling(run_root: str) -> Fields | None:
    """A symbolic link on the path that points nowhere (a file system not mounted, say): the directories
    the launch makes would go where the link points, where nobody looks for them."""
    at = "/"
    for part in run_root.strip("/").split("/"):
        at = os.path.join(at, part)
        if os.path.islink(at) and not os.path.exists(at):
            return {"link": printable(at), "target": printable(os.readlink(at))}
        if not os.path.lexists(at):
            return None
    return None


def _in_a_run(run_root: str) -> Fields | None:
    """A run_root that is a run's directory, or lies inside one (`--run-root runs/mine`, runs/mine/attempt-0,
    a run directory as the working directory), would put this run inside that run (runs/mine/mine),
    starting over where a resume was meant, or writing among its checkpoints."""
    root = os.path.realpath(run_root)
    around = run_around(root, 4)  # the run_root itself, then three directories up
    if around is None:
        return None
    run, found = around
    return {
        "where": "is itself a run directory" if run == root else f"lies inside the run {escaped(run)}",
        "found": found,
        "above": escaped(os.path.dirname(run)),
    }


# The run_root a spec names (with the run's name under it, as `{run_dir}`).
RUN_ROOT_IN_A_RUN = Refusal(
    "run-root-not-in-a-run",
    _in_a_run,
    "run_root {given} {where} (it holds {found}): this run would go inside it, as {run_dir}. A run is "
    "<run_root>/<name>: give the directory above the run ({above}) as run_root or --run-root, and the run's name "
    "as name or --name.",
)
RUN_ROOT_MOUNTED = Refusal(
    "run-root-links-lead-somewhere",
    _dangling,
    "run_root {shown}: {link} is a symbolic link to {target}, which does not exist (a file system not mounted?); "
    "mount or fix it, or give another --run-root.",
)


def refuse_run_root(spec: ClusterSpec, rows: tuple[Refusal, ...]) -> None:
    """Raise the first refusal of `rows` that finds a problem with the spec's run_root."""
    root = os.path.abspath(os.path.expanduser(spec.run_root))
    for row in rows:
        path = root
        found = row.finds(path)
        if found is not None:
            given = escaped(spec.run_root)
            run_dir = escaped(os.path.join(os.path.realpath(root), spec.name))
            said = row.says.format(shown=printable(path), given=given, run_dir=run_dir, you=os.geteuid(), **found)
            raise row.error(path, said)
