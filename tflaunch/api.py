"""`tflaunch.launch(...)`: run a cluster spec from Python (a notebook, a pipeline step) and get its result.

The same launch as the `launch` command: preflight, supervise, restart, summary.json. Bad input
raises `launcher.common.errors.LaunchError` (a SpecError lists every problem); a failed run is a result,
not an exception. The signal handlers a launch installs (SIGINT, SIGTERM, SIGHUP stop the gang)
are put back as they were when it returns, whatever happens. Never imports TensorFlow.
"""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, cast

from launcher.common import exit_codes
from worker.contract import RunLayout

__all__ = ["LaunchResult", "launch"]


@dataclass(frozen=True)
class LaunchResult:
    """How a run ended: its state (`succeeded`, `failed`, `interrupted`, `preempted`), the exit code
    `launch` would have used, and where its files are."""

    state: str
    exit_code: int
    run_dir: Path
    final_step: int | None
    restarts: int
    message: str
    summary: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def succeeded(self) -> bool:
        return self.state == "succeeded"


def launch(
    spec: str | os.PathLike[str] | Mapping[str, Any],
    *,
    name: str | None = None,
    run_root: str | None = None,
    command: Sequence[str] = (),
    fresh: bool = False,
    echo: bool = True,
    verbose: bool = False,
    show: str | Sequence[str] = (),
) -> LaunchResult:
    """Run `spec` (a cluster.json path or the spec as a dict) to its end.

    `command`: run it as every task instead of the spec's training (like `launch -- CMD`);
    `fresh`: move the run's old files aside instead of resuming; `echo`: print the tasks' output
    prefixed with their names (it is always logged in the run directory); `verbose`: echo TensorFlow's
    known-harmless start-up lines too; `show`: echo only these tasks (`["worker:0"]`)."""
    # The launcher (pydantic, the transports: ~150 ms) is loaded by a launch only, so that `from tflaunch
    # import report` in every task stays free of it.
    from launcher.cli.request import LaunchRequest, request_spec, shown_tasks
    from launcher.common.errors import AlreadyTrained, InterruptedLaunchError
    from launcher.console import Console
    from launcher.run import launch as run_launch
    from launcher.rundir.place import place_of
    from launcher.rundir.report import failure_text, success_text
    from launcher.rundir.resume import PYTHON_WORDS, resume_or_start_over
    from launcher.supervise.gang import LaunchState

    cluster = os.fspath(spec) if isinstance(spec, (str, os.PathLike)) else spec
    request = LaunchRequest(cluster=cluster, name=name, run_root=run_root, command=tuple(command))
    parsed = request_spec(request)
    names = show if isinstance(show, str) else ",".join(show)  # "worker:0,worker:1" or a list of names
    shown = shown_tasks(parsed, names, flag="show=") if show else frozenset()
    place = place_of(parsed)  # where the run lives: decided once, handed to all that follows
    out = _writable(sys.stdout)
    console = Console(quiet=not echo, live=False, out=out, err=out, verbose=verbose, show=shown, owns_streams=False)

    def once_checked() -> None:  # another training's checkpoints are refused; fresh moves the old files aside
        resume_or_start_over(parsed, place, fresh, console.notice, PYTHON_WORDS)

    try:
        result = run_launch(parsed, console, once_checked=once_checked, place=place)
    except InterruptedLaunchError as error:
        return _result(Path(place.run_dir), "interrupted", error.exit_code, str(error))
    except AlreadyTrained as finished:  # the run's own earlier launch succeeded: its summary stands
        console.notice(str(finished))
        return _result(Path(place.run_dir), "succeeded", exit_codes.SUCCEEDED, str(finished))
    if result.state is LaunchState.SUCCEEDED:
        verdict, code = success_text(result), exit_codes.SUCCEEDED
    else:
        verdict = failure_text(result)
        code = exit_codes.PREEMPTED if result.state is LaunchState.PREEMPTED else exit_codes.FAILED
    console.notice(verdict)
    return _result(Path(result.run_dir), result.state.value, code, verdict)  # the verdict `launch` prints


def _writable(stream: TextIO | None) -> TextIO:
    """The caller's stdout, or a sink when there is none to write to (started with fd 1 closed, so
    `sys.stdout` is None, or closed by the caller): the run goes on, its output in its logs."""
    if stream is None or getattr(stream, "closed", True):
        return cast(TextIO, _Discard())
    return stream


class _Discard(io.TextIOBase):
    """A text stream that keeps nothing."""

    def write(self, text: str) -> int:
        return len(text)


def _result(run_dir: Path, state: str, code: int, message: str) -> LaunchResult:
    try:
        summary = json.loads(Path(RunLayout(str(run_dir)).summary_file).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # stopped before a summary was written
        summary = {}
    restarts = summary.get("restarts") if isinstance(summary.get("restarts"), int) else 0
    step = summary.get("final_step") if isinstance(summary.get("final_step"), int) else None
    return LaunchResult(state, code, run_dir, step, restarts, message, summary)
