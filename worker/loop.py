"""The built-in training loop: Keras 3 layers and optimizer under MultiWorkerMirroredStrategy.

Keras 3 `fit` is broken under MWMS, so this is a custom loop: `strategy.run` per step,
`compute_average_loss` over the global batch, data from `distribute_datasets_from_function`,
optional gradient accumulation (k micro-batches, one all-reduce), mixed precision, TensorBoard
summaries from the chief. The global step is `optimizer.iterations`, so a restored run continues
where it stopped.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import posixpath
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from tflaunch.faults import injected
from worker import early_sigterm, example
from worker.batch_shares import BatchShares, batch_shares
from worker.checkpoints import CheckpointStore
from worker.cluster import ClusterInfo
from worker.contract import RESTORED, STEP, TaskEnv
from worker.events import record as record_row
from worker.events import report
from worker.fingerprint import weights_fingerprint
from worker.leaving import leave_together
from worker.targets import load_target
from worker.training_spec import BuiltinTraining, TrainingSettingsError, build_validators

log = logging.getLogger(__name__)
build_validators(BuiltinTraining)  # imported by a warm spare ahead of its task
_REPORT_INTERVAL_S = 0.5

try:  # TensorFlow's own switch for its deprecation warnings (a private module; without it, warned)
    from tensorflow.python.util.deprecation import silence as _deprecations_silenced
except ImportError:  # pragma: no cover - a TensorFlow without it
    _deprecations_silenced = contextlib.nullcontext


def build_optimizer(config: BuiltinTraining) -> Any:
    import keras

    optimizer = (
        keras.optimizers.SGD(config.learning_rate)
        if config.optimizer == "sgd"
        else keras.optimizers.Adam(config.learning_rate)
    )
    if config.mixed_precision == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer


def build_model(config: BuiltinTraining) -> Any:
    """The user's model (`model` target) or the example MLP; built, with float32 outputs."""
    if config.mixed_precision:
        import keras

        keras.mixed_precision.set_global_policy(config.mixed_precision)
    if config.model:
        model = load_target(config.model)(config.model_dump())
        if not model.built:
            model.build((None, config.features))
        return model
    return example.build_model(config.features, config.hidden_units, config.seed)


def per_example_loss(name: str) -> Callable[[tf.Tensor, tf.Tensor], tf.Tensor]:
    import keras

    losses = {
        "mse": lambda: keras.losses.MeanSquaredError(reduction=None),
        "sparse_categorical_crossentropy": lambda: keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction=None
        ),
        "binary_crossentropy": lambda: keras.losses.BinaryCrossentropy(from_logits=True, reduction=None),
    }
    return losses[name]()


def make_dataset_fn(
    config: BuiltinTraining, start_step: int, shares: BatchShares
) -> Callable[[tf.distribute.InputContext], tf.data.Dataset]:
    """Each replica's share of every step's global batch (batch_per_replica x accumulation_steps examples, unless an
    elastic gang keeps the spec's global batch on fewer replicas), from start_step."""
    if config.dataset:
        if shares.kept and not shares.even:
            raise TrainingSettingsError(
                f"training.dataset: this gang has {shares.replicas} replicas, which cannot share the spec's global "
                f"batch of {shares.global_batch} evenly in {shares.micro} micro-batch(es) each, and a data set of "
                "your own gives every replica one size; pick elastic.min_hosts so that every size divides it"
            )
        user = load_target(config.dataset)
        seen = config.model_dump()
        seen["batch_per_replica"] = shares.global_batch // shares.replicas // shares.micro  # the same unless elastic
        return lambda context: user(context, start_step, seen)
    return example.dataset_fn(start_step, config.steps, shares, config.features, config.seed)


class MetricsWriter:
    """JSON lines (step, loss, steps/s) and TensorBoard scalars, written by the chief only."""

    def __init__(self, settings: TaskEnv, enabled: bool, tensorboard: bool) -> None:
        self._path = settings.metrics_file if enabled else None
        self._summary = None
        if enabled:
            if tensorboard and importlib.util.find_spec("tensorboard") is None:
                # a host set up without the project's dependencies: train on, say how to get summaries
                log.warning(
                    "TensorBoard is not installed for %s: no summaries this run (pip install 'tensorboard==2.21.*' "
                    "on this host, or set training.tensorboard to false to silence this)",
                    sys.executable,
                )
            elif tensorboard:
                self._summary = tf.summary.create_file_writer(settings.tensorboard_dir)

    def write(self, step: int, **record: Any) -> None:
        if self._path is not None:
            record_row("metrics", {"step": step, **record}, self._path)
        if self._summary is not None:
            with self._summary.as_default(step=step):
                for key in ("loss", "steps_per_s", "learning_rate", "replicas"):
                    if isinstance(record.get(key), (int, float)):
                        tf.summary.scalar(key, record[key])

    def close(self) -> None:
        if self._summary is not None:
            self._summary.close()


def _learning_rate(optimizer: Any) -> float:
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    return float(tf.convert_to_tensor(inner.learning_rate).numpy())


def make_train_step(
    strategy: tf.distribute.Strategy, model: Any, optimizer: Any, config: BuiltinTraining, shares: BatchShares
) -> Callable[[Any], tf.Tensor]:
    """One synchronous step: k micro-batch gradients summed locally, loss scaling, one all-reduce and update.

    The loss is averaged over the global batch, so shares of different sizes (an elastic gang on fewer replicas)
    sum to the full gang's gradient; such a share is cut into micro-batches by stride (every k-th example)."""
    micro, global_batch, even = config.accumulation_steps, shares.global_batch, shares.even
    loss_fn = per_example_loss(config.loss)
    scaled = config.mixed_precision == "mixed_float16"

    # The step's own Python is straight-line (its loop runs over a fixed number of micro-batches),
    # and so is the example model: without AutoGraph's conversion the first step traces about a
    # quarter faster, which a restart pays again. A user's model may branch on tensors: converted.
    @tf.function(autograph=bool(config.model))
    def train_step(iterator: Any) -> tf.Tensor:
        def step_fn(inputs: tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
            if even:
                xs, ys = tf.split(inputs[0], micro), tf.split(inputs[1], micro)
            else:
                xs, ys = [inputs[0][k::micro] for k in range(micro)], [inputs[1][k::micro] for k in range(micro)]
            summed: list[tf.Tensor] | None = None
            total = tf.constant(0.0)
            for x, y in zip(xs, ys, strict=False):  # k micro-batches, gradients summed locally
                with tf.GradientTape() as tape:
                    prediction = tf.cast(model(x, training=True), tf.float32)
                    loss = tf.nn.compute_average_loss(loss_fn(y, prediction), global_batch_size=global_batch)
                    target = optimizer.scale_loss(loss) if scaled else loss
                gradients = tape.gradient(target, model.trainable_variables)
                summed = gradients if summed is None else [a + b for a, b in zip(summed, gradients, strict=False)]
                total += loss
            assert summed is not None  # micro >= 1
            optimizer.apply_gradients(zip(summed, model.trainable_variables, strict=False))  # the one all-reduce
            return total

        per_replica = strategy.run(step_fn, args=(next(iterator),))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    return train_step


def _leave_preempted(step: int, total: int, loss: float | None, code: int) -> None:
    """Say the step just saved (step reports are sent at most every half second, and the launcher
    shows the last one as the step reached), then leave with the preemption exit code."""
    report(STEP, step=step, total=total, loss=loss)
    sys.exit(code)


@dataclass
class _Progress:
    """Where training is: read by the preemption handler's exit at any step, and by the step reports."""

    step: int
    window_step: int  # the rate of steps/s is measured from here, at `window_start`
    reported: int  # the last step reported (step reports go at most every half second)
    window_start: float = 0.0  # set as the loop starts
    last_report: float = 0.0
    loss: float | None = None  # the last one logged
    first_loss: float | None = None


def train_builtin(strategy: tf.distribute.Strategy, cluster: ClusterInfo, settings: TaskEnv) -> dict[str, Any]:
    """Train to `steps`; returns what goes into the result file."""
    config = BuiltinTraining.model_validate(settings.training)
    replicas = strategy.num_replicas_in_sync
    shares = batch_shares(
        config.batch_per_replica, config.accumulation_steps, replicas, cluster.num_trainers, settings.spec_workers
    )
    global_batch = shares.global_batch
    _say_batch(cluster, config, shares)
    with strategy.scope():
        model = build_model(config)
        optimizer = build_optimizer(config)
        optimizer.build(model.trainable_variables)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    store = CheckpointStore(checkpoint, settings.checkpoint_dir, cluster.is_chief, cluster.name)
    restored = store.restore()
    start_step = int(optimizer.iterations.numpy())
    report(RESTORED, step=start_step)
    if restored:
        log.info("%s: restored %s, continuing from step %d", cluster.name, restored, start_step)
    else:
        log.info("%s: no checkpoint in %s, starting at step 0", cluster.name, settings.checkpoint_dir)
    data = strategy.distribute_datasets_from_function(make_dataset_fn(config, start_step, shares))
    train_step = make_train_step(strategy, model, optimizer, config, shares)
    progress = _Progress(start_step, start_step, reported=start_step)
    preemption = _preemption_handler(strategy, store, config.steps, settings.preemption_exit_code, progress)
    if early_sigterm.pass_on():  # a stop that came before the handler listened: it saves at the next step
        log.info("%s: SIGTERM came before training started; leaving at the next step", cluster.name)
    metrics = MetricsWriter(settings, cluster.is_chief, config.tensorboard)
    try:
        steps = _Steps(cluster, settings, config, progress, metrics, optimizer, replicas)
        steps.run(iter(data), train_step, store, preemption)
        if restored is None or start_step < config.steps:
            store.save(progress.step)
            if cluster.is_chief:
                log.info("%s: checkpoint saved at step %d in %s", cluster.name, progress.step, settings.checkpoint_dir)
        if cluster.is_chief:
            tf.io.gfile.makedirs(settings.export_dir)  # a directory, or an object-store URL
            model.save(posixpath.join(settings.export_dir, "model.keras"))
        leave_together(strategy, preemption)
    finally:
        metrics.close()
        store.close()
    return {
        "step": progress.step,
        "start_step": start_step,
        "restored_from": restored,
        "loss": progress.loss,
        "first_loss": progress.first_loss,
        "fingerprint": weights_fingerprint(model.weights),
        "replicas_in_sync": replicas,
        "global_batch": global_batch,
        "temp_checkpoint_dir": store.temp_dir,
    }


def _preemption_handler(
    strategy: tf.distribute.Strategy, store: CheckpointStore, steps: int, exit_code: int, progress: _Progress
) -> Any:
    """SIGTERM to any worker (a preemption notice) makes every worker save at the same next step
    through this handler and leave with the preemption exit code; the launcher then restarts the
    gang, which resumes from that very step."""
    return tf.distribute.experimental.PreemptionCheckpointHandler(
        strategy.cluster_resolver,
        store.manager,
        termination_config=tf.distribute.experimental.TerminationConfig(
            # the step and loss as they are when it is called: the step just saved
            exit_fn=lambda: _leave_preempted(progress.step, steps, progress.loss, exit_code)
        ),
    )


def _say_batch(cluster: ClusterInfo, config: BuiltinTraining, shares: BatchShares) -> None:
    micro, replicas = config.accumulation_steps, shares.replicas
    if shares.even:
        split = f"{shares.global_batch // replicas // micro} per replica x {replicas} replicas"
        split += f" x {micro} accumulated micro-batches" if micro > 1 else ""
    else:  # an elastic gang on a number of replicas that does not divide the spec's global batch
        most, least = shares.share(0)[1], shares.share(replicas - 1)[1]
        split = f"{most if most == least else f'{least} to {most}'} per replica x {replicas} replicas"
        split += f", each in {micro} accumulated micro-batches of uneven size" if micro > 1 else ""
        split += " (the loss averaged over the global batch)"
    log.info(
        "%s: %d replicas in sync (%d task(s) x %d device(s)), global batch %d%s = %s",
        cluster.name,
        replicas,
        max(cluster.num_trainers, 1),
        replicas // max(cluster.num_trainers, 1),
        shares.global_batch,
        " (unchanged: the spec's, kept on fewer hosts)" if shares.kept else "",
        split,
    )


@dataclass
class _Steps:
    """The training loop's steps: each step, its log line and metrics, its report, its checkpoint."""

    cluster: ClusterInfo
    settings: TaskEnv
    config: BuiltinTraining
    progress: _Progress
    metrics: MetricsWriter
    optimizer: Any
    replicas: int

    def run(self, iterator: Any, train_step: Callable[[Any], Any], store: CheckpointStore, preemption: Any) -> None:
        config, progress, faults = self.config, self.progress, injected()
        progress.window_start = time.monotonic()  # the first rate is of training steps alone
        while progress.step < config.steps:
            loss_tensor = train_step(iterator)
            progress.step += 1
            step = progress.step
            faults.at_step(step)
            if step % config.log_every == 0 or step == config.steps or progress.first_loss is None:
                self._log(step, float(loss_tensor.numpy()))
            if time.monotonic() - progress.last_report >= _REPORT_INTERVAL_S or step == config.steps:
                self._report(step)
            if step < config.steps:
                with _deprecations_silenced():  # TensorFlow warns of the property it reads itself
                    preemption.save_checkpoint_if_preempted(checkpoint_number=step)
            if step % config.checkpoint_every == 0 and step < config.steps:
                store.save(step)
                if progress.reported != step:  # the step a restart resumes from: said at once, whatever the rate
                    self._report(step)
                if self.cluster.is_chief and step % max(config.checkpoint_every, config.log_every) == 0:
                    log.info("%s: checkpoint saved at step %d", self.cluster.name, step)  # not more often than steps

    def _log(self, step: int, loss: float) -> None:
        progress = self.progress
        progress.loss = loss
        progress.first_loss = loss if progress.first_loss is None else progress.first_loss
        now, logged_at = time.monotonic(), time.time()  # the step's time, not the record's writing
        rate = (step - progress.window_step) / max(now - progress.window_start, 1e-9)
        progress.window_start, progress.window_step = now, step
        log.info("%s: step %d/%d loss %.5f (%.1f steps/s)", self.cluster.name, step, self.config.steps, loss, rate)
        self.metrics.write(
            step,
            loss=loss,
            steps_per_s=rate,
            learning_rate=_learning_rate(self.optimizer),
            replicas=self.replicas,
            time=logged_at,
            attempt=self.settings.attempt,
        )

    def _report(self, step: int) -> None:
        report(STEP, step=step, total=self.config.steps, loss=self.progress.loss)  # loss: the last one logged
        self.progress.last_report, self.progress.reported = time.monotonic(), step
