"""`launch`: the command line. The only module that prints or exits.

    launch --cluster cluster.json [--dry-run [--json]] [-- COMMAND ...]
    launch --local 3 [-- python train.py ...]
    launch schema
    launch bundle RUN_DIR [-o FILE]
    launch export k8s --cluster cluster.json --image IMAGE [--format jobset|tfjob] [-o DIR]

A LaunchError becomes its message and exit code (2 for anything the user can fix); never a
traceback. Signals become an exception on the main thread; shutdown runs in `finally`.
This module (and the whole launcher) never imports TensorFlow. The spec (pydantic), the plan and
the transports are imported by the paths that use them, so `launch status`, `launch --help` and a
usage error answer without paying for them.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.errors import LaunchError, PreflightError, UsageError
from launcher.faults import Fault, parse_fault
from launcher.masking import mask_env
from launcher.run_status import describe_run
from worker.contract import TF_CONFIG

if TYPE_CHECKING:  # these import pydantic (the spec) and the transports; each path imports them when it runs
    from launcher.plan import LaunchPlan
    from launcher.slurm.allocation import Allocation
    from launcher.spec import ClusterSpec, HostsFrom

log = logging.getLogger(__name__)


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would exit 2 with usage; keep one path
        raise UsageError(f"{message}\n{self.format_usage().strip()}")


def _parser() -> argparse.ArgumentParser:
    parser = _ArgumentParser(
        prog="launch",
        description="Start a TensorFlow MultiWorkerMirroredStrategy job from a cluster spec and supervise it as one "
        "gang.",
        epilog="Subcommands: 'launch schema' prints the JSON Schema of the cluster spec; 'launch status RUN_DIR' "
        "summarises a running or finished run; 'launch bundle RUN_DIR [-o FILE]' packs a run's logs, summary, spec "
        "(secrets masked) and preflight findings into one archive for a post-mortem; 'launch export k8s --cluster "
        "FILE --image IMAGE' writes Kubernetes manifests (JobSet or TFJob) that run the spec. "
        "Everything after '--' is a command run as every task instead of the spec's training.",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--cluster", metavar="FILE", help="cluster spec (JSON)")
    source.add_argument("--local", metavar="N", type=int, help="simulate N workers on this machine without a spec file")
    parser.add_argument("--name", help="run name (default: the spec's; 'local' for --local)")
    parser.add_argument("--run-root", metavar="DIR", help="override the spec's run_root")
    parser.add_argument(
        "--dry-run", action="store_true", help="print every task's TF_CONFIG, environment and command; start nothing"
    )
    parser.add_argument("--json", action="store_true", help="with --dry-run: print the plan as JSON")
    parser.add_argument(
        "--check",
        action="store_true",
        help="run the preflight checks on every host (SSH, python, tensorflow, directories, shared checkpoints, "
        "ports, full mesh) and start nothing",
    )
    parser.add_argument(
        "--inject",
        action="append",
        default=[],
        metavar="FAULT",
        help="rehearse a failure in the first attempt: kill|term|hang|exit=CODE:TASK@step=N, e.g. "
        "kill:worker:1@step=50 (repeatable)",
    )
    parser.add_argument(
        "--slurm",
        action="store_true",
        help="run inside the current Slurm allocation: its nodes are the hosts, each attempt is one srun step "
        "(see also 'launch slurm submit')",
    )
    parser.add_argument("--quiet", action="store_true", help="do not echo task output (it is still logged per task)")
    parser.add_argument("--plain", action="store_true", help="prefixed output lines even on a terminal (no live table)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log the launcher's own decisions")
    return parser


def _split_command(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    argv = list(argv)
    if "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1 :]
    return argv, []


def _refuse_empty(args: argparse.Namespace) -> None:
    for flag in ("cluster", "name", "run_root"):
        value = getattr(args, flag)
        if value is not None and not value.strip():
            raise UsageError(f"Got an empty --{flag.replace('_', '-')}: give a value or leave the flag out.")


_THIS_MACHINE = ("localhost", "127.0.0.1", "::1")


def _runs_here(args: argparse.Namespace) -> bool:
    """A cheap guess, before the spec is validated, that a host of this launch is this machine and
    runs the launcher's own python (wrong guesses only cost an agent that is closed unused)."""
    if args.local is not None:
        return True
    try:
        data = json.loads(Path(args.cluster).read_text(encoding="utf-8")) if args.cluster else None
    except (OSError, ValueError, RecursionError):  # the real reading reports it
        return False
    if not isinstance(data, dict) or data.get("python") or not isinstance(data.get("hosts"), list):
        return False
    return any(
        isinstance(h, dict)
        and not h.get("python")
        and (h.get("transport") == "local" or h.get("address") in _THIS_MACHINE)
        for h in data["hosts"]
    )


def _start_agent_early() -> None:
    from launcher.agent.bootstrap import agent_line
    from launcher.transport.local import LOCAL_BEAT_S, start_early

    start_early(sys.executable, agent_line(LOCAL_BEAT_S, watch_silence=False))


def _load(args: argparse.Namespace, command: list[str], hosts_from: HostsFrom | None = None) -> ClusterSpec:
    from launcher.spec import load_spec, parse_spec

    _refuse_empty(args)
    if args.local is not None:
        if not 1 <= args.local <= 256:
            raise UsageError(f"Got --local {args.local}: give between 1 and 256 workers.")
        data: dict[str, Any] = {
            "name": args.name or "local",
            "hosts": [{"address": "localhost", "workers": args.local}],
        }
        spec = parse_spec(data, "--local")
    elif args.cluster is not None:
        spec = load_spec(Path(args.cluster), hosts_from)
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
        data = {**spec.model_dump(mode="json", exclude_unset=True), **updates}
        spec = parse_spec(data, args.cluster or "--local", hosts_from)
    return spec


def _faults(spec: ClusterSpec, texts: list[str]) -> list[Fault]:
    from launcher.plan import task_slots

    names = {slot.name for slot in task_slots(spec)}
    faults = []
    for text in texts:
        fault = parse_fault(text)
        if fault.task not in names:
            raise UsageError(
                f"Got --inject {text!r}: there is no task {fault.task} (tasks: {', '.join(sorted(names))})."
            )
        faults.append(fault)
    return faults


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
            if key != TF_CONFIG:
                print(f"  {key}={value}")
        print(f"  cwd: {task.cwd}")
        print(f"  command: {' '.join(task.argv)}")
        print(f"  log: {task.log_path}")


def _freeze_start_up() -> None:
    """Keep what start-up built (modules, classes, pydantic's validators, the spec) out of every later
    garbage collection: it lives until exit anyway. Otherwise the collection at interpreter exit walks
    all of it (tens of milliseconds at the end of every launch), and so does each full collection while
    the supervisor streams output. Called before the run opens any file, thread, socket or task, so
    everything a run creates is still collected as usual."""
    gc.freeze()


def _check(spec: ClusterSpec, allocation: Allocation | None) -> int:
    from launcher.run import make_planner, make_transport, preflight

    _freeze_start_up()
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
    print(f"preflight passed: {len(spec.hosts)} host(s), {len(plan.tasks)} task(s)")
    return 0


def _launch(spec: ClusterSpec, quiet: bool, faults: list[Fault], plain: bool, allocation: Allocation | None) -> int:
    from launcher.console import Console
    from launcher.gang import LaunchState
    from launcher.report import failure_text, success_text
    from launcher.run import launch

    _freeze_start_up()
    console = Console(quiet=quiet, live=sys.stdout.isatty() and not plain)
    result = launch(spec, console, faults, allocation)
    if result.state is LaunchState.SUCCEEDED:
        console.notice(success_text(result))
        return 0
    if result.state is LaunchState.PREEMPTED and allocation is not None:
        # Said before asking: Slurm stops this batch script as soon as it accepts the requeue.
        console.notice(f"requeueing Slurm job {allocation.job_id}: it resumes from the last checkpoint")
        refused = allocation.requeue()
        if refused is None:
            return 0
        console.notice(f"Slurm refused to requeue job {allocation.job_id}: {refused}; launch it again to resume")
    console.notice(failure_text(result))
    return 1


def _slurm_command(own: list[str], command: list[str]) -> int:
    """`launch slurm submit --cluster FILE [--print] [--wait] [-- COMMAND ...]`."""
    from launcher.run import run_dir_of
    from launcher.slurm import submit as slurm

    parser = _ArgumentParser(
        prog="launch slurm submit",
        description="Write a batch script that runs 'launch --slurm' with the spec's slurm section (nodes, tasks per "
        "node, GPUs, partition, account, time limit) into the run directory and submit it with sbatch.",
    )
    parser.add_argument("--cluster", metavar="FILE", required=True, help="cluster spec (JSON); hosts are not needed")
    parser.add_argument("--name", help="run name (default: the spec's)")
    parser.add_argument("--run-root", metavar="DIR", help="override the spec's run_root")
    parser.add_argument("--print", action="store_true", help="print the batch script; submit nothing, write nothing")
    parser.add_argument("--wait", action="store_true", help="follow the job's output until it ends; exit as it did")
    if own[:1] != ["submit"]:
        raise UsageError(f"usage: {parser.format_usage().strip().removeprefix('usage: ')}")
    args = parser.parse_args(own[1:])
    args.local = None
    spec = _load(args, command, lambda first: None)
    run_dir = run_dir_of(spec)
    if args.print:
        print(slurm.batch_script(spec, run_dir / "submitted-spec.json", run_dir), end="")
        return 0
    script = slurm.write_job(spec, run_dir)
    job_id = slurm.submit(script)
    output = run_dir / f"slurm-{job_id}.out"
    print(f"[launch] submitted Slurm job {job_id}: script {script}, output {output}", flush=True)

    def say(text: str) -> None:
        print(f"[launch] {text}", flush=True)

    fields = slurm.wait_started(job_id, spec.restart.start_timeout_s, say)
    say(f"job {job_id} is {fields.get('JobState', '?').lower()} on {fields.get('NodeList', '?')}")
    if not args.wait:
        return 0
    return slurm.follow(job_id, output, say, lambda line: print(line, flush=True))


def _bundle_command(own: list[str]) -> int:
    """`launch bundle RUN_DIR [-o FILE]`."""
    from launcher.bundle import make_bundle

    parser = _ArgumentParser(
        prog="launch bundle",
        description="Pack what a post-mortem of a run needs into one tar.gz: summary, status, every attempt's logs, "
        "result and error files, the spec with secret values masked, the preflight's findings (versions, GPUs) and "
        "this machine's versions. Never checkpoints, model exports or TensorBoard events.",
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the run directory, e.g. runs/example")
    parser.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="archive to write (default: ./<name>-bundle-<time>.tar.gz); never overwritten",
    )
    args = parser.parse_args(own)
    result = make_bundle(args.run_dir, args.output)
    size = result.size / 1024
    shown = f"{size:.1f} KiB" if size < 1024 else f"{size / 1024:.1f} MiB"
    print(f"bundle: {result.path} ({shown}, {result.members} files)")
    for entry in result.left_out:
        print(f"  not packed: {entry}")
    return 0


def _export_command(own: list[str], command: list[str]) -> int:
    """`launch export k8s --cluster FILE --image IMAGE [--format jobset|tfjob] [-o DIR] [-- COMMAND ...]`."""
    from launcher.k8s.export import export, text, write
    from launcher.k8s.layout import DEFAULT_PORT, FORMATS, MOUNT_PATH, ExportOptions

    parser = _ArgumentParser(
        prog="launch export k8s",
        description="Render the spec as Kubernetes manifests: a JobSet that restarts the whole gang and routes exit "
        "codes (the default), or a TFJob for Kubeflow Training Operator 1.9. Each pod computes its TF_CONFIG from its "
        "stable host name and index (python -m worker.pod). Applies nothing.",
    )
    parser.add_argument("--cluster", metavar="FILE", required=True, help="cluster spec (JSON)")
    parser.add_argument("--image", required=True, help="container image with the project and TensorFlow (docker/)")
    parser.add_argument("--format", default="jobset", help=f"{' or '.join(FORMATS)} (default: jobset)")
    parser.add_argument("-o", "--output", metavar="DIR", help="write one YAML file per object here (default: stdout)")
    parser.add_argument("--name", help="name of the Kubernetes objects and the run (default: the spec's)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"TF port in every pod (default {DEFAULT_PORT})")
    parser.add_argument(
        "--checkpoint-claim",
        metavar="NAME",
        help=f"a ReadWriteMany PersistentVolumeClaim mounted at {MOUNT_PATH} in every pod: the run directory and the "
        "checkpoints (unless checkpoint_dir is an object-store URL)",
    )
    parser.add_argument("--claim-size", metavar="SIZE", help="also write that claim, of this size (e.g. 100Gi)")
    parser.add_argument("--storage-class", metavar="CLASS", help="storage class of the claim written")
    parser.add_argument(
        "--secret",
        metavar="NAME",
        help="a Secret holding the spec's secret-looking env values under the same keys; they are referenced, never "
        "written",
    )
    if own[:1] != ["k8s"]:
        raise UsageError(f"usage: {parser.format_usage().strip().removeprefix('usage: ')}")
    args = parser.parse_args(own[1:])
    args.local, args.run_root = None, None
    spec = _load(args, command)
    options = ExportOptions(
        image=args.image,
        format=args.format,
        name=args.name,
        port=args.port,
        checkpoint_claim=args.checkpoint_claim,
        claim_size=args.claim_size,
        storage_class=args.storage_class,
        secret=args.secret,
    )
    result = export(spec, options, args.cluster)
    if result.warnings:  # once, here; the YAML repeats them as comments
        print(f"launch: with --format {args.format}, these guarantees of the launcher do not hold:", file=sys.stderr)
        for line in result.warnings:
            print(f"  - {line}", file=sys.stderr)
    if args.output is None:
        print(text(result), end="")
        return 0
    for path in write(result, Path(args.output)):
        print(f"wrote {path}")
    return 0


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
            from launcher.spec import json_schema

            print(json.dumps(json_schema(), indent=2))
            return 0
        if own[:1] == ["slurm"]:
            return _slurm_command(own[1:], command)
        if own[:1] == ["status"]:
            if len(own) != 2:
                raise UsageError("usage: launch status RUN_DIR (e.g. runs/example)")
            print(describe_run(own[1]))
            return 0
        if own[:1] == ["bundle"]:
            return _bundle_command(own[1:])
        if own[:1] == ["export"]:
            return _export_command(own[1:], command)
        args = _parser().parse_args(own)
        logging.basicConfig(
            level=logging.INFO if args.verbose else logging.WARNING,
            format="[launch] %(levelname)s %(name)s: %(message)s",
        )
        if args.json and not args.dry_run:
            raise UsageError("--json goes with --dry-run.")
        allocation = None
        if args.slurm:
            from launcher.slurm.allocation import read_allocation

            allocation = read_allocation()
        if args.slurm and args.local is not None:
            raise UsageError("--slurm takes the hosts from the allocation; use it with --cluster, not --local.")
        if not args.dry_run and allocation is None and _runs_here(args):
            _start_agent_early()
        spec = _load(args, command, allocation.hosts if allocation is not None else None)
        faults = _faults(spec, args.inject)
        _raise_fd_limit()
        if args.dry_run:
            from launcher.run import make_planner

            _print_dry_run(make_planner(spec, faults)(0), args.json)
            return 0
        if args.check:
            return _check(spec, allocation)
        return _launch(spec, quiet=args.quiet, faults=faults, plain=args.plain, allocation=allocation)
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
