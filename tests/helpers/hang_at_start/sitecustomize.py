"""On PYTHONPATH, makes a task's python hang at interpreter start-up, before the runtime says anything."""

import os
import time

if os.environ.get("TEST_HANG_AT_START"):
    print("stuck before joining", flush=True)
    time.sleep(3600)
