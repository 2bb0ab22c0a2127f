"""`launch stop RUN [--timeout S]`: stop a running launch as Ctrl-C would, and wait for it to end.

Reads status.json for the launcher's pid and create time, and sends SIGINT only to that very process:
alive, not a zombie, and created when the file says (a pid alone may have been handed to another
process since). The launcher then stops every task as on Ctrl-C and writes summary.json; this waits,
on one monotonic deadline, until its pid is gone. Never signals anything else and never sends a
stronger signal; its one file is `stop-request.json` in the run directory, written just before the
SIGINT so that the launcher can say who stopped it (the launcher removes it). A launcher already
stopping takes a SIGINT as a second Ctrl-C: its tasks get SIGKILL without the rest of their grace
period, as `launch stop` run twice does.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from launcher.common import exit_codes
from launcher.common.errors import UsageError
from launcher.common.log_reading import read_end
from launcher.rundir.lock import holder_of, is_run_dir
from launcher.rundir.refusals import OWNED, refuse_run_dir
from launcher.rundir.status import RunFiles, launcher_process, no_run_files, read_run, summary_outcome
from worker.contract import RunLayout
from worker.files import write_atomic

if TYPE_CHECKING:
    import psutil

__all__ = ["DEFAULT_TIMEOUT_S", "StopResult", "stop_launcher", "stop_run"]

DEFAULT_TIMEOUT_S = 60.0
_WAIT_SLICE_S = 0.5  # between looks at whether the launcher is a zombie nobody reaps (see _wait_gone)


@dataclass(frozen=True)
class StopResult:
    """What `launch stop` says, and what it exits with: 0 once the launcher is gone, 1 when it is not
    gone by the deadline."""

    text: str
    exit_code: int


def _ended_text(files: RunFiles) -> str:
    if files.summary is not None and files.summary_is_current:
        return f"{files.run_dir}: already ended: {summary_outcome(files.summary)}"
    assert files.status is not None
    return (
        f"{files.run_dir}: not running: its launcher (pid {files.status.pid}) is gone and wrote no summary "
        "(killed?); nothing to stop."
    )


def _is_stopped(process: psutil.Process) -> bool:
    import psutil

    try:
        return process.status() == psutil.STATUS_STOPPED
    except psutil.Error:  # gone meanwhile: not stopped
        return False


def _wait_gone(process: psutil.Process, timeout_s: float) -> bool:
    """Whether `process` ended within `timeout_s`. An exited launcher whose parent has not reaped it
    yet (a zombie) has ended too; psutil's wait would keep waiting for it."""
    import psutil

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            process.wait(timeout=max(0.0, min(_WAIT_SLICE_S, deadline - time.monotonic())))
            return True
        except psutil.TimeoutExpired:  # still there: look again until the deadline
            pass
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:  # reaped between the two looks
            return True
        if time.monotonic() >= deadline:
            return False


def _refuse_a_forged_status(run_dir: str, pid: int, process: Any) -> None:
    """status.json names a pid, but only a run directory of ours alone, whose lock that very process
    holds, proves the pid is this run's launcher (anyone can read a process's start time in /proc)."""
    try:
        refuse_run_dir(run_dir, OWNED)
    except UsageError as error:
        raise UsageError(f"{str(error).removesuffix(' Nothing was started.')} Nothing was signalled.") from None
    holder = holder_of(run_dir)
    if holder != pid:
        raise UsageError(
            f"{run_dir}: pid {pid} does not hold the run's lock ({RunLayout(run_dir).lock_file}), so it is not this "
            "run's launcher; nothing was signalled."
        )
    if process.uids().real != os.getuid() and os.getuid() != 0:
        raise UsageError(f"{run_dir}: the launcher (pid {pid}) runs as another user; nothing was signalled.")


def _leave_stop_request(layout: RunLayout, launcher_pid: int) -> None:
    """Tell the launcher that its coming SIGINT is `launch stop`'s, so it says so rather than only the
    signal's name. Best effort: without it the launcher still stops, and names SIGINT."""
    import json

    try:
        request = json.dumps({"launcher_pid": launcher_pid, "pid": os.getpid()})
        write_atomic(layout.stop_request_file, request, durable=False)  # read within moments, or never
    except OSError:
        pass


def stop_requester(layout: RunLayout) -> str | None:
    """`launch stop (pid N)` when `launch stop` asked this process to stop (its request names our pid);
    the request is used up. None for any other signal (a Ctrl-C, a kill)."""
    import json

    try:
        request = json.loads(read_end(layout.stop_request_file, 4096))
        os.unlink(layout.stop_request_file)
    except (OSError, ValueError):
        return None
    if not isinstance(request, dict) or request.get("launcher_pid") != os.getpid():
        return None
    pid = request.get("pid")
    return f"`launch stop` (pid {pid})" if isinstance(pid, int) else "`launch stop`"


def stop_launcher(
    run_dir: str, timeout_s: float = DEFAULT_TIMEOUT_S, on_signal: Callable[[str], object] | None = None
) -> StopResult:
    """Send SIGINT to the run's launcher and wait up to `timeout_s` for it to end. `on_signal` hears
    one line once the signal is sent (before the wait). UsageError, with nothing signalled, when the
    run is not running or status.json cannot show that the pid is its launcher."""
    import psutil

    files = read_run(run_dir)
    status = files.status
    if status is None:
        if files.summary is not None:
            raise UsageError(_ended_text(files))
        if not is_run_dir(run_dir):  # an attempt-N directory says which run it lies in
            raise UsageError(f"{no_run_files(run_dir)} Nothing to stop.")
        raise UsageError(
            f"{run_dir}: no {os.path.basename(files.layout.status_file)}: the run never started, or it is not a "
            "run directory (<run_root>/<name>, e.g. runs/example); nothing to stop."
        )
    if files.summary_is_current:
        raise UsageError(_ended_text(files))
    if status.started is None and status.pid <= 1:  # forged: no launcher has pid 0 or 1; `kill -1` is every process
        raise UsageError(
            f"{run_dir}: {os.path.basename(files.layout.status_file)} names pid {status.pid}, which is no "
            "launcher's; nothing was signalled."
        )
    if status.started is None:
        raise UsageError(
            f"{run_dir}: {os.path.basename(files.layout.status_file)} does not say when its launcher (pid "
            f"{status.pid}) started, so that pid cannot be told from a later process given the same number; "
            f"nothing was signalled. If pid {status.pid} is this run's launcher, stop it with kill -INT {status.pid}."
        )
    process = launcher_process(status)
    if process is None:
        raise UsageError(_ended_text(files))
    _refuse_a_forged_status(run_dir, status.pid, process)
    _leave_stop_request(files.layout, status.pid)
    try:
        # psutil checks again that the pid still names the process whose create time it read
        process.send_signal(signal.SIGINT)
    except psutil.NoSuchProcess:  # it ended on its own since we looked
        return StopResult(f"{run_dir}: the launcher (pid {status.pid}) ended before it was asked to stop.", 0)
    except psutil.AccessDenied:  # another user's launcher
        return StopResult(
            f"{run_dir}: not allowed to signal the launcher (pid {status.pid}): it runs as another user.",
            exit_codes.FAILED,
        )
    if on_signal is not None:
        on_signal(f"{run_dir}: asked the launcher (pid {status.pid}) to stop; waiting up to {timeout_s:g}s for it")
    if not _wait_gone(process, timeout_s):
        return _still_running(run_dir, status.pid, process, timeout_s)
    after = read_run(run_dir)
    if after.summary is not None and after.summary_is_current:
        return StopResult(
            f"{run_dir}: the launcher (pid {status.pid}) has stopped: {summary_outcome(after.summary)}",
            exit_codes.SUCCEEDED,
        )
    return StopResult(
        f"{run_dir}: the launcher (pid {status.pid}) has stopped but wrote no summary.", exit_codes.SUCCEEDED
    )


def _still_running(run_dir: str, pid: int, process: Any, timeout_s: float) -> StopResult:
    """What a stop that the launcher has not obeyed in time says: it is itself stopped, or still busy."""
    if _is_stopped(process):
        return StopResult(
            f"{run_dir}: the launcher (pid {pid}) is itself stopped (Ctrl-Z or SIGSTOP), so it cannot act "
            f"on the stop it was sent: `kill -CONT {pid}` (or `fg` in its terminal) lets it stop the run.",
            exit_codes.RUNNING,
        )
    return StopResult(
        f"{run_dir}: the launcher (pid {pid}) is still running {timeout_s:g}s after SIGINT; it may still "
        f"be giving its tasks their grace period to save. See `launch status {run_dir}`; `launch stop {run_dir}` "
        f"again (or kill -TERM {pid}) kills its tasks at once.",
        exit_codes.RUNNING,
    )


def stop_run(run_dir: str, timeout_s: float = DEFAULT_TIMEOUT_S, say: Callable[[str], object] = print) -> int:
    """`launch stop`: `stop_launcher`, telling `say` what happens; returns the exit code."""
    result = stop_launcher(run_dir, timeout_s, on_signal=say)
    say(result.text)
    return result.exit_code
