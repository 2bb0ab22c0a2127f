"""`launch` itself: a run from a spec file, `--local N` or a host list, its dry run (`--dry-run`) or
its preflight (`--check`). May print: this is the command line's output.

The hosts' agents on this machine are started as soon as the arguments are read, before the spec is
validated; what a run needs beyond that (pydantic, the plan, the transports, the supervisor, rich:
~150 ms) is imported by the function that needs it, so they start that much earlier, and a refusal
of the arguments answers without paying for it.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import shlex
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from launcher.agent.bootstrap import agent_line
from launcher.cli.request import (
    LaunchRequest,
    local_hosts_here,
    parse_host_list,
    private_network_here,
    read_hostfile,
    request_spec,
    shown_tasks,
    task_names,
)
from launcher.cli.streams import quiet_libraries, say
from launcher.common import exit_codes
from launcher.common.errors import PreflightError, UsageError
from launcher.common.masking import redact, redacted
from launcher.common.printable import printable
from launcher.rundir.place import RunPlace, place_of
from launcher.rundir.refusals import NOT_ANOTHER_DIRECTORY, refuse_run_dir
from launcher.supervise.faults import Fault, parse_fault, unfired
from launcher.transport.local import LOCAL_BEAT_S, close_early, start_early
from launcher.transport.private_network import close_early as close_early_network
from launcher.transport.private_network import start_early as start_early_network
from worker.contract import TF_CONFIG

if TYPE_CHECKING:
    from launcher.plan import LaunchPlan, PlanInputs
    from launcher.slurm.allocation import Allocation
    from launcher.spec.models import ClusterSpec

log = logging.getLogger(__name__)


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


def dry_run(
    plan: LaunchPlan, as_json: bool, remote: str = "ssh", would: Would | None = None, spares: list[str] | None = None
) -> int:
    """Print every task's TF_CONFIG, environment and command; `remote`: how a remote host is reached;
    `would`: what the launch would do with the run's earlier checkpoints (the JSON's `would`); `spares`: what
    the spare hosts and `elastic` would do (the JSON's `spares`)."""
    if would is not None and would.says is None:
        from launcher.rundir.resume import new_run_would  # the plan's: see the module's docstring

        would = would._replace(says=new_run_would(plan.checkpoint_dir))
    if as_json:
        said: dict[str, object] = {"would": {"do": would.do, "says": would.says}} if would is not None else {}
        said.update({"spares": spares} if spares else {})
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
    if spares:
        print("\n" + "\n".join(_shown(line) for line in spares))
    if would is not None and would.says is not None:
        print(f"\n{_shown(would.says)}")
    print(
        "\ndry run: nothing was started. Each command is a task of this run only with the variables listed above "
        "it, secrets shown as **** (run alone, it is a one-worker run of its own). A port the spec does not set is "
        "picked again at each launch; each task also inherits the environment of the agent on its host (the "
        "launcher's, on this machine)."
    )
    return exit_codes.SUCCEEDED


def check(spec: ClusterSpec, place: RunPlace, allocation: Allocation | None) -> int:
    """The preflight, and what the launch would refuse in its run directory (another user's, a run
    still going, another training's checkpoints), without starting anything."""
    from launcher.preflight.spares import check_spares, spare_plan
    from launcher.run import make_planner, make_transport, preflight, start_local_network  # see the module's docstring
    from launcher.rundir.resume import new_run_would, resume_notice

    freeze_start_up()
    refuse_run_dir(place.run_dir)  # as the launch does: another user's or swappable, before anything else
    plan = make_planner(spec, place)(0)
    network = start_local_network(spec, plan, allocation)  # made as the launch makes it: --check proves it works here
    try:
        transport = make_transport(spec, allocation, place.run_dir, network)
        try:
            report = preflight(spec, plan, transport)
            ok = report.ok and spec.spare_hosts
            spares = check_spares(spec, spare_plan(spec, _spare_inputs(spec, place)), transport) if ok else {}
        finally:
            transport.close()
    finally:
        if network is not None:
            network.close()
    if network is not None and (made := network.result()) is not None:
        report.lines.append(made.says)
    for line in report.lines:
        print(f"  {line}")
    if not report.ok:
        raise PreflightError(report.problems)
    for machine, problems in spares.items():  # a launch keeps such a spare out and goes on: said, not refused
        print(
            _shown(f"  spare host {spec.spare_hosts[machine - len(spec.hosts)].address} would be kept out: {problems}")
        )
    resuming = resume_notice(
        spec, place
    )  # another training's checkpoints: refused once the preflight passed, as launch
    print(f"  {_shown(resuming.would() if resuming is not None else new_run_would(plan.checkpoint_dir))}")
    spared = (
        f", {len(spec.spare_hosts) - len(spares)} of {len(spec.spare_hosts)} spare host(s)" if spec.spare_hosts else ""
    )
    print(f"preflight passed: {len(spec.hosts)} host(s), {len(plan.tasks)} task(s){spared}")
    return exit_codes.SUCCEEDED


def launch_and_report(
    spec: ClusterSpec,
    place: RunPlace,
    console_options: ConsoleOptions,
    faults: list[Fault],
    allocation: Allocation | None,
    fresh: bool = False,
) -> int:
    from launcher.console import Console  # rich, and the run: see the module's docstring
    from launcher.run import launch  # likewise, as the three below
    from launcher.rundir.report import failure_text, success_text
    from launcher.rundir.resume import resume_or_start_over
    from launcher.supervise.gang import LaunchState

    freeze_start_up()
    console = Console(
        quiet=console_options.quiet,
        live=sys.stdout.isatty() and not console_options.plain,
        verbose=console_options.verbose,
        show=console_options.show,
    )
    result = launch(
        spec, console, faults, allocation, lambda: resume_or_start_over(spec, place, fresh, console.notice), place
    )
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


def request_of(args: argparse.Namespace, command: list[str]) -> LaunchRequest:
    """Where the tasks run (one of --cluster, --local, -H, --hostfile) and what they run."""
    given = [
        flag
        for flag, value in (
            ("--cluster", args.cluster),
            ("--local", getattr(args, "local", None)),
            ("-H", getattr(args, "hosts", None)),
            ("--hostfile", getattr(args, "hostfile", None)),
        )
        if value is not None
    ]
    if len(given) > 1:
        raise UsageError(f"Give one of {' and '.join(given)}: each says where the tasks run.")
    hosts: tuple[tuple[str, int], ...] = ()
    if getattr(args, "hosts", None) is not None:
        hosts = parse_host_list(args.hosts)
    elif getattr(args, "hostfile", None) is not None:
        hosts = read_hostfile(args.hostfile)
    return LaunchRequest(
        args.cluster,
        getattr(args, "local", None),
        hosts,
        args.name,
        args.run_root,
        tuple(command),
        local_network="host" if getattr(args, "host_network", False) else None,
    )


def faults_of(spec: ClusterSpec, texts: list[str]) -> list[Fault]:
    faults = [parse_fault(text) for text in texts]
    for text, fault in zip(texts, faults, strict=True):
        if fault.task not in (names := task_names(spec)):
            raise UsageError(
                f"Got --inject {text!r}: there is no task {fault.task} (tasks: {', '.join(sorted(names))})."
            )
        if sum(other.task == fault.task for other in faults) > 1:
            raise UsageError(f"Got more than one --inject for {fault.task}: a task takes one fault per launch.")
    return faults


def start_agents_early(args: argparse.Namespace) -> None:
    count = local_hosts_here(args.cluster, args.local, args.hosts)
    if count:
        start_early(sys.executable, agent_line(LOCAL_BEAT_S, False, False, False), count)
    if not args.host_network and private_network_here(args.cluster, args.local, args.hosts):
        start_early_network()


def run(args: argparse.Namespace, command: list[str]) -> int:
    """`launch [--cluster FILE | --local N | -H HOSTS] [-- COMMAND]`: the run itself, its dry run or its check."""
    quiet_libraries(args.verbose)
    if args.json and not args.dry_run:
        raise UsageError("--json goes with --dry-run.")
    if args.dry_run and args.check:
        raise UsageError("--dry-run prints the plan and --check runs the preflight: give one of them.")
    if args.check and args.inject:
        raise UsageError("--inject rehearses a fault in a run, and --check starts none: give one of them.")
    if args.quiet and args.show:
        raise UsageError("--quiet echoes no task's output and --show echoes only some: give one of them.")
    allocation = None
    if args.slurm:
        if args.cluster is None:
            raise UsageError("--slurm takes the hosts from the allocation; use it with --cluster.")
        from launcher.slurm.allocation import read_allocation  # pydantic: see the module's docstring

        allocation = read_allocation()
    request = request_of(args, command)
    fresh_refused = args.fresh and (args.dry_run or args.check)  # refused below, naming the run directory
    if not args.dry_run and not fresh_refused and allocation is None:
        start_agents_early(args)
    try:
        return _run_spec(args, request, allocation, fresh_refused)
    finally:  # what no transport took (a spec error, --check): closed now, not at this process's exit
        close_early()
        close_early_network()


def _run_spec(
    args: argparse.Namespace, request: LaunchRequest, allocation: Allocation | None, fresh_refused: bool
) -> int:
    notes: list[str] = []
    spec = request_spec(request, allocation.hosts if allocation is not None else None, notes)
    if fresh_refused:
        run_dir = place_of(spec).run_dir
        named = printable(run_dir)
        moves = (
            f"it renames the run directory {named} (and checkpoints kept elsewhere on this machine) to "
            f"{named}.old-<time>, deleting nothing, or refuses what it cannot move, before it starts"
            if os.path.lexists(run_dir)
            else f"there is no run directory {named} yet, so it would move nothing aside"
        )
        raise UsageError(
            f"--fresh starts a run over: {moves}. It does not go with --dry-run or --check, which without it "
            "show the run as it stands."
        )
    for note in notes:
        say(f"[launch] {redact(note)}", to_stderr=True)
    faults = faults_of(spec, args.inject)
    show = shown_tasks(spec, args.show)
    raise_fd_limit()
    place = place_of(spec)  # where the run lives: decided once, handed to all that follows
    if args.dry_run:
        from launcher.run import make_planner  # the plan, the preflight and the run: see the docstring

        remote = "ssh" if allocation is None else "srun"
        would = would_of(spec, place)
        shown = dry_run(make_planner(spec, place, faults)(0), args.json, remote, would, spare_lines(spec, place))
        return exit_codes.USAGE if would.do == "refused" else shown  # as the launch itself would exit
    if args.check:
        return check(spec, place, allocation)
    options = ConsoleOptions(quiet=args.quiet, plain=args.plain, verbose=args.verbose, show=show)
    return launch_and_report(spec, place, options, faults, allocation, fresh=args.fresh)


def _spare_inputs(spec: ClusterSpec, place: RunPlace) -> PlanInputs:
    from launcher.plan import PlanInputs
    from launcher.preflight.ports import choose_free_ports

    return PlanInputs(place.run_dir, 0, sys.executable, place.cwd, choose_free_ports(spec))


def spare_lines(spec: ClusterSpec, place: RunPlace) -> list[str]:
    """What the spare hosts would run, each in the first seat of its shape, and how far the gang may shrink."""
    from launcher.preflight.spares import spare_plan

    lines = []
    if spec.spare_hosts:
        lines.append(
            "spare hosts: each takes the tasks of whichever host of its shape is gone for good; shown here as they "
            "would run for the first:"
        )
        for task in spare_plan(spec, _spare_inputs(spec, place)).tasks:
            lines.append(f"  {task.host}: {task.name}'s, on port {task.port}: {shlex.join(task.command)}")
    if spec.elastic is not None:
        lines.append(
            f"elastic: with no spare left, the gang goes on with as few as {spec.elastic.min_hosts} of its "
            f"{len(spec.hosts)} hosts, keeping the global batch (docs/supervision.md)"
        )
    return lines


def would_of(spec: ClusterSpec, place: RunPlace) -> Would:
    """What a launch of `spec` would do with the run's earlier checkpoints, as `--check` says it, or why
    its run directory or checkpoints would refuse it before it starts (another training's checkpoints,
    a run still going). The hosts are `--check`'s to judge."""
    from launcher.rundir.resume import resume_notice  # see the module's docstring

    try:
        refuse_run_dir(place.run_dir, (NOT_ANOTHER_DIRECTORY,))
        resuming = resume_notice(spec, place)
    except UsageError as error:
        said = str(error).removesuffix(" Nothing was started.")  # a dry run starts nothing anyway: it says so last
        return Would("refused", f"the launch would be refused: {said}")
    if resuming is None:
        return Would("start", None)
    return Would("nothing" if resuming.finished is not None else "resume", resuming.would())
