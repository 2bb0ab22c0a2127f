"""Leave the cluster at the end of a successful run without TensorFlow's shutdown noise.

TensorFlow's PreemptionCheckpointHandler keeps a thread (PeerTerminationWatcher) blocked on the
coordination service, which the chief hosts, until the handler is garbage-collected. When the chief
exits first, that thread dies on every other worker with an `UnavailableError: Socket closed`
traceback, in a run that succeeded. So every worker stops its watcher while the service is up, and
then all meet in one last collective, after which no task needs the service any more.
Only called after the last checkpoint and export; never on a failure path.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["leave_together"]


def leave_together(strategy: Any, preemption: Any) -> None:
    import tensorflow as tf

    stop = getattr(preemption, "_stop_cluster_wise_termination_watcher_thread", None)
    if stop is not None:  # TensorFlow's own clean-up, run now instead of at garbage collection
        stop()

    # One scalar all-reduce (in a tf.function: run eagerly, the strategy warns about overhead); it
    # completes only once every worker has stopped its watcher.
    @tf.function
    def meet() -> Any:
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.constant(1.0)), axis=None)

    meet()
