"""Asks for a 4 TiB variable: TensorFlow's allocator refuses it."""

import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    big = tf.Variable(tf.zeros([1 << 20, 1 << 20]))
