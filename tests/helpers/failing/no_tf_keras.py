"""TF_USE_LEGACY_KERAS=1 where tf-keras is not installed (made so here by barring its import, which is what
TensorFlow's loader sees when the package is missing): tf.keras cannot be loaded."""

import os
import sys

os.environ["TF_USE_LEGACY_KERAS"] = "1"
sys.modules["tf_keras"] = None  # type: ignore[assignment]

import tensorflow as tf  # noqa: E402

print(tf.keras.layers.Dense(1))
