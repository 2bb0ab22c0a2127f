"""Writes TensorBoard summaries to an s3:// URL, as a checkpoint_dir of s3://... makes the runtime do:
the TensorFlow 2.21 wheel has no file system for that scheme."""

import tensorflow as tf

tf.summary.create_file_writer("s3://bucket/run/tensorboard")
