"""Each step all-reduces across the gang; worker:1 hangs in its data loader before step 5 (data.py),
so the others block in the all-reduce: a hang whose stacks name worker:1 and read_shard."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tensorflow as tf  # noqa: E402
from data import read_shard  # noqa: E402

from tflaunch import report, wait_for_leader  # noqa: E402

wait_for_leader()
strategy = tf.distribute.MultiWorkerMirroredStrategy()


@tf.function
def all_reduce(x: tf.Tensor) -> tf.Tensor:
    def replica(x: tf.Tensor) -> tf.Tensor:
        return tf.distribute.get_replica_context().all_reduce("sum", tf.ones([4]) * x)

    return strategy.run(replica, args=(x,))


for step in range(1, 1000):
    all_reduce(tf.constant(read_shard(step)))
    report("step", step=step)
    print(f"step {step}", flush=True)
