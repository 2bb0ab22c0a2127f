"""`launch`: the command line. Parses, builds a request, calls one function; the only module that exits.

    launch --cluster cluster.json [--dry-run [--json] | --check] [-- COMMAND ...]
    launch --local 3 | -H a:2,b:2 | --hostfile FILE [-- python train.py ...]
    launch status|logs|stop RUN_DIR ...
    launch schema [-o FILE]
    launch bundle RUN_DIR [-o FILE]
    launch export k8s --cluster cluster.json --image IMAGE ...
    launch slurm submit --cluster cluster.json ...

A LaunchError becomes its message and exit code (2 for anything the user can fix); never a
traceback. Signals become an exception on the main thread; shutdown runs in `finally`.
This module (and the whole launcher) never imports TensorFlow. The spec (pydantic), the plan and
the transports are imported by the paths that use them, so `launch status`, `launch --help` and a
usage error answer without paying for them.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import sys
import types
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

from launcher.cli.arguments import SUBCOMMANDS, run_parser, sub_parsers
from launcher.cli.request import LaunchRequest, parse_host_list, read_hostfile, shown_tasks, task_names
from launcher.common import exit_codes
from launcher.common.errors import LaunchError, UsageError
from launcher.common.masking import printable, redact
from launcher.supervise.faults import Fault, parse_fault

if TYPE_CHECKING:
    from launcher.cli.commands import Would
    from launcher.spec.models import ClusterSpec

log = logging.getLogger(__name__)


def _split_command(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    argv = list(argv)
    if "--" in argv:
        cut = argv.index("--")
        if cut == len(argv) - 1:  # an empty "$@" in a wrapper: not a wish for the spec's training
            raise UsageError(
                "nothing follows '--': give the command every task runs (-- python train.py), "
                "or leave out '--' to run the spec's training"
            )
        return argv[:cut], argv[cut + 1 :]
    return argv, []


def _request(args: argparse.Namespace, command: list[str]) -> LaunchRequest:
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
    return LaunchRequest(args.cluster, getattr(args, "local", None), hosts, args.name, args.run_root, tuple(command))


def _faults(spec: ClusterSpec, texts: list[str]) -> list[Fault]:
    faults = [parse_fault(text) for text in texts]
    for text, fault in zip(texts, faults, strict=True):
        if fault.task not in (names := task_names(spec)):
            raise UsageError(
                f"Got --inject {text!r}: there is no task {fault.task} (tasks: {', '.join(sorted(names))})."
            )
        if sum(other.task == fault.task for other in faults) > 1:
            raise UsageError(f"Got more than one --inject for {fault.task}: a task takes one fault per launch.")
    return faults


def _quiet_libraries(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="[launch] %(levelname)s %(name)s: %(message)s"
    )
    if not verbose:  # paramiko logs what the launcher already says in its own words
        logging.getLogger("paramiko").setLevel(logging.CRITICAL + 1)


def _start_agents_early(args: argparse.Namespace) -> None:
    from launcher.agent.bootstrap import agent_line
    from launcher.cli.request import local_hosts_here
    from launcher.transport.local import LOCAL_BEAT_S, start_early

    count = local_hosts_here(args.cluster, args.local, args.hosts)
    if count:
        start_early(sys.executable, agent_line(LOCAL_BEAT_S, False, False, False), count)


def _run(own: list[str], command: list[str]) -> int:
    from launcher.cli import commands

    args = run_parser().parse_args(own)
    _quiet_libraries(args.verbose)
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
        from launcher.slurm.allocation import read_allocation

        allocation = read_allocation()
    request = _request(args, command)
    fresh_refused = args.fresh and (args.dry_run or args.check)  # refused below, naming the run directory
    if not args.dry_run and not fresh_refused and allocation is None:
        _start_agents_early(args)
    from launcher.cli.request import request_spec

    notes: list[str] = []
    spec = request_spec(request, allocation.hosts if allocation is not None else None, notes)
    if fresh_refused:
        from launcher.rundir.lock import run_dir_of

        run_dir = run_dir_of(spec)
        named = printable(str(run_dir))
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
        _say(f"[launch] {redact(note)}", to_stderr=True)
    faults = _faults(spec, args.inject)
    show = shown_tasks(spec, args.show)
    commands.raise_fd_limit()
    if args.dry_run:
        from launcher.run import make_planner

        remote = "ssh" if allocation is None else "srun"
        would = _would(spec)
        shown = commands.dry_run(make_planner(spec, faults)(0), args.json, remote, would)
        return exit_codes.USAGE if would.do == "refused" else shown  # as the launch itself would exit
    if args.check:
        return commands.check(spec, allocation)
    options = commands.ConsoleOptions(quiet=args.quiet, plain=args.plain, verbose=args.verbose, show=show)
    return commands.run(spec, options, faults, allocation, fresh=args.fresh)


def _would(spec: ClusterSpec) -> Would:
    """What a launch of `spec` would do with the run's earlier checkpoints, as `--check` says it, or why
    its run directory or checkpoints would refuse it before it starts (another training's checkpoints,
    a run still going). The hosts are `--check`'s to judge."""
    from launcher.cli.commands import Would
    from launcher.rundir.lock import refuse_if_not_a_run, run_dir_of
    from launcher.rundir.resume import resume_notice

    try:
        refuse_if_not_a_run(str(run_dir_of(spec)))
        resuming = resume_notice(spec)
    except UsageError as error:
        said = str(error).removesuffix(" Nothing was started.")  # a dry run starts nothing anyway: it says so last
        return Would("refused", f"the launch would be refused: {said}")
    if resuming is None:
        return Would("start", None)
    return Would("nothing" if resuming.finished is not None else "resume", resuming.would())


def _run_dir_named(value: str, run_root: str | None = None) -> str:
    """RUN_DIR as given, or, for a bare name, that run under `run_root` (`launch status example
    --run-root /data/runs`); without one, under the default run_root (`launch status example` for
    runs/example) when it is a run there and `value` is no run directory here."""
    from launcher.rundir.lock import is_run_dir
    from worker.contract import DEFAULT_RUN_ROOT

    if os.sep in value:
        return value
    if run_root is not None:
        return os.path.join(os.path.expanduser(run_root), value)
    default = os.path.join(DEFAULT_RUN_ROOT, value)
    if is_run_dir(value) or not is_run_dir(default):
        return value
    return default


def _subcommand(name: str, own: list[str], command: list[str]) -> int:
    from launcher.cli import commands

    args = sub_parsers()[name].parse_args(own)
    if getattr(args, "run_dir", None) is not None:
        args.run_dir = _run_dir_named(args.run_dir, args.run_root)
    if name == "status":
        from launcher.rundir.status import describe_run

        description = describe_run(args.run_dir)
        _say(description.text)
        return description.exit_code
    if name == "logs":
        from launcher.rundir.logs import show_logs

        return show_logs(
            args.run_dir, sys.stdout, follow=args.follow, tasks=args.task, attempt=args.attempt, notes=sys.stderr
        )
    if name == "stop":
        from launcher.rundir.stop import stop_run

        return stop_run(args.run_dir, timeout_s=args.timeout, say=_say)
    if name == "schema":
        return commands.schema(args.output)
    if name == "bundle":
        return commands.bundle(args.run_dir, args.output)
    from launcher.cli.request import request_spec

    args.local = args.hosts = args.hostfile = None
    if name == "slurm":
        spec = request_spec(_request(args, command), lambda first: None)
        return commands.slurm_submit(spec, args.print, args.wait)
    from launcher.k8s.cli_args import export_options

    request = _request(args, command)
    spec = request_spec(request)
    return commands.export_k8s(spec, export_options(args), request.described, args.output)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        own, command = _split_command(sys.argv[1:] if argv is None else argv)
        if own[:1] and own[0] in SUBCOMMANDS:
            return _subcommand(own[0], own[1:], command)
        return _run(own, command)
    except LaunchError as error:  # its words may quote the spec (a path holding a secret's value)
        _say(f"launch: {redact(str(error))}", to_stderr=True)
        return error.exit_code
    except KeyboardInterrupt:
        return exit_codes.INTERRUPTED


def _say(text: str, to_stderr: bool = False) -> None:
    """Print a line of a command whose exit code carries its result: a reader that left (or a full
    disk, or a closed stream) does not change that result, nor stop the command half-way
    (`launch stop RUN | head -1`, `launch ... 2>&1 | head`)."""
    stream = sys.stderr if to_stderr else sys.stdout
    if stream is None:  # started with the stream closed (`>&-`)
        return
    try:
        print(text, file=stream, flush=True)
    except OSError:  # EPIPE, ENOSPC, EIO: the line is lost, the result is not
        _drop(stream)


def _drop(stream: TextIO) -> None:
    from launcher.console import discard  # only once a write failed: not on every command's path

    discard(stream)


def _open_closed_standard_streams() -> None:
    """`launch ... >&-`: a closed standard descriptor gets /dev/null, before any file the launcher
    opens could take its number (and a task's output land in it), and Python's stream for it."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_RDWR)  # the lowest free number: this one, the lower ones being open
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, mode, closefd=False))  # noqa: SIM115 - lives as long as the process


def _without_pydantic_plugins() -> None:
    """The `launch` process validates only its own spec: pydantic plugins installed beside it (tracing
    and metrics hooks) are not loaded for it. Finding them imports importlib.metadata and reads every
    installed distribution's entry points, ~20 ms of every launch's start, and a broken one would
    break `launch`. Only the command's own process: `import launcher` as a library changes nothing."""
    name = "pydantic.plugin._loader"
    if name not in sys.modules:
        loader = types.ModuleType(name, "pydantic's plugin loader, finding none (launcher/cli/main.py)")
        loader.get_plugins = lambda: ()  # type: ignore[attr-defined]
        sys.modules[name] = loader


def entry() -> None:
    _open_closed_standard_streams()
    _without_pydantic_plugins()
    code: int | None = None
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:  # `launch logs ... | head`: the reader left; not an error of ours
        _drop(sys.stdout)
    except OSError as error:
        if error.errno not in (errno.ENOSPC, errno.EIO, errno.EDQUOT):
            raise
        _say(f"launch: cannot write its output: {error.strerror}", to_stderr=True)
        code = exit_codes.FAILED if code is None else code
    # a run's own outcome stands when only the last flush found the reader gone
    raise SystemExit(0 if code is None else code)
