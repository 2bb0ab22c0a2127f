"""The built-in example: a small Keras 3 MLP and a synthetic, deterministic, learnable data set.

Every example is a pure function of its global index, so the data a step sees does not depend
on how many workers share it nor on restarts: a resumed run sees exactly the examples an
uninterrupted run would have seen.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.random  # noqa: F401  numpy loads it at first use (20 ms): with this module, so a warm spare has it
import tensorflow as tf

from worker.batch_shares import BatchShares


def build_model(features: int, hidden_units: int, seed: int) -> Any:
    import keras

    init = lambda offset: keras.initializers.GlorotUniform(seed=seed + offset)  # noqa: E731
    return keras.Sequential(
        [
            keras.Input(shape=(features,)),
            keras.layers.Dense(hidden_units, activation="relu", kernel_initializer=init(1)),
            keras.layers.Dense(hidden_units, activation="relu", kernel_initializer=init(2)),
            keras.layers.Dense(1, kernel_initializer=init(3)),
        ]
    )


def _teacher(features: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.RandomState(seed + 12345)
    w1 = rng.normal(size=(features, 8)).astype(np.float64) / np.sqrt(features)
    w2 = rng.normal(size=(8, 1)).astype(np.float64)
    return w1, w2


def straight(function: Callable[..., Any]) -> Callable[..., Any]:
    """A data set function with no Python control flow on tensors, traced as written: AutoGraph's
    conversion of the example's maps took about 0.1 s of every start and every restart."""
    return tf.autograph.experimental.do_not_convert(function)


def examples(indices: tf.Tensor, features: int, seed: int) -> tuple[tf.Tensor, tf.Tensor]:
    """Inputs and targets for a vector of global example indices (deterministic hash noise)."""
    w1, w2 = _teacher(features, seed)
    i = tf.cast(tf.reshape(indices, [-1, 1]), tf.float64)
    f = tf.range(features, dtype=tf.float64)[tf.newaxis, :]
    noise = tf.math.sin(i * 12.9898 + f * 78.233 + float(seed) * 0.618) * 43758.5453
    x = (noise - tf.math.floor(noise)) * 2.0 - 1.0
    y = tf.matmul(tf.math.tanh(tf.matmul(x, w1) * 2.0), w2)
    return tf.cast(x, tf.float32), tf.cast(y, tf.float32)


def dataset_fn(
    start_step: int, steps: int, shares: BatchShares, features: int, seed: int
) -> Callable[[tf.distribute.InputContext], tf.data.Dataset]:
    """For distribute_datasets_from_function: each input pipeline makes only its own shard.

    Step s holds examples s*G .. s*G+G-1 of the whole job (G the global batch); the L local replicas
    of pipeline p are global replicas p*L + l, each taking its share (worker/batch_shares.py). With
    G = R*B that is per-replica batch s*R + p*L + l, examples of it b*B .. b*B+B-1.
    """
    replicas, global_batch = shares.replicas, shares.global_batch
    base, left = divmod(global_batch, replicas)

    def make(context: tf.distribute.InputContext) -> tf.data.Dataset:
        pipelines = context.num_input_pipelines
        local = max(replicas // pipelines, 1)
        pipeline = context.input_pipeline_id

        def share_examples(i: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            step, replica = i // local, pipeline * local + i % local
            first = step * global_batch + replica * base + tf.minimum(replica, left)
            size = base + tf.cast(replica < left, tf.int64)
            return examples(tf.range(first, first + size), features, seed)

        ds = tf.data.Dataset.range(start_step * local, steps * local).map(straight(share_examples))
        options = tf.data.Options()
        # Sharded by hand above; AUTO would silently re-shard by data.
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        options.deterministic = True
        return ds.with_options(options).prefetch(tf.data.AUTOTUNE)

    return make
