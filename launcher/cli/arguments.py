"""The argument parser of `launch` (stdlib argparse), with its subcommands as argparse subparsers and
every help text.

Parsing only: launcher/cli/main.py dispatches what was parsed. `launch` alone (a run) is read by
`run_parser`, without the subparsers, so that a stray word is told to go after `--` (`launch
train.py`) rather than taken for an unknown subcommand. The Kubernetes flags of `launch export` are
added only when it is the subcommand given: they load the Kubernetes layout (pydantic, ~70 ms).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from launcher import __version__
from launcher.cli.request import HOST_LIST_PORT
from launcher.common import exit_codes
from launcher.common.errors import UsageError

__all__ = ["SUBCOMMANDS", "parse_subcommand", "run_parser", "sub_parsers"]

SUBCOMMANDS = {
    "status": "summarise a running or finished run (exits by its state)",
    "logs": "print (or follow with -f) the tasks' logs of a run",
    "stop": "stop a running run's gang, as Ctrl-C in its launcher would, and wait for it",
    "stacks": "print every running task's stack now (all threads), stopping nothing: where a slow run is",
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
    _host_list_flags(parser)
    _run_flags(parser)
    return parser


def _host_list_flags(parser: argparse.ArgumentParser) -> None:
    """Where the tasks run without a spec: --local, -H, --hostfile."""
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
        "--host-network",
        action="store_true",
        help="tasks all on this machine use its network (local_network: host), not a private one: "
        "localhost reaches this machine's services, and their TensorFlow ports are open to other machines",
    )


def _run_flags(parser: argparse.ArgumentParser) -> None:
    """What a run does and shows: --fresh, --dry-run, --check, --inject, --slurm and the console's flags."""
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
        "tensorflow, directories, shared checkpoints, ports, reachability) and on the run directory "
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


_RUN_DIR_HELP = "the run directory, e.g. runs/example, or a run's name (example) under ./runs or --run-root"
_RUN_ROOT_HELP = "where to find a run given by its name (the spec's run_root; default ./runs)"


def parse_subcommand(words: list[str]) -> argparse.Namespace:
    """`launch SUBCOMMAND ...`, read by that subcommand's parser alone (launch's own flags neither apply
    nor make its abbreviations ambiguous: `launch slurm submit --c x.json`)."""
    args = _tree(words[0])[1][words[0]].parse_args(words[1:])
    args.subcommand = words[0]
    return args


def sub_parsers() -> dict[str, argparse.ArgumentParser]:
    """Each subcommand's parser, by name (the help tests walk them)."""
    return _tree("export")[1]


def _tree(name: str) -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """`launch` with its subcommands; `name`: the subcommand given (its own flags are all there)."""
    parser = run_parser()
    subcommands = parser.add_subparsers(dest="subcommand", metavar="SUBCOMMAND", parser_class=_ArgumentParser)
    made: dict[str, argparse.ArgumentParser] = {}

    def add(word: str, description: str, epilog: str | None = None) -> argparse.ArgumentParser:
        made[word] = subcommands.add_parser(
            word,
            prog=f"launch {word}",
            description=description,
            epilog=epilog,
            help=SUBCOMMANDS[word],
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        return made[word]

    _run_dir_commands(add)
    schema = add("schema", SUBCOMMANDS["schema"] + '; editors attach it with "$schema" in a spec')
    schema.add_argument("-o", "--output", metavar="FILE", help="write it to FILE instead of printing it")
    export = add(
        "export",
        "Render the spec as Kubernetes manifests: a JobSet that restarts the whole "
        "gang and routes exit codes (the default), or a TFJob for Kubeflow Training Operator 1.9. "
        "Applies nothing.",
    )
    export.add_argument("target", choices=["k8s"], help="what to export to (k8s)")
    _spec_flags(export, required=True)
    if name == "export":
        from launcher.k8s.cli_args import add_export_arguments  # pydantic: see the module's docstring

        add_export_arguments(export)
    slurm = add(
        "slurm",
        "Write a batch script that runs 'launch --slurm' with the spec's slurm section "
        "(nodes, tasks per node, GPUs, partition, account, time limit) into the run directory and submit "
        "it with sbatch.",
    )
    slurm.add_argument("action", choices=["submit"], help="what to do (submit)")
    _spec_flags(slurm, required=True)
    slurm.add_argument("--print", action="store_true", help="print the batch script; submit nothing, write nothing")
    slurm.add_argument("--wait", action="store_true", help="follow the job's output until it ends; exit as it did")
    return parser, made


def _run_dir_commands(add: Callable[..., argparse.ArgumentParser]) -> None:
    """`launch status`, `logs`, `stop`, `stacks` and `bundle`: each takes a run directory (or a run's name)."""
    status = add("status", SUBCOMMANDS["status"], exit_codes.table_text())
    logs = add("logs", SUBCOMMANDS["logs"])
    stop = add("stop", SUBCOMMANDS["stop"])
    stacks = add("stacks", SUBCOMMANDS["stacks"] + ". Through py-spy where the hosts have it, else faulthandler.")
    bundle = add("bundle", SUBCOMMANDS["bundle"] + ". Never checkpoints, model exports or TensorBoard.")
    for parser in (status, logs, stop, stacks, bundle):
        parser.add_argument("run_dir", metavar="RUN_DIR", help=_RUN_DIR_HELP)
        parser.add_argument("--run-root", metavar="DIR", help=_RUN_ROOT_HELP)
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new lines until the run ends")
    logs.add_argument("--task", action="append", default=[], metavar="TASK", help="only this task (repeatable)")
    logs.add_argument("--attempt", type=int, metavar="N", help="this attempt (default: the latest)")
    stop.add_argument("--timeout", type=_seconds, default=60.0, metavar="S", help="wait at most S seconds (default 60)")
    stacks.add_argument("--task", action="append", default=[], metavar="TASK", help="only this task (repeatable)")
    stacks.add_argument(
        "--timeout", type=_seconds, default=90.0, metavar="S", help="wait at most S seconds (default 90)"
    )
    bundle.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="archive to write (default: ./<name>-bundle-<time>.tar.gz); never overwritten",
    )
