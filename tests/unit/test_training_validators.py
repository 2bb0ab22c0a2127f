"""The worker's training validators are built when a warm spare imports the training module, not
after a failure (where building them took ~0.2 s of a restart next to an imported TensorFlow)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO

CHECK = """
import sys
sys.path.insert(0, sys.argv[1])
from worker import training_spec
assert not training_spec.BuiltinTraining.__pydantic_complete__  # deferred until needed: the launcher never is
import importlib
importlib.import_module(sys.argv[2])
built = training_spec._adapter.cache_info().currsize == 1
model = getattr(training_spec, sys.argv[3])
print(built, model.__pydantic_complete__)
"""


def test_importing_a_training_module_builds_its_validators() -> None:
    for module, model in (("worker.loop", "BuiltinTraining"), ("worker.fit", "FitTraining")):
        done = subprocess.run(
            [sys.executable, "-c", CHECK, str(REPO), module, model], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.split() == ["True", "True"], (module, done.stdout)
