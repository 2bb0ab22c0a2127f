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
from dataclasses import dataclass
from typing import Any, Callable

from worker.cluster import ClusterInfo, read_cluster_info
from worker.errors import write_error_file
from worker.events import report
from worker.settings import WorkerSettings, read_settings
from worker.targets import WorkerUsageError, load_target

log = logging.getLogger("worker")
USAGE_EXIT_CODE = 2


@dataclass(frozen=True)
class WorkerContext:
    """What a user training function (`training.kind = "function"`) receives."""

    strategy: Any
    cluster: ClusterInfo
    settings: WorkerSettings
    steps: int
    checkpoint_every: int

    def report_step(self, step: int, **fields: Any) -> None:
        """Tell the launcher training advanced (feeds stall detection and the summary)."""
        report("step", step=step, **fields)


def build_strategy(training: dict[str, Any]) -> Any:
    import tensorflow as tf

    from worker.devices import communication_options, split_cpu

    if split_cpu(int(training.get("devices_per_worker", 1))):
        log.info("split the CPU into %s logical devices", training["devices_per_worker"])
    return tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=communication_options(str(training.get("collective", "auto"))))


def write_result(path: str, result: dict[str, Any]) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=2, default=str)
    os.replace(tmp, path)


def run(settings: WorkerSettings) -> dict[str, Any]:
    report("starting")  # the runtime is up; "imported" and "joined" follow
    cluster = read_cluster_info()
    import tensorflow  # noqa: F401 - the slow part of start-up: reported, so a task stuck in it is told apart

    report("imported")
    training = settings.training
    kind = training.get("kind", "builtin")
    if cluster.task_type == "evaluator":  # a side-car: no strategy, no collectives
        from worker.evaluator import run_evaluator

        return {**run_evaluator(settings), "task": cluster.name, "attempt": settings.attempt, "pid": os.getpid()}
    function: Callable[[WorkerContext], Any] | None = None
    if kind == "function":
        try:
            function = load_target(training["target"])
        except WorkerUsageError as error:
            raise WorkerUsageError(f"cannot load training function: {error}") from None
    strategy = build_strategy(training)
    report("joined", replicas=strategy.num_replicas_in_sync)
    log.info("%s joined: %d task(s), %d replica(s) in sync, attempt %d",
             cluster.name, max(cluster.num_trainers, 1), strategy.num_replicas_in_sync, settings.attempt)
    if function is not None:
        context = WorkerContext(strategy, cluster, settings, int(training.get("steps", 0)), int(training.get("checkpoint_every", 0)))
        outcome = function(context)
        result = dict(outcome) if isinstance(outcome, dict) else {}
    elif kind == "fit":
        from worker.fit import train_fit

        result = train_fit(strategy, cluster, settings)
    else:
        from worker.loop import train_builtin

        result = train_builtin(strategy, cluster, settings)
    result.update(task=cluster.name, attempt=settings.attempt, pid=os.getpid())
    return result


def main() -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stdout)
    log.setLevel(logging.INFO)
    settings = read_settings()
    try:
        result = run(settings)
        write_result(settings.result_file, result)
        report("done", step=result.get("step"))
        return 0
    except WorkerUsageError as error:
        write_error_file(settings.error_file, settings.task, error)
        log.error("%s", error)
        return USAGE_EXIT_CODE
    except SystemExit as stop:
        if stop.code == settings.preemption_exit_code:
            log.warning("%s: preempted; checkpoint saved, leaving with exit code %s", settings.task, stop.code)
            report("preempted")
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
