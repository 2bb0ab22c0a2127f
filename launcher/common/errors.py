"""Every error the launcher raises on purpose.

One base class, `LaunchError`; the CLI catches it, prints its message and exits with its
`exit_code`. Subclasses carry the fields a user needs to fix the problem. Nothing here ever
starts or stops a process.
"""

from __future__ import annotations

from dataclasses import dataclass

USAGE_EXIT_CODE = 2
FAILURE_EXIT_CODE = 1


class LaunchError(Exception):
    """Base for every error the launcher reports to a user (never shown as a traceback)."""

    exit_code: int = FAILURE_EXIT_CODE


@dataclass(frozen=True)
class SpecProblem:
    """One problem in a cluster spec: where (JSON path), what, and how to fix it."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class SpecError(LaunchError):
    """The cluster spec is unusable. Lists every problem at once, each with its JSON path."""

    exit_code = USAGE_EXIT_CODE

    def __init__(self, source: str, problems: list[SpecProblem]) -> None:
        self.source = source
        self.problems = problems
        count = len(problems)
        lines = [f"{source}: {count} problem{'s' if count != 1 else ''} in the cluster spec:"]
        lines += [f"  - {problem}" for problem in problems]
        lines.append("Nothing was started.")
        super().__init__("\n".join(lines))


class UsageError(LaunchError):
    """The command line is unusable (conflicting flags, missing file, bad --inject)."""

    exit_code = USAGE_EXIT_CODE


class PortInUseError(LaunchError):
    """A task's TF port is already taken on its host, found before anything was started."""

    exit_code = USAGE_EXIT_CODE

    def __init__(self, task: str, host: str, port: int) -> None:
        self.task, self.host, self.port = task, host, port
        if port == 0:
            said = (
                f"No free port was left on {host} for {task}: the machine handed out the same ones again and again "
                "(too many tasks for its ephemeral port range, or ports held by other programs). Run fewer tasks "
                "there, or give them explicit ports. Nothing was started."
            )
        else:
            said = (
                f"Port {port} on {host} (for {task}) is already in use. Free it, pick another port "
                f"in the spec, or set the port to 0 to let the launcher choose a free one. "
                f"Nothing was started."
            )
        super().__init__(said)


class AlreadyTrained(LaunchError):
    """A launch of a run whose last launch trained all its steps: nothing to start, and no failure."""

    exit_code = 0


class InterruptedLaunchError(LaunchError):
    """The launcher received SIGINT/SIGTERM/SIGHUP; raised on the main thread."""

    exit_code = 130

    def __init__(self, signum: int, by: str | None = None) -> None:
        """`by`: who sent the signal, when known (`launch stop` says so); else the signal is named."""
        import signal

        self.signum = signum
        self.exit_code = 128 + signum
        name = signal.Signals(signum).name
        super().__init__(f"stopped by {f'{by}, with {name}' if by else name}; every task was stopped.")


class HostError(LaunchError):
    """A host cannot be used: unreachable, authentication refused, unknown host key, missing python.

    Found before anything starts, so it is the user's to fix (exit 2)."""

    exit_code = USAGE_EXIT_CODE

    def __init__(self, host: str, cause: str) -> None:
        self.host, self.cause = host, cause
        super().__init__(f"{host}: {cause}")


class PreflightError(LaunchError):
    """One or more hosts failed the checks run before starting; lists every problem."""

    exit_code = USAGE_EXIT_CODE

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        lines = [f"preflight found {len(problems)} problem(s); nothing was started:"] + [f"  - {p}" for p in problems]
        super().__init__("\n".join(lines))


class RunDirError(LaunchError):
    """The run directory (or the checkpoint directory beside it) cannot be written, found before
    anything started: a full disk, missing permissions. The user's to fix (exit 2)."""

    exit_code = USAGE_EXIT_CODE

    def __init__(self, path: str, cause: str) -> None:
        self.path, self.cause = path, cause
        if "space" in cause or "quota" in cause.lower():
            fix = "Free space there, or give"
        elif "ermission" in cause or "ead-only" in cause:
            fix = "Fix its permissions, or give"
        else:  # a parent missing that cannot be made (/proc/x), a file in the way
            fix = "Give"
        super().__init__(
            f"Cannot write {path}: {cause}. {fix} another place: the spec's run_root, or --run-root. "
            "Nothing was started."
        )
