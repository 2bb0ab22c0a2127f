"""What each `launch` subcommand does once its arguments are parsed; only the CLI calls these.

These may print (they are the command line's output); the library modules below them never do.
Each returns the exit code (launcher/common/exit_codes.py) or raises a LaunchError.
"""

from __future__ import annotations

import gc
import json
import logging
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from launcher.common import exit_codes
from launcher.common.errors import PreflightError, UsageError
from launcher.common.masking import printable, redact, redacted
from worker.contract import TF_CONFIG

if TYPE_CHECKING:
    from launcher.k8s.layout import ExportOptions
    from launcher.plan import LaunchPlan
    from launcher.slurm.allocation import Allocation
    from launcher.spec.models import ClusterSpec
    from launcher.supervise.faults import Fault

log = logging.getLogger(__name__)

__all__ = ["ConsoleOptions", "Would", "check", "dry_run", "freeze_start_up", "raise_fd_limit", "run"]


@dataclass(frozen=True)
class ConsoleOptions:
    quiet: bool = False
    plain: bool = False
    verbose: bool = False
    show: frozenset[str] = field(default_factory=frozenset)  # empty: every task


def freeze_start_up() -> None:
    """Keep what start-up built (modules, classes, pydantic's validators, the spec) out of every later
    garbage collection: it lives until exit anyway. Otherwise the collection at interpreter exit walks
    all of it (tens of milliseconds at the end of every launch), and so does each full collection while
    the supervisor streams output. Called before the run opens any file, thread, socket or task, so
    everything a run creates is still collected as usual."""
    gc.freeze()


def raise_fd_limit() -> None:
    """Every local task holds a few pipes; the common soft limit of 1024 runs out at a few hundred tasks."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 16)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError):  # a container may refuse; the default limit still serves small runs
            log.info("could not raise the open-file limit from %d", soft)


class Would(NamedTuple):
    """What a launch would do with its run: `do` is "start" (a new run), "resume", "nothing" (it has
    trained all its steps) or "refused"; `says` is the sentence the dry run prints (None: a new run's, made
    from its plan)."""

    do: str
    says: str | None


def _shown(text: str) -> str:
    """What the spec and the flags say, as the screen may show it: secrets masked, control characters out."""
    return printable(redact(text))


def dry_run(plan: LaunchPlan, as_json: bool, remote: str = "ssh", would: Would | None = None) -> int:
    """Print every task's TF_CONFIG, environment and command; `remote`: how a remote host is reached;
    `would`: what the launch would do with the run's earlier checkpoints (the JSON's `would`)."""
    if would is not None and would.says is None:
        from launcher.rundir.resume import new_run_would

        would = would._replace(says=new_run_would(plan.checkpoint_dir))
    if as_json:
        said = {"would": {"do": would.do, "says": would.says}} if would is not None else {}
        print(json.dumps(redacted({**plan.to_json(), **said}), indent=2))
        return exit_codes.SUCCEEDED

    where = f"run dir {plan.run_dir}, checkpoints {plan.checkpoint_dir}"
    if would is not None and would.do in ("nothing", "refused") and would.says is not None:
        # said first too: the plan that follows would not start (repeated at the end, where it always is)
        print(_shown(f"{would.says.rstrip('.')}. The plan below would not start:") + "\n")
    print(_shown(f"run {plan.run_name}: {len(plan.tasks)} task(s), {where}"))
    for task in plan.tasks:
        reached = "local" if task.is_local else remote
        print("\n" + _shown(f"[{task.label}] on {task.host} ({reached}), port {task.port}"))
        print(f"  TF_CONFIG={json.dumps(task.tf_config, sort_keys=True)}")
        for key, value in sorted(redacted(task.env).items()):
            if key != TF_CONFIG:
                print(_shown(f"  {key}={value}"))
        print(f"  cwd: {_shown(task.cwd)}")
        print(f"  command: {shlex.join(_shown(arg) for arg in task.command)}")  # quoted as a shell reads it
        print(f"  log: {_shown(task.log_path)} (made at its first line)")
    if would is not None and would.says is not None:
        print(f"\n{_shown(would.says)}")
    print(
        "\ndry run: nothing was started. Each command is a task of this run only with the variables listed above "
        "it, secrets shown as **** (run alone, it is a one-worker run of its own). A port the spec does not set is "
        "picked again at each launch; each task also inherits the environment of the agent on its host (the "
        "launcher's, on this machine)."
    )
    return exit_codes.SUCCEEDED


def check(spec: ClusterSpec, allocation: Allocation | None) -> int:
    """The preflight, and what the launch would refuse in its run directory (another user's, a run
    still going, another training's checkpoints), without starting anything."""
    from launcher.run import make_planner, make_transport, preflight
    from launcher.rundir.lock import check_run_dir, refuse_if_not_a_run, refuse_if_running, run_dir_of
    from launcher.rundir.resume import new_run_would, resume_notice

    freeze_start_up()
    run_dir = str(run_dir_of(spec))
    check_run_dir(run_dir)  # as the launch does: another user's, or writable by others, before anything else
    refuse_if_not_a_run(run_dir)
    refuse_if_running(run_dir)
    plan = make_planner(spec)(0)
    transport = make_transport(spec, allocation)
    try:
        report = preflight(spec, plan, transport)
    finally:
        transport.close()
    for line in report.lines:
        print(f"  {line}")
    if not report.ok:
        raise PreflightError(report.problems)
    resuming = resume_notice(spec)  # another training's checkpoints: refused once the preflight passed, as launch does
    print(f"  {_shown(resuming.would() if resuming is not None else new_run_would(plan.checkpoint_dir))}")
    print(f"preflight passed: {len(spec.hosts)} host(s), {len(plan.tasks)} task(s)")
    return exit_codes.SUCCEEDED


def run(
    spec: ClusterSpec,
    console_options: ConsoleOptions,
    faults: list[Fault],
    allocation: Allocation | None,
    fresh: bool = False,
) -> int:
    from launcher.console import Console
    from launcher.run import launch
    from launcher.rundir.report import failure_text, success_text
    from launcher.rundir.resume import resume_or_start_over
    from launcher.supervise.faults import unfired
    from launcher.supervise.gang import LaunchState

    freeze_start_up()
    console = Console(
        quiet=console_options.quiet,
        live=sys.stdout.isatty() and not console_options.plain,
        verbose=console_options.verbose,
        show=console_options.show,
    )
    result = launch(spec, console, faults, allocation, lambda: resume_or_start_over(spec, fresh, console.notice))
    for text in unfired(faults, result.attempts[0].tasks if result.attempts else ()):
        console.notice(text)
    if result.state is LaunchState.SUCCEEDED:
        console.notice(success_text(result))
        return exit_codes.SUCCEEDED
    if result.state is LaunchState.PREEMPTED and allocation is not None:
        # Said before asking: Slurm stops this batch script as soon as it accepts the requeue.
        console.notice(f"requeueing Slurm job {allocation.job_id}: it resumes from the last checkpoint")
        refused = allocation.requeue()
        if refused is None:
            return exit_codes.SUCCEEDED
        console.notice(f"Slurm refused to requeue job {allocation.job_id}: {refused}; launch it again to resume")
        console.notice(failure_text(result))
        return exit_codes.PREEMPTED
    console.notice(failure_text(result))
    return exit_codes.FAILED


def describe_size(size: int) -> str:
    kib = size / 1024
    return f"{kib:.1f} KiB" if kib < 1024 else f"{kib / 1024:.1f} MiB"


def bundle(run_dir: str, output: str | None) -> int:
    from launcher.rundir.bundle import make_bundle

    result = make_bundle(run_dir, output)
    print(f"bundle: {result.path} ({describe_size(result.size)}, {result.members} files)")
    for entry in result.left_out:
        print(f"  not packed: {entry}")
    return exit_codes.SUCCEEDED


def _is_our_schema(path: Path) -> bool:
    """Whether `path` holds a schema `launch schema` wrote (an older one, too): only such a file is replaced."""
    try:
        with path.open("rb") as handle:
            data = json.loads(handle.read(16 * 2**20))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("title") == "ClusterSpec" and "$defs" in data and "hosts" not in data


def schema(output: str | None) -> int:
    from launcher.spec.load import json_schema

    text = json.dumps(json_schema(), indent=2) + "\n"
    if output is None or output == "-":
        print(text, end="")
        return exit_codes.SUCCEEDED

    target = Path(output)
    if target.exists() and target.stat().st_size > 0 and not _is_our_schema(target):  # an empty file holds nothing
        raise UsageError(
            f"{output} already exists and is not a schema this command wrote (a spec, say); remove it or give "
            "another file with -o. Nothing was written."
        )
    try:
        target.write_text(text, encoding="utf-8")
    except OSError as error:
        raise UsageError(f"Cannot write {output}: {error.strerror}.") from None
    print(f"wrote {output}")
    return exit_codes.SUCCEEDED


def slurm_submit(spec: ClusterSpec, print_only: bool, wait: bool) -> int:
    from launcher.rundir.lock import run_dir_of
    from launcher.slurm import submit as slurm

    run_dir = run_dir_of(spec)
    if print_only:
        print(slurm.batch_script(spec, run_dir / "submitted-spec.json", run_dir), end="")
        return exit_codes.SUCCEEDED
    script = slurm.write_job(spec, run_dir)
    job_id = slurm.submit(script)
    output = run_dir / f"slurm-{job_id}.out"
    print(f"[launch] submitted Slurm job {job_id}: script {script}, output {output}", flush=True)

    def say(text: str) -> None:
        print(f"[launch] {text}", flush=True)

    fields = slurm.wait_started(job_id, spec.restart.start_timeout_s, say)
    say(f"job {job_id} is {fields.get('JobState', '?').lower()} on {fields.get('NodeList', '?')}")
    if not wait:
        return exit_codes.SUCCEEDED
    return slurm.follow(job_id, output, say, lambda line: print(printable(redact(line)), flush=True))


def export_k8s(spec: ClusterSpec, options: ExportOptions, source: str, output: str | None) -> int:
    from launcher.k8s.export import export, text, write

    result = export(spec, options, source)
    written = write(result, Path(output)) if output is not None else []  # a refusal warns of nothing
    if result.warnings:  # once, here; the YAML repeats them as comments
        print(f"launch: with --format {options.format}, these guarantees of the launcher do not hold:", file=sys.stderr)
        for line in result.warnings:
            print(f"  - {line}", file=sys.stderr)
    if output is None:
        print(text(result), end="")
    for path in written:
        print(f"wrote {path}")
    return exit_codes.SUCCEEDED
