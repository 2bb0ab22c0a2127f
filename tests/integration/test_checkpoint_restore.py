"""The training's checkpoint is restored once, and TensorFlow's preemption handler still gets its run
counter from it (deferred restoration), or keeps 0 when the checkpoint was written without one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.tf

SCRIPT = r"""
import json, sys
import tensorflow as tf
from worker.checkpoints import CheckpointStore

directory, with_counter = sys.argv[1], sys.argv[2] == "yes"

def handler(store):
    return tf.distribute.experimental.PreemptionCheckpointHandler(None, store.manager)

# A first run: the handler's counter is saved with the model when it is attached.
model = tf.Variable([1.0, 2.0])
store = CheckpointStore(tf.train.Checkpoint(model=model), directory, True, "chief:0")
if with_counter:
    handler(store)._checkpointed_runs.assign(17)
store.save(5)

# The next attempt: count the restores of the checkpoint files.
reads = []
original = tf.train.Checkpoint.restore
def counted(self, path, *args, **kwargs):
    reads.append(path)
    return original(self, path, *args, **kwargs)
tf.train.Checkpoint.restore = counted
model = tf.Variable([0.0, 0.0])
store = CheckpointStore(tf.train.Checkpoint(model=model), directory, True, "chief:0")
restored = store.restore()
made = handler(store)
print(json.dumps({"restored": restored, "reads": len(reads), "model": model.numpy().tolist(),
                  "run_counter": int(made._run_counter)}))
"""


@pytest.mark.parametrize("with_counter", ["yes", "no"])
def test_one_restore_and_the_handler_agrees_on_its_counter(tmp_path: Path, with_counter: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path), with_counter],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["restored"].endswith("ckpt-5")
    assert found["reads"] == 1, "the checkpoint was read more than once"
    assert found["model"] == [1.0, 2.0]
    assert found["run_counter"] == (17 if with_counter == "yes" else 0)
