"""Keras 3 `model.fit` under MultiWorkerMirroredStrategy, as TensorFlow's multi-worker tutorial does: fails."""

import keras
import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
x = np.random.rand(64, 4).astype("float32")
y = np.random.rand(64, 1).astype("float32")
model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(16).repeat(), epochs=1, steps_per_epoch=3, verbose=2)
