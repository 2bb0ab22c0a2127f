"""The mark a launch leaves in its checkpoint directory: which run and training write there, locked
while that launch runs, so that runs sharing a `checkpoint_dir` neither resume nor move each other's
training unseen."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import stat
import time
from typing import TYPE_CHECKING, Any

from launcher.agent.safe_paths import unsafe_ancestry
from launcher.common.errors import UsageError
from launcher.common.printable import printable
from launcher.rundir.lock import RunLock
from launcher.spec.masked import recorded_spec
from worker.contract import RunLayout, is_url

if TYPE_CHECKING:
    from launcher.spec.models import ClusterSpec

MARKER = ".tflaunch-training.json"  # in a checkpoint directory: which run and training write there
_CHECK_WAIT_S = 1.0  # how long a check's shared hold of the mark may delay a launch's lock
_CHECK_POLL_S = 0.01
SPEC_LIMIT = 64 << 20  # a spec whose env is large is still read whole
__all__ = [
    "MARKER",
    "has_checkpoints",
    "latest_checkpoint",
    "resumable",
    "tensorflow_checkpoints",
    "tensorflow_file",
    "written_before_any_launch",
    "SPEC_LIMIT",
    "mark_checkpoints",
    "marked_writer",
    "parsed",
    "read_mark",
    "refuse_if_in_use",
    "writer_of",
]


def tensorflow_checkpoints(names: list[str]) -> bool:
    """Whether directory entries `names` hold TensorFlow's own checkpoint files: `checkpoint`, or an
    `X.index` beside its `X.data-...` shards (an index file alone may be anything's)."""
    if "checkpoint" in names:
        return True
    shards = {n.split(".data-", 1)[0] for n in names if ".data-" in n}
    return any(n.endswith(".index") and n[: -len(".index")] in shards for n in names)


_LATEST = re.compile(r'^model_checkpoint_path: "([^"\n]{1,512})"$', re.MULTILINE)


def latest_checkpoint(checkpoints: str) -> str | None:
    """The checkpoint TensorFlow's `latest_checkpoint` would restore from `checkpoints`, as its `checkpoint`
    file names it (`ckpt-125`); None without that file, or when what it names is not there."""
    try:
        with open(os.path.join(checkpoints, "checkpoint"), encoding="utf-8", errors="replace") as index:
            found = _LATEST.search(index.read(65536))
    except OSError:
        return None
    if found is None:
        return None
    name = found.group(1)
    path = name if os.path.isabs(name) else os.path.join(checkpoints, name)
    return os.path.basename(name) if os.path.exists(path + ".index") else None


def resumable(path: str, run_dir: str) -> bool:
    """Whether a launch with checkpoint directory `path` resumes from it: TensorFlow's checkpoint files
    are there (its `checkpoint` index, or a `NAME-N.index`), or an earlier launch marked it and
    something was written there since (a script's own format). What the directory held before its
    first launch (the user's files, in a working directory given as checkpoint_dir) counts only once
    written again since, and the run directory's own files never."""
    try:
        names = os.listdir(path)
    except OSError:  # missing or unreadable: nothing to resume from here
        return False
    if latest_checkpoint(path) is not None:
        return True  # what TensorFlow's latest_checkpoint restores
    names = [n for n in names if not tensorflow_file(n)]  # no other of its files is restored
    if MARKER not in names:
        return False
    before, since = _before_first_launch(read_mark(path))
    if os.path.realpath(path) == os.path.realpath(run_dir):
        layout = RunLayout(run_dir)
        own = {
            os.path.basename(f)
            for f in (layout.summary_file, layout.status_file, layout.lock_file, layout.stop_request_file)
        }
        own |= {os.path.basename(f) for f in (layout.metrics_file, layout.eval_file, layout.spec_file)}
        own.add(os.path.basename(layout.preflight_file))
        names = [n for n in names if n not in own and not n.startswith("attempt-")]
    return any(n != MARKER and (n not in before or _written_since(os.path.join(path, n), since)) for n in names)


_TENSORFLOW_FILE = re.compile(r"^checkpoint$|\.index$|\.data-\d+-of-\d+$")  # what latest_checkpoint reads


def tensorflow_file(name: str) -> bool:
    """Whether a directory entry is one of TensorFlow's checkpoint files (`checkpoint`, `X.index`, `X.data-N-of-M`)."""
    return bool(_TENSORFLOW_FILE.search(name))


def _before_first_launch(mark: dict[str, Any] | None) -> tuple[frozenset[str], float | None]:
    """The names a mark says the directory held before its first launch, and when it looked; none
    (every entry counts) for a mark without a list of strings (an older launch's, or one cut short)."""
    found = mark.get("found") if mark is not None else None
    at = mark.get("found_at") if mark is not None else None
    if not isinstance(found, list) or not all(isinstance(n, str) for n in found):
        return frozenset(), None
    return frozenset(found), float(at) if isinstance(at, (int, float)) and not isinstance(at, bool) else None


def written_before_any_launch(checkpoints: str, latest: str | None, mark: dict[str, Any] | None) -> bool:
    """Whether the checkpoint TensorFlow would restore (`latest`, as `ckpt-N`) is one no launch wrote:
    there is no mark, or the mark lists its index among what the directory held before its first
    launch, unchanged since."""
    if latest is None:
        return False
    if mark is None:
        return True
    before, since = _before_first_launch(mark)
    index = f"{latest}.index"
    return index in before and not _written_since(os.path.join(checkpoints, index), since)


def _written_since(path: str, since: float | None) -> bool:
    """Whether `path` was modified after `since` (a file the user had there, overwritten by the training)."""
    if since is None:
        return False
    try:
        return os.lstat(path).st_mtime > since
    except OSError:
        return False


def has_checkpoints(path: str) -> bool:
    """A directory with anything in it but the mark (a run would resume from it; an output was written)."""
    try:
        with os.scandir(path) as entries:
            return any(entry.name != MARKER for entry in entries)
    except OSError:  # missing or unreadable: nothing to resume from here
        return False


def mark_checkpoints(spec: ClusterSpec, run_dir: str, checkpoints: str) -> RunLock | None:
    """Leave in the checkpoint directory which run and training write there, and hold its lock while
    the launch runs: a later launch checks both, whatever its run directory (two runs may share a
    `checkpoint_dir`). UsageError when another launch holds it. Only a directory of this machine,
    of the user's own, is marked; elsewhere the run's spec.json serves alone."""

    existed = os.path.lexists(os.path.join(checkpoints, MARKER))
    fd = _open_mark(checkpoints, os.O_RDWR | os.O_CREAT)
    if fd is None:
        return None
    try:
        _lock_past_checks(fd)
    except OSError as error:
        os.close(fd)
        if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise _in_use(checkpoints, run_dir) from None
        return None  # a file system without locks: the run's spec.json still tells
    found = _found_before(fd, checkpoints, existed)
    record = json.dumps({"run_dir": run_dir, "training": recorded_spec(spec).get("training"), **found}, indent=2)
    try:
        os.ftruncate(fd, 0)
        with open(fd, "w", encoding="utf-8", closefd=False) as handle:
            handle.write(record)
    except OSError:  # a full disk: the mark says less, its lock still holds
        pass
    return RunLock(fd)  # a lock like the run's: released when the launch ends


FOUND_LIMIT = 1000  # names kept of what a checkpoint directory held before its first launch


def _found_before(fd: int, checkpoints: str, existed: bool) -> dict[str, Any]:
    """What the directory held before its first launch marked it (the user's own files, in a working
    directory given as checkpoint_dir) and when it was looked at: listed by the launch that made the
    mark, kept by every later one. `found` is None (everything there counts) when there were too many
    to list, or the mark was there already without a list (an older launch's, or one cut short)."""
    if existed:
        try:
            earlier = parsed(os.pread(fd, SPEC_LIMIT + 1, 0))
        except OSError:
            earlier = None
        found, at = _before_first_launch(earlier)
        return {"found": sorted(found), "found_at": at} if found or at is not None else {"found": None}
    try:
        names = sorted(n for n in os.listdir(checkpoints) if n != MARKER)
    except OSError:
        return {"found": None}
    return {"found": names if len(names) <= FOUND_LIMIT else None, "found_at": time.time()}


def _lock_past_checks(fd: int) -> None:
    """Take the mark's lock for a launch. Another launch's check holds it shared for an instant
    (refuse_if_in_use): that is waited out, up to _CHECK_WAIT_S; a launch that runs holds it throughout."""
    deadline = time.monotonic() + _CHECK_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as error:
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN) or time.monotonic() >= deadline:
                raise
        time.sleep(_CHECK_POLL_S)


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
            raise _in_use(checkpoints, run_dir) from None
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


def _in_use(checkpoints: str, run_dir: str) -> UsageError:
    writer = marked_writer(checkpoints)
    if writer == run_dir:  # our own run's mark, and this launch holds the run's lock: not a launch writing
        return UsageError(
            f"{printable(checkpoints)} is locked by another process (a launch checking it, of a run that shares "
            "this checkpoint_dir?), not by a run writing there: try again. Nothing was started."
        )
    return UsageError(
        f"{printable(checkpoints)} is being written by another launch now (the run in "
        f"{printable(writer or 'an unknown directory')}): wait for it to end or stop it, or give this run another "
        "checkpoint_dir. Nothing was started."
    )


def marked_writer(checkpoints: str) -> str | None:
    """The run directory of the run that last wrote to `checkpoints`, as its mark says; None without one."""
    return writer_of(read_mark(checkpoints))


def writer_of(marked: dict[str, Any] | None) -> str | None:
    writer = marked.get("run_dir") if marked is not None else None
    if not isinstance(writer, str) or not os.path.isabs(writer) or printable(writer) != writer:
        return None  # not one launch writes: an absolute path of plain text
    return writer


def read_mark(checkpoints: str) -> dict[str, Any] | None:
    """The checkpoint directory's mark, when it is a regular file of this user's (a mark another user
    planted, or a link, is not believed)."""
    fd = _open_mark(checkpoints, os.O_RDONLY)
    if fd is None:
        return None
    with open(fd, "rb") as handle:
        return parsed(handle.read(SPEC_LIMIT + 1))


def parsed(text: str | bytes) -> dict[str, Any] | None:
    if len(text) > SPEC_LIMIT:
        return None  # more than launch writes
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # none (an older run), cut short, or not ours
        return None
    return data if isinstance(data, dict) else None


def refuse_if_unsafe(checkpoints: str, to_move: bool = False) -> None:
    """UsageError when another user could put a checkpoint in `checkpoints` on this machine (theirs, open to
    anybody, or below a directory they could swap): a run would restore it. The preflight asks each host
    the same; here it is asked before a launch says it resumes, or `--fresh` moves anything aside
    (`to_move`: only the directories above count, the directory itself being set aside)."""
    from launcher.agent.probe import foreign_owner  # the probe (~8 ms): not for launch status, logs, stop

    if is_url(checkpoints):
        return
    if to_move:  # its own mode does not matter, it is set aside; whose it is does: not ours to move
        above = unsafe_ancestry(checkpoints)
        problem = None if above is None else f"is not safe: {above}"
        try:
            owner = os.stat(checkpoints).st_uid
        except OSError:
            owner = os.geteuid()
        if problem is None and owner not in (os.geteuid(), 0):
            problem = f"belongs to uid {owner}, not to you (uid {os.geteuid()})"
    else:
        problem = foreign_owner(checkpoints)
    if problem is not None:
        raise UsageError(
            f"checkpoint_dir {printable(checkpoints)} {printable(problem)}: a checkpoint planted there would be "
            "restored; use a directory of your own (chmod o-w, or another checkpoint_dir). Nothing was started."
        )
