"""What `launch` and its subcommands exit with: one table, shown by `launch --help` and the docs."""

from __future__ import annotations

SUCCEEDED = 0
FAILED = 1
USAGE = 2  # a usage, spec, host or preflight error: nothing was started
RUNNING = 3  # `launch status`, or `launch stop` that timed out: the run is still going
PREEMPTED = 4  # the run ended preempted and nobody requeued it
STOPPED = 5  # `launch status`: the launcher died without a summary (killed)
INTERRUPTED = 130  # Ctrl-C, `launch stop`, or SIGTERM/SIGHUP to the launcher (128 + the signal)

TABLE: tuple[tuple[int, str], ...] = (
    (
        SUCCEEDED,
        "the run succeeded (or, under Slurm, was preempted and requeued; or had trained all its steps already, "
        "and nothing was started); a subcommand did its work",
    ),
    (
        FAILED,
        "the run failed: a task failed and the restart budget ran out, the same failure came twice, or a task "
        "exited with a fatal code",
    ),
    (
        USAGE,
        "usage, spec, host or preflight error: nothing was started (launch stop: no run to stop; "
        "--dry-run: the run directory or checkpoints would refuse the launch)",
    ),
    (RUNNING, "launch status: the run is still running (launch stop: still running when its wait ran out)"),
    (PREEMPTED, "the run was preempted and not requeued: launch it again to resume"),
    (STOPPED, "launch status: the run's launcher was killed and wrote no summary"),
    (INTERRUPTED, "interrupted by Ctrl-C or launch stop (SIGTERM: 143, SIGHUP: 129); every task was stopped"),
)


def table_text() -> str:
    return "exit codes:\n" + "\n".join(f"  {code:>3}  {meaning}" for code, meaning in TABLE)
