"""The worker entry point: read the cluster, build the strategy, train, report the outcome.

Order matters: TF_CONFIG must be read and MultiWorkerMirroredStrategy built before any other
TF op exists. An uncaught exception is written to the JSON error file before the process exits
non-zero, so the launcher can name the root cause without scraping logs.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tflaunch.leader import wait_for_leader
from tflaunch.leaving import leave_after_peers
from tflaunch.stacks import allow_stack_dumps
from worker import early_sigterm
from worker.cluster import ClusterInfo, read_cluster_info
from worker.contract import DONE, IMPORTED, JOINED, PREEMPTED, STARTING, STEP, USAGE_EXIT_CODE, TaskEnv
from worker.errors import write_error_file
from worker.events import report
from worker.files import write_atomic
from worker.targets import WorkerUsageError, load_target
from worker.training_spec import (
    BuiltinTraining,
    FitTraining,
    FunctionTraining,
    TrainingSettingsError,
    build_validators,
    parse_training,
)

log = logging.getLogger("worker")
build_validators()  # the union's: a warm spare imports this module ahead of its task, whatever its kind


@dataclass(frozen=True)
class WorkerContext:
    """What a user training function (`training.kind = "function"`) receives."""

    strategy: Any
    cluster: ClusterInfo
    settings: TaskEnv
    steps: int
    checkpoint_every: int

    def report_step(self, step: int, **fields: Any) -> None:
        """Tell the launcher training advanced (feeds stall detection and the summary)."""
        report(STEP, step=step, **fields)


def build_strategy(devices_per_worker: int = 1, collective: str = "auto") -> Any:
    import tensorflow as tf

    from worker.devices import communication_options, split_cpu  # TensorFlow's, as this function is

    if split_cpu(devices_per_worker):
        log.info("split the CPU into %s logical devices", devices_per_worker)
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=communication_options(collective))


def write_result(path: str, result: dict[str, Any]) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    write_atomic(path, json.dumps(result, indent=2, default=str))


def run(settings: TaskEnv) -> dict[str, Any]:
    report(STARTING)  # the runtime is up; "imported" and "joined" follow
    cluster = read_cluster_info()
    try:
        training = parse_training(settings.training)
    except TrainingSettingsError as error:
        raise WorkerUsageError(str(error)) from None
    import tensorflow  # noqa: F401 - the slow part of start-up: reported, so a task stuck in it is told apart

    report(IMPORTED)
    if cluster.task_type == "evaluator":  # a side-car: no strategy, no collectives
        from worker.evaluator import run_evaluator  # each kind of training loads its own Keras: only the one run

        return {**run_evaluator(settings), "task": cluster.name, "attempt": settings.attempt, "pid": os.getpid()}
    function: Callable[[WorkerContext], Any] | None = None
    if isinstance(training, FunctionTraining):
        try:
            function = load_target(training.target)
        except WorkerUsageError as error:
            raise WorkerUsageError(f"training.target: {error}") from error.__cause__
    elif not isinstance(training, (BuiltinTraining, FitTraining)):
        raise WorkerUsageError(f"training kind {training.kind!r} does not run in the worker runtime")
    waited = wait_for_leader(cluster.cluster, cluster.task_type, cluster.task_index)
    if waited is not None and not waited.listening:
        log.warning(
            "%s: the coordination leader did not listen within %.0fs; building the strategy all the same",
            cluster.name,
            waited.seconds,
        )
    elif waited is not None and waited.seconds >= 1.0:
        log.info("%s: waited %.1fs for the coordination leader to listen", cluster.name, waited.seconds)
    if isinstance(training, BuiltinTraining):
        strategy = build_strategy(training.devices_per_worker, training.collective)
        early_sigterm.hold()  # until the loop's preemption handler listens (worker/loop.py)
    else:
        strategy = build_strategy()
    report(JOINED, replicas=strategy.num_replicas_in_sync)
    log.info(
        "%s joined: %d task(s), %d replica(s) in sync, attempt %d",
        cluster.name,
        max(cluster.num_trainers, 1),
        strategy.num_replicas_in_sync,
        settings.attempt,
    )
    if isinstance(training, FunctionTraining):
        assert function is not None
        context = WorkerContext(strategy, cluster, settings, training.steps, training.checkpoint_every)
        outcome = function(context)
        result = dict(outcome) if isinstance(outcome, dict) else {}
    elif isinstance(training, FitTraining):
        from worker.fit import train_fit  # tf-keras: only a fit training pays for it

        result = train_fit(strategy, cluster, settings)
    else:
        from worker.loop import train_builtin  # Keras 3: only the built-in training pays for it

        result = train_builtin(strategy, cluster, settings)
    result.update(task=cluster.name, attempt=settings.attempt, pid=os.getpid())
    return result


def main() -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stdout)
    log.setLevel(logging.INFO)
    settings = TaskEnv.from_env()
    allow_stack_dumps()  # the agent may take this task's stacks: what names a hang
    try:
        result = run(settings)
        write_result(settings.result_file, result)
        report(DONE, step=result.get("step"))
        leave_after_peers()  # the coordination leader last: no task heartbeats to a service that has gone
        return 0
    except WorkerUsageError as error:
        write_error_file(settings.error_file, settings.task, error, usage=True)
        log.error("%s", error)
        return USAGE_EXIT_CODE
    except SystemExit as stop:
        if stop.code == settings.preemption_exit_code:
            log.warning("%s: preempted; checkpoint saved, leaving with exit code %s", settings.task, stop.code)
            report(PREEMPTED)
            # The checkpoint is written and the loop's cleanup has run; skip the interpreter's
            # TensorFlow teardown (about a second) so the restarted gang comes back sooner.
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(settings.preemption_exit_code)
        if stop.code not in (0, None):
            write_error_file(settings.error_file, settings.task, stop)
        raise
    except BaseException as error:
        write_error_file(settings.error_file, settings.task, error)
        raise
