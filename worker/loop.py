"""The built-in training loop: Keras 3 layers and optimizer under MultiWorkerMirroredStrategy.

Keras 3 `fit` is broken under MWMS, so this is a custom loop: `strategy.run` per step,
`compute_average_loss` over the global batch, data from `distribute_datasets_from_function`.
The global step is `optimizer.iterations`, so a restored run continues where it stopped.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from worker import example
from worker.checkpoints import CheckpointStore
from worker.cluster import ClusterInfo
from worker.events import report
from worker.faults import FaultInjector
from worker.fingerprint import weights_fingerprint
from worker.settings import WorkerSettings

log = logging.getLogger(__name__)
_REPORT_INTERVAL_S = 0.5


@dataclass(frozen=True)
class BuiltinConfig:
    steps: int = 200
    batch_per_replica: int = 32
    learning_rate: float = 0.01
    optimizer: str = "adam"
    checkpoint_every: int = 50
    seed: int = 0
    features: int = 16
    hidden_units: int = 64
    log_every: int = 10

    @classmethod
    def from_training(cls, training: dict[str, Any]) -> BuiltinConfig:
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in training.items() if k in known})


def _optimizer(config: BuiltinConfig) -> Any:
    import keras

    if config.optimizer == "sgd":
        return keras.optimizers.SGD(config.learning_rate)
    return keras.optimizers.Adam(config.learning_rate)


class MetricsWriter:
    """JSON lines (step, loss, steps/s) appended by the chief only."""

    def __init__(self, path: str, enabled: bool) -> None:
        self._handle = None
        if enabled:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            self._handle = open(path, "a", encoding="utf-8")

    def write(self, **record: Any) -> None:
        if self._handle is not None:
            self._handle.write(json.dumps(record) + "\n")
            self._handle.flush()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()


def train_builtin(strategy: tf.distribute.Strategy, cluster: ClusterInfo, settings: WorkerSettings) -> dict[str, Any]:
    """Train the example model to `steps`; returns what goes into the result file."""
    config = BuiltinConfig.from_training(settings.training)
    replicas = strategy.num_replicas_in_sync
    global_batch = config.batch_per_replica * replicas
    log.info("%s: %d replicas in sync, global batch %d (%d per replica)",
             cluster.name, replicas, global_batch, config.batch_per_replica)

    with strategy.scope():
        model = example.build_model(config.features, config.hidden_units, config.seed)
        optimizer = _optimizer(config)
        optimizer.build(model.trainable_variables)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    store = CheckpointStore(checkpoint, settings.checkpoint_dir, cluster.is_chief, cluster.name)
    restored = store.restore()
    start_step = int(optimizer.iterations.numpy())
    if restored:
        log.info("%s: restored %s, continuing from step %d", cluster.name, restored, start_step)
    else:
        log.info("%s: no checkpoint in %s, starting at step 0", cluster.name, settings.checkpoint_dir)

    data = strategy.distribute_datasets_from_function(example.dataset_fn(
        start_step, config.steps, config.batch_per_replica, config.features, config.seed, replicas))
    iterator = iter(data)

    @tf.function
    def train_step(iterator: Any) -> tf.Tensor:
        def step_fn(inputs: tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
            x, y = inputs
            with tf.GradientTape() as tape:
                prediction = model(x, training=True)
                per_example = tf.reduce_mean(tf.square(prediction - y), axis=-1)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
            gradients = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(gradients, model.trainable_variables))
            return loss

        per_replica = strategy.run(step_fn, args=(next(iterator),))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    # SIGTERM to any worker (a preemption notice) makes every worker save at the same next
    # step through this handler and leave with the preemption exit code; the launcher then
    # restarts the gang, which resumes from that very step.
    preemption = tf.distribute.experimental.PreemptionCheckpointHandler(
        strategy.cluster_resolver, store.manager,
        termination_config=tf.distribute.experimental.TerminationConfig(
            exit_fn=lambda: sys.exit(settings.preemption_exit_code)))
    metrics = MetricsWriter(settings.metrics_file, cluster.is_chief)
    faults = FaultInjector()
    step, loss, first_loss = start_step, None, None
    window_start, window_step, last_report = time.monotonic(), start_step, 0.0
    try:
        while step < config.steps:
            loss_tensor = train_step(iterator)
            step += 1
            faults.at_step(step)
            if step % config.log_every == 0 or step == config.steps or first_loss is None:
                loss = float(loss_tensor.numpy())
                first_loss = loss if first_loss is None else first_loss
                now = time.monotonic()
                rate = (step - window_step) / max(now - window_start, 1e-9)
                window_start, window_step = now, step
                log.info("%s: step %d/%d loss %.5f (%.1f steps/s)", cluster.name, step, config.steps, loss, rate)
                metrics.write(step=step, loss=loss, steps_per_s=rate, time=time.time(), attempt=settings.attempt)
            if time.monotonic() - last_report >= _REPORT_INTERVAL_S or step == config.steps:
                report("step", step=step)
                last_report = time.monotonic()
            if step < config.steps:
                preemption.save_checkpoint_if_preempted(checkpoint_number=step)
            if step % config.checkpoint_every == 0 and step < config.steps:
                store.save(step)
        if restored is None or start_step < config.steps:
            store.save(step)
        if cluster.is_chief:
            os.makedirs(settings.export_dir, exist_ok=True)
            model.save(os.path.join(settings.export_dir, "model.keras"))
    finally:
        metrics.close()
        store.close()
    return {
        "step": step,
        "start_step": start_step,
        "restored_from": restored,
        "loss": loss,
        "first_loss": first_loss,
        "fingerprint": weights_fingerprint(model.weights),
        "replicas_in_sync": replicas,
        "global_batch": global_batch,
        "temp_checkpoint_dir": store.temp_dir,
    }
