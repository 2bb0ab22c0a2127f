"""The chief leaves right after joining; the other worker then waits on it in a collective."""

import json
import os
import socket

import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
config = json.loads(os.environ["TF_CONFIG"])
if config["task"]["index"] == 0:
    raise SystemExit(0)
chief_host, chief_port = config["cluster"]["worker"][0].rsplit(":", 1)
while True:  # until the chief's process, and the coordination service with it, is gone
    try:
        socket.create_connection((chief_host, int(chief_port)), timeout=1).close()
    except OSError:
        break
print(strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None))
