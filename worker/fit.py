"""tf-keras `model.fit` under MultiWorkerMirroredStrategy, resumable after a gang restart.

Keras 3 `fit` is broken under MWMS; tf-keras 2.21 (`TF_USE_LEGACY_KERAS=1`, set by the launcher
for `training.kind = "fit"`) works. `BackupAndRestore(save_freq=checkpoint_every)` keeps its
backup in the shared checkpoint directory, so a restarted gang resumes at the saved batch.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from typing import Any

import tensorflow as tf

from tflaunch.faults import injected
from worker import example
from worker.cluster import ClusterInfo
from worker.contract import RESTORED, STEP, TaskEnv
from worker.events import report
from worker.fingerprint import weights_fingerprint
from worker.targets import WorkerUsageError, load_target
from worker.training_spec import FitTraining, build_validators

log = logging.getLogger(__name__)
build_validators(FitTraining)  # imported by a warm spare ahead of its task


def _keras() -> Any:
    if os.environ.get("TF_USE_LEGACY_KERAS") != "1":
        raise WorkerUsageError(
            "fit mode needs TF_USE_LEGACY_KERAS=1 before TensorFlow is imported (the launcher sets it)"
        )
    try:
        import tf_keras
    except ImportError:
        raise WorkerUsageError(
            "fit mode needs tf-keras: pip install 'tf-keras==2.21.*' (or this project's '.[fit]' extra) on every host"
        ) from None
    return tf_keras


def _example_model(keras: Any, training: FitTraining) -> Any:
    seed, width = training.seed, training.hidden_units
    init = lambda offset: keras.initializers.GlorotUniform(seed=seed + offset)  # noqa: E731
    model = keras.Sequential(
        [
            keras.Input(shape=(training.features,)),
            keras.layers.Dense(width, activation="relu", kernel_initializer=init(1)),
            keras.layers.Dense(width, activation="relu", kernel_initializer=init(2)),
            keras.layers.Dense(1, kernel_initializer=init(3)),
        ]
    )
    rate = training.learning_rate
    optimizer = keras.optimizers.SGD(rate) if training.optimizer == "sgd" else keras.optimizers.Adam(rate)
    model.compile(optimizer=optimizer, loss="mse")
    return model


def train_fit(strategy: tf.distribute.Strategy, cluster: ClusterInfo, settings: TaskEnv) -> dict[str, Any]:
    keras = _keras()
    training = FitTraining.model_validate(settings.training)
    steps, every, features, seed = training.steps, training.checkpoint_every, training.features, training.seed
    global_batch = training.batch_per_replica * strategy.num_replicas_in_sync
    with strategy.scope():
        model = (
            load_target(training.model)(training.model_dump()) if training.model else _example_model(keras, training)
        )

    data = tf.data.Dataset.range(steps * global_batch).batch(global_batch, drop_remainder=True)
    data = data.map(example.straight(lambda indices: example.examples(indices, features, seed))).repeat()
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    data = data.with_options(options).prefetch(tf.data.AUTOTUNE)

    faults = injected()
    progress: dict[str, int] = {}

    class Progress(keras.callbacks.Callback):  # type: ignore[name-defined]
        def on_train_begin(self, logs: Any = None) -> None:
            progress["start"] = int(model.optimizer.iterations.numpy())  # BackupAndRestore ran first
            report(RESTORED, step=progress["start"])
            log.info("%s: fit starts at step %d of %d", cluster.name, progress["start"], steps)

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            step = int(model.optimizer.iterations.numpy())
            faults.at_step(step)
            loss = (logs or {}).get("loss")
            report(STEP, step=step, total=steps, loss=float(loss) if loss is not None else None)

    backup = keras.callbacks.BackupAndRestore(
        os.path.join(settings.checkpoint_dir, "fit-backup"), save_freq=every, delete_checkpoint=False
    )
    history = model.fit(data, epochs=1, steps_per_epoch=steps, callbacks=[backup, Progress()], verbose=2)
    step = int(model.optimizer.iterations.numpy())
    losses = history.history.get("loss") or [None]
    # Saving reads distributed variables, which takes collectives: every worker saves, the
    # non-chief ones to a temporary directory that is removed right away.
    target = settings.export_dir if cluster.is_chief else tempfile.mkdtemp(prefix="tflaunch-fit-")
    tf.io.gfile.makedirs(target)
    model.save_weights(os.path.join(target, "fit.weights.h5"))
    if not cluster.is_chief:
        shutil.rmtree(target, ignore_errors=True)
    return {
        "step": step,
        "start_step": progress.get("start", 0),
        "loss": losses[-1],
        "fingerprint": weights_fingerprint(model.weights),
        "global_batch": global_batch,
        "replicas_in_sync": strategy.num_replicas_in_sync,
    }
