"""Meets the gang in one all-reduce, then worker:1 lingers LINGER_S seconds (longer than TensorFlow's
heartbeat interval) before it leaves: were the coordination leader (worker:0) gone by then, worker:1's
next heartbeat would find nobody. With LEAVE_AFTER_PEERS=1 every task ends with tflaunch.leave_after_peers."""

from __future__ import annotations

import os
import time

import tensorflow as tf

from tflaunch import leave_after_peers, wait_for_leader

wait_for_leader()
strategy = tf.distribute.MultiWorkerMirroredStrategy()


@tf.function
def meet() -> tf.Tensor:
    return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.constant(1.0)), axis=None)


meet()
if os.environ["TFLAUNCH_TASK"] == "worker:1":
    time.sleep(float(os.environ["LINGER_S"]))
if os.environ.get("LEAVE_AFTER_PEERS") == "1":
    print(f"{os.environ['TFLAUNCH_TASK']} waited {leave_after_peers(limit_s=60):.1f}s for its peers", flush=True)
print("leaving", flush=True)
