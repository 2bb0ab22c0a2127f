"""`launch`: the command line. Parses, then calls one command from the table; the only place that exits.

    launch --cluster cluster.json [--dry-run [--json] | --check] [-- COMMAND ...]
    launch --local 3 | -H a:2,b:2 | --hostfile FILE [-- python train.py ...]
    launch status|logs|stop|stacks RUN_DIR ...
    launch schema [-o FILE]
    launch bundle RUN_DIR [-o FILE]
    launch export k8s --cluster cluster.json --image IMAGE ...
    launch slurm submit --cluster cluster.json ...

A LaunchError becomes its message and exit code (2 for anything the user can fix); never a
traceback. Signals become an exception on the main thread; shutdown runs in `finally`.
This module (and the whole launcher) never imports TensorFlow. The commands' modules are light: what
each needs beyond them (pydantic, the plan, the transports, rich) it loads when it runs, so `launch
status`, `launch --help` and a usage error answer without paying for it.
"""

from __future__ import annotations

import argparse
import errno
import sys
from collections.abc import Callable, Sequence

from launcher.cli import launch_command, run_dir_commands, spec_commands
from launcher.cli.arguments import SUBCOMMANDS, parse_subcommand, run_parser
from launcher.cli.streams import drop, open_closed_standard_streams, say, without_pydantic_plugins
from launcher.common import exit_codes
from launcher.common.errors import LaunchError, UsageError
from launcher.common.masking import redact

Command = Callable[[argparse.Namespace, list[str]], int]

# What each subcommand runs; `launch` without one is a run (launch_command.run).
COMMANDS: dict[str, Command] = {
    "status": run_dir_commands.status,
    "logs": run_dir_commands.logs,
    "stop": run_dir_commands.stop,
    "stacks": run_dir_commands.stacks,
    "bundle": run_dir_commands.bundle,
    "schema": spec_commands.schema,
    "export": spec_commands.export,
    "slurm": spec_commands.slurm,
}
assert set(COMMANDS) == set(SUBCOMMANDS), "every subcommand the help lists has a command"


def split_command(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """The launcher's own words, and the command every task runs (the words after `--`)."""
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


def main(argv: Sequence[str] | None = None) -> int:
    try:
        own, command = split_command(sys.argv[1:] if argv is None else argv)
        if own[:1] and own[0] in COMMANDS:
            args = parse_subcommand(own)
            return COMMANDS[args.subcommand](args, command)
        return launch_command.run(run_parser().parse_args(own), command)
    except LaunchError as error:  # its words may quote the spec (a path holding a secret's value)
        say(f"launch: {redact(str(error))}", to_stderr=True)
        return error.exit_code
    except KeyboardInterrupt:
        return exit_codes.INTERRUPTED


def entry() -> None:
    open_closed_standard_streams()
    without_pydantic_plugins()
    code: int | None = None
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:  # `launch logs ... | head`: the reader left; not an error of ours
        drop(sys.stdout)
    except OSError as error:
        if error.errno not in (errno.ENOSPC, errno.EIO, errno.EDQUOT):
            raise
        say(f"launch: cannot write its output: {error.strerror}", to_stderr=True)
        code = exit_codes.FAILED if code is None else code
    # a run's own outcome stands when only the last flush found the reader gone
    raise SystemExit(0 if code is None else code)
