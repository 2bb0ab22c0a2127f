"""A user script that shows what a warm spare hands it (run as `launch -- python spare_probe.py OUT`).

Attempt 0: once the launcher's status says every spare is ready, worker:1 fails, so the gang
restarts into the spares. Attempt 1: before touching TensorFlow, record whether it was already
imported and whether any device or the eager context was initialised; then join the gang with
MultiWorkerMirroredStrategy and all-reduce, and record the sum.
"""

import json
import os
import sys
import time


def spares_ready(status_file: str) -> bool:
    try:
        with open(status_file, encoding="utf-8") as handle:
            spares = json.load(handle).get("spares") or {}
    except (OSError, ValueError):  # not written yet, or being replaced
        return False
    return spares.get("ready", 0) >= 2


task = os.environ["TFLAUNCH_TASK"]
if os.environ["TFLAUNCH_ATTEMPT"] == "0":
    from worker import report

    report("step", step=1)  # spares are made for tasks that report their progress
    status = os.path.join(os.environ["TFLAUNCH_RUN_DIR"], "status.json")
    deadline = time.monotonic() + 120
    while not spares_ready(status) and time.monotonic() < deadline:
        time.sleep(0.2)  # a file written by another process: nothing to wait on but the file
    if task == "worker:1":
        sys.exit(1)
    time.sleep(3600)  # stopped by the launcher when worker:1 fails

seen = {"preloaded": "tensorflow" in sys.modules, "name": __name__, "argv": sys.argv}
import tensorflow as tf  # noqa: E402
from tensorflow.python.eager import context  # noqa: E402

ctx = context.context()
seen["context_initialised"] = ctx._context_handle is not None
seen["devices_initialised"] = ctx._physical_devices is not None
strategy = tf.distribute.MultiWorkerMirroredStrategy()
total = strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.constant(1.0)), axis=None)
seen["all_reduced"] = float(total.numpy())
seen["workers"] = len(json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"])
with open(os.path.join(sys.argv[1], task.replace(":", "-") + ".json"), "w", encoding="utf-8") as out:
    json.dump(seen, out)
