"""`launch`: the command line. The only module that prints or exits.

    launch --cluster cluster.json [--dry-run [--json]] [-- COMMAND ...]
    launch --local 3 [-- python train.py ...]
    launch schema

A LaunchError becomes its message and exit code (2 for anything the user can fix); never a
traceback. Signals become an exception on the main thread; shutdown runs in `finally`.
This module (and the whole launcher) never imports TensorFlow.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Sequence

from launcher.console import Console
from launcher.run_status import describe_run
from launcher.errors import LaunchError, PreflightError, UsageError
from launcher.gang import GroupState
from launcher.masking import mask_env
from launcher.faults import parse_fault
from launcher.plan import LaunchPlan, PlanInputs, build_plan, task_slots
from launcher.policy import RestartPolicy
from launcher.ports import check_local_ports, choose_free_ports, port_is_free
from launcher.report import failure_text, success_text, write_summary
from launcher.spec import BuiltinTraining, ClusterSpec, FunctionTraining, is_url, json_schema, load_spec, parse_spec
from launcher.supervisor import Supervisor
from launcher.transport import HostRouter
from worker.contract import RunLayout

if TYPE_CHECKING:
    from launcher.preflight import PreflightReport

log = logging.getLogger(__name__)


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would exit 2 with usage; keep one path
        raise UsageError(f"{message}\n{self.format_usage().strip()}")


def _parser() -> argparse.ArgumentParser:
    parser = _ArgumentParser(
        prog="launch",
        description="Start a TensorFlow MultiWorkerMirroredStrategy job from a cluster spec and supervise it as one gang.",
        epilog="Subcommands: 'launch schema' prints the JSON Schema of the cluster spec; 'launch status RUN_DIR' "
               "summarises a running or finished run. "
               "Everything after '--' is a command run as every task instead of the spec's training.",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--cluster", metavar="FILE", help="cluster spec (JSON)")
    source.add_argument("--local", metavar="N", type=int, help="simulate N workers on this machine without a spec file")
    parser.add_argument("--name", help="run name (default: the spec's; 'local' for --local)")
    parser.add_argument("--run-root", metavar="DIR", help="override the spec's run_root")
    parser.add_argument("--dry-run", action="store_true", help="print every task's TF_CONFIG, environment and command; start nothing")
    parser.add_argument("--json", action="store_true", help="with --dry-run: print the plan as JSON")
    parser.add_argument("--check", action="store_true",
                        help="run the preflight checks on every host (SSH, python, tensorflow, directories, shared checkpoints, ports, full mesh) and start nothing")
    parser.add_argument("--inject", action="append", default=[], metavar="FAULT",
                        help="rehearse a failure in the first attempt: kill|term|hang|exit=CODE:TASK@step=N, e.g. kill:worker:1@step=50 (repeatable)")
    parser.add_argument("--quiet", action="store_true", help="do not echo task output (it is still logged per task)")
    parser.add_argument("--plain", action="store_true", help="prefixed output lines even on a terminal (no live table)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log the launcher's own decisions")
    return parser


def _split_command(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    argv = list(argv)
    if "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1:]
    return argv, []


def _refuse_empty(args: argparse.Namespace) -> None:
    for flag in ("cluster", "name", "run_root"):
        value = getattr(args, flag)
        if value is not None and not value.strip():
            raise UsageError(f"Got an empty --{flag.replace('_', '-')}: give a value or leave the flag out.")


def _load(args: argparse.Namespace, command: list[str]) -> ClusterSpec:
    _refuse_empty(args)
    if args.local is not None:
        if not 1 <= args.local <= 256:
            raise UsageError(f"Got --local {args.local}: give between 1 and 256 workers.")
        data: dict[str, Any] = {"name": args.name or "local", "hosts": [{"address": "localhost", "workers": args.local}]}
        spec = parse_spec(data, "--local")
    elif args.cluster is not None:
        spec = load_spec(Path(args.cluster))
    else:
        raise UsageError("Give --cluster FILE or --local N (see 'launch --help').")
    updates: dict[str, Any] = {}
    if command:
        updates["training"] = {"kind": "command", "argv": command}
    if args.name is not None and args.cluster is not None:
        updates["name"] = args.name
    if args.run_root is not None:
        updates["run_root"] = args.run_root
    if updates:  # re-validate: overrides obey the same rules as the file
        spec = parse_spec({**spec.model_dump(mode="json", exclude_unset=True), **updates}, args.cluster or "--local")
    return spec


def _next_attempt(run_dir: Path) -> int:
    """Attempts of earlier launches of the same run keep their logs: number after them."""
    if not run_dir.is_dir():
        return 0
    numbers = [n for p in run_dir.iterdir() if (n := RunLayout.attempt_of(p.name)) is not None]
    return max(numbers, default=-1) + 1


def _faults(spec: ClusterSpec, texts: list[str]) -> dict[str, str]:
    names = {slot.name for slot in task_slots(spec)}
    faults = {}
    for text in texts:
        fault = parse_fault(text)
        if fault.task not in names:
            raise UsageError(f"Got --inject {text!r}: there is no task {fault.task} (tasks: {', '.join(sorted(names))}).")
        faults[fault.task] = fault.to_env()
    return faults


def _planner(spec: ClusterSpec, run_dir: Path, first_attempt: int, faults: dict[str, str] | None = None) -> Any:
    ports = choose_free_ports(spec)

    def plan(attempt: int) -> LaunchPlan:
        if attempt > 0:  # same ports if still free; a port-0 task whose port was taken gets another
            for name, port in list(ports.items()):
                if not port_is_free(port):
                    ports.update({name: free for n, free in choose_free_ports(spec).items() if n == name})
        inputs = PlanInputs(str(run_dir), first_attempt + attempt, sys.executable, os.getcwd(), dict(ports),
                            faults=(faults or {}) if attempt == 0 else {})
        result = build_plan(spec, inputs)
        check_local_ports(result)
        return result

    return plan


def _print_dry_run(plan: LaunchPlan, as_json: bool) -> None:
    if as_json:
        data = plan.to_json()
        for task in data["tasks"]:
            task["env"] = mask_env(task["env"])
        print(json.dumps(data, indent=2))
        return
    print(f"run {plan.run_name}: {len(plan.tasks)} task(s), run dir {plan.run_dir}, checkpoints {plan.checkpoint_dir}")
    for task in plan.tasks:
        print(f"\n[{task.label}] on {task.host} ({'local' if task.is_local else 'ssh'}), port {task.port}")
        print(f"  TF_CONFIG={json.dumps(task.tf_config, sort_keys=True)}")
        for key, value in sorted(mask_env(task.env).items()):
            if key != "TF_CONFIG":
                print(f"  {key}={value}")
        print(f"  cwd: {task.cwd}")
        print(f"  command: {' '.join(task.argv)}")
        print(f"  log: {task.log_path}")


def _install_signals(supervisor: Supervisor) -> None:
    from launcher.errors import InterruptedLaunchError

    state = {"stopping": False}

    def handler(signum: int, frame: FrameType | None) -> None:
        if state["stopping"]:
            supervisor.hurry = True  # a second signal: skip the grace period
            return
        state["stopping"] = True
        raise InterruptedLaunchError(signum)

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, handler)


def _preflight(spec: ClusterSpec, plan: LaunchPlan) -> "PreflightReport":
    from launcher.preflight import run_preflight

    return run_preflight(spec, plan)


def _make_checkpoint_dir(spec: ClusterSpec, plan: LaunchPlan) -> None:
    """Create the checkpoint directory when it is ours to create: on this machine, not an object store."""
    if is_url(plan.checkpoint_dir):
        return
    if any(h.is_local for h in spec.hosts) or plan.checkpoint_dir.startswith(plan.run_dir.rstrip("/") + "/"):
        os.makedirs(plan.checkpoint_dir, exist_ok=True)


def run_check(spec: ClusterSpec) -> int:
    run_dir = Path(spec.run_root).resolve() / spec.name
    plan = _planner(spec, run_dir, _next_attempt(run_dir))(0)
    report = _preflight(spec, plan)
    for line in report.lines:
        print(f"  {line}")
    if report.ok:
        print(f"preflight passed: {len(spec.hosts)} host(s), {len(plan.tasks)} task(s)")
        return 0
    raise PreflightError(report.problems)


def run_launch(spec: ClusterSpec, quiet: bool = False, faults: dict[str, str] | None = None, plain: bool = False) -> int:
    run_dir = Path(spec.run_root).resolve() / spec.name
    first = _next_attempt(run_dir)
    planner = _planner(spec, run_dir, first, faults)
    console = Console(quiet=quiet, live=sys.stdout.isatty() and not plain)
    reports_progress = isinstance(spec.training, (BuiltinTraining, FunctionTraining))
    supervisor = Supervisor(
        planner=lambda attempt: planner(attempt),
        transport=HostRouter(list(spec.hosts)),
        policy=RestartPolicy(spec.restart),
        reports_progress=reports_progress,
        on_output=console.output,
        on_notice=console.notice,
        on_report=console.report,
        on_drained=console.flush,
    )
    console.attach(supervisor.status, RunLayout(str(run_dir)).status_file)
    first_plan = planner(0)  # validates local ports before anything starts (raises PortInUseError)
    report = _preflight(spec, first_plan)  # every host, local ones too: nothing is written before it passes
    if not report.ok:
        raise PreflightError(report.problems)
    _make_checkpoint_dir(spec, first_plan)
    console.notice(f"run {spec.name}: starting {sum(h.task_count for h in spec.hosts)} task(s); logs in {run_dir}")
    _install_signals(supervisor)
    try:
        result = supervisor.run()
    finally:
        console.close()
        if supervisor.result is not None:
            supervisor.result.state = supervisor.state if supervisor.state.is_terminal else GroupState.INTERRUPTED
            path = write_summary(supervisor.result)
            console.notice(f"summary: {path}")
    if result.state is GroupState.SUCCEEDED:
        console.notice(success_text(result))
        return 0
    console.notice(failure_text(result))
    return 1


def _raise_fd_limit() -> None:
    """Every local task holds a few pipes; the common soft limit of 1024 runs out at a few hundred tasks."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 16)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError):  # a container may refuse; the default limit still serves small runs
            log.info("could not raise the open-file limit from %d", soft)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    own, command = _split_command(argv)
    try:
        if own[:1] == ["schema"]:
            print(json.dumps(json_schema(), indent=2))
            return 0
        if own[:1] == ["status"]:
            if len(own) != 2:
                raise UsageError("usage: launch status RUN_DIR (e.g. runs/example)")
            print(describe_run(own[1]))
            return 0
        args = _parser().parse_args(own)
        logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                            format="[launch] %(levelname)s %(name)s: %(message)s")
        if args.json and not args.dry_run:
            raise UsageError("--json goes with --dry-run.")
        spec = _load(args, command)
        faults = _faults(spec, args.inject)
        _raise_fd_limit()
        if args.dry_run:
            run_dir = Path(spec.run_root).resolve() / spec.name
            _print_dry_run(_planner(spec, run_dir, _next_attempt(run_dir), faults)(0), args.json)
            return 0
        if args.check:
            return run_check(spec)
        return run_launch(spec, quiet=args.quiet, faults=faults, plain=args.plain)
    except LaunchError as error:
        print(f"launch: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        return 130


def entry() -> None:
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:  # `launch ... | head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    raise SystemExit(code)
