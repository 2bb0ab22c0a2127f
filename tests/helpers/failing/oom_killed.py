"""worker:1 joins the memory cgroup the test made (64 MiB) and fills 512 MiB: the kernel's
out-of-memory killer ends it with SIGKILL. worker:0 waits."""

import json
import os
import time

if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 1:
    with open(os.path.join(os.environ["OOM_TEST_CGROUP"], "cgroup.procs"), "w") as procs:
        procs.write(str(os.getpid()))
    memory = bytearray(512 * 2**20)
    for at in range(0, len(memory), 4096):  # touch every page: they count only once written
        memory[at] = 1
    raise SystemExit("still alive after filling 512 MiB: the cgroup's limit did not hold")
time.sleep(60)
