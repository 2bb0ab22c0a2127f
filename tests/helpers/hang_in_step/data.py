"""A data loader that blocks for good on worker:1 before step 5, as one blocked on NFS would."""

from __future__ import annotations

import os
import sys
import time

HANG_STEP = 5


def read_shard(step: int) -> float:
    if step == HANG_STEP and os.environ.get("TFLAUNCH_TASK") == "worker:1":
        print("stuck in read_shard", flush=True)
        sys.stdout.flush()
        while True:
            time.sleep(1)  # THE HANG
    return float(step)
