"""A user's own error after a big tensor's repr has filled the log's tail."""

import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
print(tf.random.uniform([400, 400]))
raise ValueError("bad batch: expected 32 rows, got 31")
