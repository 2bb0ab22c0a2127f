"""A user model and data set for the built-in runtime (`training.model` / `training.dataset`).

    "training": {"kind": "builtin", "model": "my_model:build_model", "dataset": "my_model:make_dataset",
                 "loss": "sparse_categorical_crossentropy", "steps": 200}

Run from this folder (or put it on PYTHONPATH in the spec's env) so every worker can import it.
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

CLASSES = 4


def build_model(config: dict[str, Any]) -> keras.Model:
    """Called once per worker inside the strategy scope; return a built Keras 3 model (logits)."""
    return keras.Sequential(
        [
            keras.Input(shape=(config["features"],)),
            keras.layers.Dense(32, activation="relu", kernel_initializer=keras.initializers.GlorotUniform(seed=1)),
            keras.layers.Dense(CLASSES, kernel_initializer=keras.initializers.GlorotUniform(seed=2)),
        ]
    )


def make_dataset(context: tf.distribute.InputContext, start_step: int, config: dict[str, Any]) -> tf.data.Dataset:
    """This input pipeline's batches of (x, y), per replica, starting at `start_step`.

    Each batch holds batch_per_replica x accumulation_steps examples. Shard by
    context.input_pipeline_id so no two workers see the same examples; make it deterministic in
    the step so a resumed run sees what an uninterrupted one would.
    """
    batch = config["batch_per_replica"] * config["accumulation_steps"]
    features = config["features"]
    shard = context.input_pipeline_id

    def make_batch(element: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        seed = tf.stack([tf.cast(element, tf.int32), tf.cast(shard, tf.int32)])  # unique per batch
        x = tf.random.stateless_normal([batch, features], seed=seed)
        y = tf.cast(tf.argmax(x[:, :CLASSES], axis=1), tf.int32)  # the class is the largest of the first features
        return x, y

    local = context.num_replicas_in_sync // context.num_input_pipelines  # replicas fed by this pipeline
    ds = tf.data.Dataset.range(start_step * local, config["steps"] * local).map(make_batch)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return ds.with_options(options).prefetch(tf.data.AUTOTUNE)
