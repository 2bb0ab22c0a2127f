"""Your own training script: a small Keras 3 model under MultiWorkerMirroredStrategy.

    launch --local 2 -- python examples/train.py                 # two workers on this machine
    launch --cluster cluster.json -- python examples/train.py --steps 1000
    python examples/train.py                                       # one worker, no launcher

`launch` gives every task TF_CONFIG (which the strategy reads by itself) and a few TFLAUNCH_*
variables; this script uses four of them and runs without them too:
  TFLAUNCH_CHECKPOINT_DIR        the checkpoint directory every worker shares
  TFLAUNCH_PREEMPTION_EXIT_CODE  how to exit after saving on SIGTERM, so the gang restarts uncounted
  TFLAUNCH_RESULT_FILE           where this task writes its final step and a fingerprint of its weights
  TFLAUNCH_TASK                  this task's name, e.g. worker:1 (for the log lines)
Keras 3 `model.fit` does not work under MultiWorkerMirroredStrategy, hence the custom loop.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile

import keras
import tensorflow as tf

from tflaunch import leave_after_peers, report, wait_for_leader  # all do nothing without a launcher

FEATURES = 8

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--batch-per-replica", type=int, default=32)
parser.add_argument("--checkpoint-every", type=int, default=50)
args = parser.parse_args()

# Build the strategy before any other TensorFlow op: it reads TF_CONFIG and joins the other workers.
wait_for_leader()  # asked before its port is up, TensorFlow would back off about a second
strategy = tf.distribute.MultiWorkerMirroredStrategy()
task = os.environ.get("TFLAUNCH_TASK", "worker:0")
checkpoint_dir = os.environ.get("TFLAUNCH_CHECKPOINT_DIR", os.path.join("runs", "train", "checkpoints"))
preempted_exit_code = int(os.environ.get("TFLAUNCH_PREEMPTION_EXIT_CODE", "42"))
global_batch = args.batch_per_replica * strategy.num_replicas_in_sync
is_chief = strategy.extended.should_checkpoint  # the chief (or worker:0) writes the shared checkpoints

with strategy.scope():
    model = keras.Sequential(
        [keras.Input(shape=(FEATURES,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)]
    )
    optimizer = keras.optimizers.Adam(0.01)
    optimizer.build(model.trainable_variables)  # its slots exist before a restore fills them
loss_fn = keras.losses.MeanSquaredError(reduction=None)

# Every worker saves (saving reads distributed values, which takes all of them), but only the
# chief writes the shared directory; the others write a private one that is thrown away.
checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
write_dir = checkpoint_dir if is_chief else tempfile.mkdtemp(prefix="train-checkpoint-")
manager = tf.train.CheckpointManager(checkpoint, write_dir, max_to_keep=3)
latest = tf.train.latest_checkpoint(checkpoint_dir)
if latest:
    checkpoint.restore(latest)
start = int(optimizer.iterations.numpy())  # the step counter is saved with the optimizer


def save(step: int) -> None:
    manager.save(checkpoint_number=step)
    if not is_chief:
        shutil.rmtree(write_dir, ignore_errors=True)


def make_dataset(context: tf.distribute.InputContext) -> tf.data.Dataset:
    """This worker's batches from step `start` on. Each batch is a function of (step, worker),
    so a resumed run sees the data an uninterrupted one would, and no two workers see the same."""
    batch = context.get_per_replica_batch_size(global_batch)
    true_weights = tf.linspace(-1.0, 1.0, FEATURES)[:, tf.newaxis]

    def make_batch(step: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        seed = tf.stack([tf.cast(step, tf.int32), context.input_pipeline_id])
        x = tf.random.stateless_normal([batch, FEATURES], seed=seed)
        return x, tf.matmul(x, true_weights) + 0.5

    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF  # sharded above
    return tf.data.Dataset.range(start, args.steps).map(make_batch).with_options(options)


iterator = iter(strategy.distribute_datasets_from_function(make_dataset))


@tf.function
def train_step(iterator: tf.distribute.DistributedIterator) -> tf.Tensor:
    def step_fn(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            # Average over the global batch: the all-reduce sums the replicas' gradients.
            loss = tf.nn.compute_average_loss(loss_fn(y, model(x, training=True)), global_batch_size=global_batch)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
        return loss

    per_replica = strategy.run(step_fn, args=next(iterator))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)


# SIGTERM to any worker (a preemption notice) makes every worker save at the same step and exit
# with the launcher's preemption code; the launcher restarts the gang, which resumes at that step.
preemption = tf.distribute.experimental.PreemptionCheckpointHandler(
    strategy.cluster_resolver,
    manager,
    termination_config=tf.distribute.experimental.TerminationConfig(exit_fn=lambda: sys.exit(preempted_exit_code)),
)

step, loss = start, float("nan")
try:
    while step < args.steps:
        loss = float(train_step(iterator))
        step += 1
        report("step", step=step, loss=loss, total=args.steps)
        if step % 20 == 0 or step == args.steps:
            print(f"{task}: step {step}/{args.steps} loss {loss:.4f}", flush=True)
        if step < args.steps:
            preemption.save_checkpoint_if_preempted(checkpoint_number=step)
        if step % args.checkpoint_every == 0 or step == args.steps:
            save(step)
finally:
    if not is_chief:
        shutil.rmtree(write_dir, ignore_errors=True)

# Equal on every worker exactly when the replicas ended with the same weights.
digest = hashlib.sha256()
for weight in model.weights:
    digest.update(weight.numpy().tobytes())
result = {"step": step, "loss": loss, "fingerprint": digest.hexdigest()[:16]}
if "TFLAUNCH_RESULT_FILE" in os.environ:  # the launcher checks that every replica's fingerprint agrees
    with open(os.environ["TFLAUNCH_RESULT_FILE"], "w", encoding="utf-8") as handle:
        json.dump(result, handle)
report("done", step=step)
print(f"{task}: done at step {step}, weights {result['fingerprint']}", flush=True)
# The task that hosts the coordination service (worker:0 here) leaves last: a peer still tearing TensorFlow
# down would otherwise send a heartbeat to a service that has gone, and print an UNAVAILABLE error.
leave_after_peers()
