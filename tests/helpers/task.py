"""A tiny stand-in for a training task, driven by arguments (no TensorFlow).

task.py record DIR        write this task's TF_CONFIG and env to DIR/<task>.json, exit 0
task.py sleep [--ignore-term] [--child]
                          print "ready", then sleep until killed (optionally with a grandchild)
task.py fail-on TASK CODE the named task exits CODE after "ready"; the others sleep
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time


def sleep_forever() -> None:
    while True:
        time.sleep(3600)


def main() -> int:
    mode, args = sys.argv[1], sys.argv[2:]
    task = os.environ.get("TFLAUNCH_TASK", "?")
    if mode == "record":
        with open(os.path.join(args[0], task.replace(":", "-") + ".json"), "w") as handle:
            json.dump(
                {
                    "TF_CONFIG": json.loads(os.environ["TF_CONFIG"]),
                    "attempt": os.environ["TFLAUNCH_ATTEMPT"],
                    "argv": sys.argv,
                },
                handle,
            )
        print(f"recorded {task}", flush=True)
        return 0
    if "--ignore-term" in args:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if "--child" in args:
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    print(f"ready {task}", flush=True)
    if mode == "fail-on" and task == args[0]:
        time.sleep(0.5)
        print(f"{task} failing with {args[1]}", flush=True)
        return int(args[1])
    sleep_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
