"""The argument parsers of `launch` and its subcommands (stdlib argparse), with their help texts.

Parsing only: launcher/cli/main.py decides what each parsed command does.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from launcher import __version__
from launcher.cli.request import HOST_LIST_PORT
from launcher.common import exit_codes
from launcher.common.errors import UsageError

__all__ = ["SUBCOMMANDS", "run_parser", "sub_parsers"]

SUBCOMMANDS = {
    "status": "summarise a running or finished run (exits by its state)",
    "logs": "print (or follow with -f) the tasks' logs of a run",
    "stop": "stop a running run's gang, as Ctrl-C in its launcher would, and wait for it",
    "schema": "print (or write with -o) the JSON Schema of the cluster spec",
    "bundle": "pack a run's logs, summary, spec (secrets masked) and preflight findings into one archive",
    "export": "export k8s: write Kubernetes manifests (JobSet or TFJob) that run the spec",
    "slurm": "slurm submit: write a batch script that runs the spec under Slurm and submit it",
}


class _ArgumentParser(argparse.ArgumentParser):
    takes_command = False  # `launch` itself: words after `--` are the tasks' command

    def error(self, message: str) -> Any:  # argparse would exit 2 with usage; keep one path
        head, _, words = message.partition(": ")
        if self.takes_command and head == "unrecognized arguments" and not words.startswith("-"):
            python = "python3 " if words.split()[0].endswith(".py") else ""  # a script is run by a python
            message += f" (a command for every task goes after --: {self.prog} ... -- {python}{words})"
        try:  # the usage first and the mistake last, where a terminal keeps it in sight (as argparse does)
            self.print_usage(sys.stderr)
        except (OSError, ValueError):  # a closed or full stream: the exit code still says it
            pass
        raise UsageError(message)


def _seconds(text: str) -> float:
    """A number of seconds, 0 or more (argparse names the flag when this refuses)."""
    import math

    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds (0 or more)")
    return value


def _parser(prog: str, description: str, epilog: str | None = None) -> argparse.ArgumentParser:
    return _ArgumentParser(
        prog=prog, description=description, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter
    )


def _command_parser(prog: str, description: str, epilog: str | None = None) -> argparse.ArgumentParser:
    parser: _ArgumentParser = _ArgumentParser(
        prog=prog, description=description, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.takes_command = True
    return parser


def _spec_flags(parser: argparse.ArgumentParser, required: bool = False) -> None:
    """The flags every command that reads a spec shares."""
    parser.add_argument(
        "--cluster", metavar="FILE", required=required, help="cluster spec (JSON; - reads it from standard input)"
    )
    defaults = "the spec's" if required else "the spec's; 'local' for --local, 'hosts' for -H"
    parser.add_argument("--name", help=f"run name (default: {defaults})")
    parser.add_argument("--run-root", metavar="DIR", help="override the spec's run_root")


def run_parser() -> argparse.ArgumentParser:
    commands = "\n".join(f"  launch {name:<8} {text}" for name, text in SUBCOMMANDS.items())
    parser = _command_parser(
        "launch",
        "Start a TensorFlow MultiWorkerMirroredStrategy job from a cluster spec and supervise it as one gang.\n"
        "Everything after '--' is a command run as every task instead of the spec's training.",
        f"subcommands ('launch SUBCOMMAND --help' for each):\n{commands}\n\n{exit_codes.table_text()}",
    )
    parser.add_argument("--version", action="version", version=f"launch (tflaunch) {__version__}")
    _spec_flags(parser)
    parser.add_argument(
        "--local",
        metavar="N",
        type=int,
        help="simulate N workers on this machine without a spec: they run the command after --, or "
        "without one the built-in example training",
    )
    parser.add_argument(
        "-H",
        "--hosts",
        metavar="HOST:N,...",
        help=f"run N workers on each host, without a spec (remote hosts: TF ports from {HOST_LIST_PORT} up)",
    )
    parser.add_argument("--hostfile", metavar="FILE", help="like -H, one HOST[:N] or 'HOST slots=N' per line")
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="start the run over: move its old run directory and "
        "checkpoints aside (renamed *.old-TIME, never deleted) instead of resuming",
    )
    parser.add_argument("--dry-run", action="store_true", help="print every task's TF_CONFIG, env and command")
    parser.add_argument("--json", action="store_true", help="with --dry-run: print the plan as JSON")
    parser.add_argument(
        "--check",
        action="store_true",
        help="run the preflight checks on every host (SSH, python, "
        "tensorflow, directories, shared checkpoints, ports, full mesh) and on the run directory "
        "(ours, not running, no other training's checkpoints) and start nothing",
    )
    parser.add_argument(
        "--inject",
        action="append",
        default=[],
        metavar="FAULT",
        help="rehearse a failure in the first attempt: kill|term|hang|exit=CODE:TASK@step=N, e.g. "
        "kill:worker:1@step=50 (a script of your own fires it from report('step', step=n))",
    )
    parser.add_argument(
        "--slurm",
        action="store_true",
        help="run inside the current Slurm allocation: its nodes are "
        "the hosts, each attempt is one srun step (see also 'launch slurm submit')",
    )
    parser.add_argument("--show", metavar="TASK[,TASK]", help="echo only these tasks' output (all are still logged)")
    parser.add_argument("--quiet", action="store_true", help="echo no task output (it is still logged per task)")
    parser.add_argument("--plain", action="store_true", help="prefixed output lines even on a terminal (no live table)")
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="log the launcher's own decisions and show TensorFlow's known-harmless start-up lines",
    )
    return parser


_RUN_DIR_HELP = "the run directory, e.g. runs/example, or a run's name (example) under ./runs or --run-root"
_RUN_ROOT_HELP = "where to find a run given by its name (the spec's run_root; default ./runs)"


def sub_parsers() -> dict[str, argparse.ArgumentParser]:
    from launcher.k8s.cli_args import add_export_arguments

    status = _parser("launch status", SUBCOMMANDS["status"], exit_codes.table_text())
    status.add_argument("run_dir", metavar="RUN_DIR", help=_RUN_DIR_HELP)
    status.add_argument("--run-root", metavar="DIR", help=_RUN_ROOT_HELP)
    logs = _parser("launch logs", SUBCOMMANDS["logs"])
    logs.add_argument("run_dir", metavar="RUN_DIR", help=_RUN_DIR_HELP)
    logs.add_argument("--run-root", metavar="DIR", help=_RUN_ROOT_HELP)
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new lines until the run ends")
    logs.add_argument("--task", action="append", default=[], metavar="TASK", help="only this task (repeatable)")
    logs.add_argument("--attempt", type=int, metavar="N", help="this attempt (default: the latest)")
    stop = _parser("launch stop", SUBCOMMANDS["stop"])
    stop.add_argument("run_dir", metavar="RUN_DIR", help=_RUN_DIR_HELP)
    stop.add_argument("--run-root", metavar="DIR", help=_RUN_ROOT_HELP)
    stop.add_argument("--timeout", type=_seconds, default=60.0, metavar="S", help="wait at most S seconds (default 60)")
    schema = _parser("launch schema", SUBCOMMANDS["schema"] + '; editors attach it with "$schema" in a spec')
    schema.add_argument("-o", "--output", metavar="FILE", help="write it to FILE instead of printing it")
    bundle = _parser("launch bundle", SUBCOMMANDS["bundle"] + ". Never checkpoints, model exports or TensorBoard.")
    bundle.add_argument("run_dir", metavar="RUN_DIR", help=_RUN_DIR_HELP)
    bundle.add_argument("--run-root", metavar="DIR", help=_RUN_ROOT_HELP)
    bundle.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="archive to write (default: ./<name>-bundle-<time>.tar.gz); never overwritten",
    )
    export = _parser(
        "launch export",
        "Render the spec as Kubernetes manifests: a JobSet that restarts the whole "
        "gang and routes exit codes (the default), or a TFJob for Kubeflow Training Operator 1.9. "
        "Applies nothing.",
    )
    export.add_argument("target", choices=["k8s"], help="what to export to (k8s)")
    _spec_flags(export, required=True)
    add_export_arguments(export)
    slurm = _parser(
        "launch slurm",
        "Write a batch script that runs 'launch --slurm' with the spec's slurm section "
        "(nodes, tasks per node, GPUs, partition, account, time limit) into the run directory and submit "
        "it with sbatch.",
    )
    slurm.add_argument("action", choices=["submit"], help="what to do (submit)")
    _spec_flags(slurm, required=True)
    slurm.add_argument("--print", action="store_true", help="print the batch script; submit nothing, write nothing")
    slurm.add_argument("--wait", action="store_true", help="follow the job's output until it ends; exit as it did")
    return {
        "status": status,
        "logs": logs,
        "stop": stop,
        "schema": schema,
        "bundle": bundle,
        "export": export,
        "slurm": slurm,
    }
