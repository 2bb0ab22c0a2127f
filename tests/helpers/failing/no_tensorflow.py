"""Run with `python3 -S`: an interpreter without the environment's packages, as on a host without TensorFlow."""

import tensorflow as tf

print(tf.__version__)
