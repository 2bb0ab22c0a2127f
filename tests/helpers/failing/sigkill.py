"""worker:1 is killed by SIGKILL, as the kernel's out-of-memory killer would; worker:0 waits."""

import json
import os
import signal
import time

if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 1:
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(60)
