"""The spec's `restart` section: how the supervisor reacts when a task ends badly or the gang stalls."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator, model_validator

from launcher.spec.hosts import CrossFieldProblems
from worker.contract import PREEMPTION_EXIT_CODE
from worker.training_spec import StrictModel


class RestartSpec(StrictModel):
    """How the supervisor reacts when a task ends badly or the gang stalls."""

    max_restarts: int = Field(
        3,
        ge=0,
        le=1000,
        description="Restarts of the whole gang before giving up (0: never restart). A failure bound to repeat "
        "(the same root cause twice: the same exception, or the same exit code before the first step) ends the run "
        "sooner; signals, lost hosts and hangs are retried up to this many times, and preemptions do not count.",
    )
    backoff_s: float = Field(
        1.0,
        ge=0,
        le=3600,
        description="Seconds to wait before restarting after an attempt that made no training step (a crash loop); "
        "doubles with each such attempt in a row. A restart after training progressed waits nothing.",
    )
    max_backoff_s: float = Field(30.0, ge=0, le=3600, description="Upper bound of the restart wait.")
    preemption_exit_code: int = Field(
        PREEMPTION_EXIT_CODE,
        ge=1,
        le=255,
        description="Exit code of a worker that checkpointed and left because it was preempted; restarted without "
        "counting as a failure.",
    )
    fatal_exit_codes: list[Annotated[int, Field(ge=1, le=255)]] = Field(
        default_factory=lambda: [2], description="Exit codes that mean 'do not retry' (e.g. usage errors)."
    )
    grace_period_s: float = Field(
        10.0,
        ge=0,
        le=3600,
        description="Seconds between SIGTERM and SIGKILL when stopping tasks that can still save (preemption, Ctrl-C).",
    )
    crash_grace_s: float | None = Field(
        None,
        ge=0,
        le=3600,
        description="Seconds between SIGTERM and SIGKILL when stopping the rest of a gang after a crash, hang or "
        "missed start: their collectives are broken, so there is nothing left to save. Unset: 0 (SIGKILL at once) "
        "for the built-in runtime's `builtin` and `fit` kinds, whose tasks have nothing to do on SIGTERM, and 0.1 "
        "for a `function` or `command`, whose own code may handle it.",
    )
    start_timeout_s: float = Field(
        300.0,
        gt=0,
        le=86400,
        description="Every task must join (build its strategy) within this many seconds of being started.",
    )
    stopped_timeout_s: float | None = Field(
        5.0,
        gt=0,
        le=86400,
        description="A task whose process stays in the stopped state (SIGSTOP, Ctrl-Z) this long is hung: the gang "
        "restarts at once instead of waiting for start_timeout_s or stall_timeout_s (None: off).",
    )
    stall_timeout_s: float | None = Field(
        None,
        gt=0,
        le=86400,
        description="Restart the gang when no task makes progress for this many seconds; every task's stack is "
        "taken first and the task behind named. For the built-in runtime and a function, until its first step a task "
        "gets start_timeout_s if that is longer (restoring and tracing are start-up); a command's output is its "
        "progress. Unset: once every task reported a step (the built-in runtime, a function, a script calling "
        "report), max(600 s, 50 times the slowest task's mean step time); before that, for the builtin and fit kinds, "
        "600 s from joining and from the restore; a function or script that reports no step is not judged. Set 86400 "
        "to wait a day.",
    )
    liveness_timeout_s: float = Field(
        15.0,
        ge=1,
        le=300,
        description="Silence from a host's agent for this long (no output, no heartbeat) means the host is lost: the "
        "launcher stops waiting for it, and the agent kills the host's tasks by itself. Catches partitions and frozen "
        "hosts that never close the connection. Applies over SSH and Slurm alike (hosts[].ssh.liveness_timeout_s "
        "overrides it for one host).",
    )
    warm_spares: bool = Field(
        True,
        description="While an attempt runs, keep one standby interpreter per task with TensorFlow already imported, so "
        "a restart skips Python and TensorFlow start-up (costs the memory of an imported TensorFlow per task: about "
        "0.5 GiB on CPU, much of it shared where the built-in runtime forks its spare; no GPU memory). false: every "
        "restart starts cold.",
    )
    warm_spares_after_s: float = Field(
        5.0,
        ge=0,
        le=86400,
        description="Make the spares this many seconds after every task's first step of an attempt: a job that ends "
        "sooner gains nothing from them, and their import would compete with its training. A failure before then "
        "restarts cold, except in the built-in runtime, whose tasks fork their spares at their start and use them "
        "at any restart.",
    )

    exclude_host_after: int = Field(
        2,
        ge=1,
        le=100,
        description="A host that is the root cause of this many failed attempts in a row (a bad GPU, a full disk) is "
        "excluded, when a spare can stand in for it or `elastic` lets the gang go on without it. A host that cannot be "
        "reached or started again is excluded at once.",
    )
    host_cooldown_s: float = Field(
        60.0,
        ge=0,
        le=86400,
        description="How long an excluded host stays out before it may rejoin (at a checkpoint, after it passes the "
        "preflight again); doubles each time the same host is excluded again.",
    )

    @field_validator("preemption_exit_code")
    @classmethod
    def _not_a_code_of_failure(cls, value: int) -> int:
        taken = {
            1: "any uncaught Python exception",
            2: "a usage error",
            126: "a command that cannot run",
            127: "a command not found",
        }
        if value in taken:
            raise ValueError(
                f"{value} is the exit code of {taken[value]}: every such failure would pass for a preemption and be "
                f"restarted without end; use a code of its own (the default is {PREEMPTION_EXIT_CODE})"
            )
        return value

    @model_validator(mode="after")
    def _check(self) -> RestartSpec:
        if self.preemption_exit_code in self.fatal_exit_codes:
            raise CrossFieldProblems(
                [
                    (
                        "fatal_exit_codes",
                        f"contains the preemption exit code {self.preemption_exit_code}; a code is either fatal or "
                        f"preemption",
                    )
                ]
            )
        return self
