"""Holds its own TF port (from TF_CONFIG) before building the strategy: TensorFlow cannot listen on it."""

import json
import os
import socket

import tensorflow as tf

config = json.loads(os.environ["TF_CONFIG"])
me = config["cluster"][config["task"]["type"]][config["task"]["index"]]
held = socket.socket()
held.bind(("", int(me.rsplit(":", 1)[1])))
held.listen()
strategy = tf.distribute.MultiWorkerMirroredStrategy()
