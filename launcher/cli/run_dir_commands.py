"""`launch status`, `logs`, `stop`, `stacks` and `bundle`: the subcommands that read a run directory.

Each loads only its own module of launcher/rundir/ (5-12 ms each), when it is the one asked for:
`launch` itself, which starts its hosts' agents as early as it can, pays for none of them.
"""

from __future__ import annotations

import argparse
import os
import sys

from launcher.cli.streams import say
from launcher.common import exit_codes
from launcher.common.errors import UsageError
from launcher.rundir.lock import is_run_dir
from worker.contract import DEFAULT_RUN_ROOT


def run_dir_named(value: str, run_root: str | None = None) -> str:
    """RUN_DIR as given, or, for a bare name, that run under `run_root` (`launch status example
    --run-root /data/runs`); without one, under the default run_root (`launch status example` for
    runs/example) when it is a run there and `value` is no run directory here."""
    if os.sep in value:
        return value
    if run_root is not None:
        return os.path.join(os.path.expanduser(run_root), value)
    default = os.path.join(DEFAULT_RUN_ROOT, value)
    if is_run_dir(value) or not is_run_dir(default):
        return value
    return default


def status(args: argparse.Namespace, command: list[str]) -> int:
    from launcher.rundir.status import describe_run  # see the module's docstring

    description = describe_run(run_dir_named(args.run_dir, args.run_root))
    say(description.text)
    return description.exit_code


def logs(args: argparse.Namespace, command: list[str]) -> int:
    from launcher.rundir.logs import show_logs  # see the module's docstring

    run_dir = run_dir_named(args.run_dir, args.run_root)
    return show_logs(run_dir, sys.stdout, follow=args.follow, tasks=args.task, attempt=args.attempt, notes=sys.stderr)


def stop(args: argparse.Namespace, command: list[str]) -> int:
    from launcher.rundir.stop import stop_run  # see the module's docstring

    return stop_run(run_dir_named(args.run_dir, args.run_root), timeout_s=args.timeout, say=say)


def stacks(args: argparse.Namespace, command: list[str]) -> int:
    from launcher.common.printable import escaped
    from launcher.rundir.stacks_now import take_now  # see the module's docstring

    run_dir = run_dir_named(args.run_dir, args.run_root)
    found = take_now(run_dir, args.task or None, args.timeout, lambda line: print(line, file=sys.stderr))
    unknown = [task for task in args.task if task not in found["running"]]
    if unknown:
        running = ", ".join(found["running"]) or "none now"
        raise UsageError(f"no running task named {', '.join(escaped(t) for t in unknown)} (running: {running})")
    if not found["tasks"]:
        say(f"{escaped(run_dir)}: no task of it is running now (starting, stopping or backing off); try again soon")
        return exit_codes.SUCCEEDED
    if found["behind"]:
        print(f"behind: {found['behind']}\n")
    print("\n".join(found["tasks"].values()), end="")
    return exit_codes.SUCCEEDED


def describe_size(size: int) -> str:
    kib = size / 1024
    return f"{kib:.1f} KiB" if kib < 1024 else f"{kib / 1024:.1f} MiB"


def bundle(args: argparse.Namespace, command: list[str]) -> int:
    from launcher.rundir.bundle import make_bundle  # see the module's docstring

    result = make_bundle(run_dir_named(args.run_dir, args.run_root), args.output)
    print(f"bundle: {result.path} ({describe_size(result.size)}, {result.members} files)")
    for entry in result.left_out:
        print(f"  not packed: {entry}")
    return exit_codes.SUCCEEDED
