"""Checkpoint cost: how long one save blocks training, relative to one training step, for a model
of a few million parameters (Keras 3 + Adam, the built-in runtime's synchronous path), and the
bytes each save writes. Steps and saves are interleaved (step, save, step, save, ...).

The async path (`CheckpointOptions(enable_async=True)`) is not measured: it fails on the second
save with Keras 3 models (see TF_FACTS), so the runtime does not offer it.
"""

from __future__ import annotations

import os
import shutil
import time

from bench.common import save, summarize, table, workdir


def run(quick: bool) -> str:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    from worker import example
    from worker.checkpoints import CheckpointStore

    saves = 3 if quick else 8
    hidden, features, batch = 2048, 16, 256
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = example.build_model(features, hidden, 0)
        import keras

        optimizer = keras.optimizers.Adam(1e-3)
        optimizer.build(model.trainable_variables)
    params = int(sum(v.numpy().size for v in model.trainable_variables))
    x, y = example.examples(tf.range(batch, dtype=tf.int64), features, 0)

    @tf.function
    def train_step() -> tf.Tensor:
        def step_fn() -> tf.Tensor:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
            optimizer.apply_gradients(
                zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables, strict=False)
            )
            return loss

        return strategy.run(step_fn)

    directory = workdir("ckpt")
    store = CheckpointStore(tf.train.Checkpoint(model=model, optimizer=optimizer), str(directory), True, "chief:0")
    for _ in range(5):  # trace and warm up
        train_step().numpy()
    steps_s, saves_s, ratios, sizes = [], [], [], []
    for number in range(1, saves + 1):
        started = time.perf_counter()
        for _ in range(5):
            train_step().numpy()
        step = (time.perf_counter() - started) / 5
        started = time.perf_counter()
        store.save(number)
        blocked = time.perf_counter() - started
        steps_s.append(step)
        saves_s.append(blocked)
        ratios.append(blocked / step)
        sizes.append(float(sum(f.stat().st_size for f in directory.iterdir() if f.name.startswith(f"ckpt-{number}."))))
    store.close()
    shutil.rmtree(directory, ignore_errors=True)
    save(
        "checkpoint",
        {
            "parameters": params,
            "batch": batch,
            "step_s": steps_s,
            "save_s": saves_s,
            "ratios": ratios,
            "bytes_per_save": sizes,
            "async": "not measured: fails on the second save with Keras 3 models",
        },
        quick,
    )
    return table(
        f"Checkpoint cost: {params / 1e6:.1f} M parameters + Adam, synchronous save (Keras 3)",
        [
            ("one training step", summarize(steps_s), "s"),
            ("one save (blocks training)", summarize(saves_s), "s"),
            ("ratio save / step", summarize(ratios), "x"),
            ("bytes written per save", summarize([s / 1e6 for s in sizes]), "MB"),
        ],
    )
