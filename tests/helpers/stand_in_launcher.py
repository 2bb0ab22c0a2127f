"""A stand-in for a running `launch`: writes status.json naming itself, then waits to be stopped.

stand_in_launcher.py STATUS_FILE SUMMARY_FILE [--ignore-int]

It holds the run's lock (launch.lock in the status file's directory) as a launcher does: `launch
stop` signals only the lock's holder. On SIGINT it writes an "interrupted" summary and exits 130,
as the launcher does after stopping its tasks; with --ignore-int it ignores SIGINT (a launcher
stuck while stopping). Prints "ready" once status.json is written.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import psutil

from launcher.rundir.lock import lock_run


def write_json(path: str, data: dict[str, object]) -> None:
    with open(f"{path}.tmp", "w", encoding="utf-8") as handle:
        json.dump(data, handle)
    os.replace(f"{path}.tmp", path)


def main() -> int:
    status_file, summary_file = sys.argv[1], sys.argv[2]
    if "--ignore-int" in sys.argv[3:]:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    else:  # as launch does, whatever it inherited (a shell's `&` starts a job with SIGINT ignored)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    lock = lock_run(os.path.dirname(os.path.abspath(status_file)))  # held until this process ends
    write_json(
        status_file,
        {
            "launcher_pid": os.getpid(),
            "launcher_started": psutil.Process().create_time(),
            "updated": time.time(),
            "attempt": 0,
            "restarts": 0,
            "tasks": [{"task": "worker:0", "state": "running", "step": 7}],
        },
    )
    try:  # "ready" inside: a SIGINT sent as soon as it is read may land before print() returns
        print("ready", flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        write_json(summary_file, {"state": "interrupted", "final_step": 7, "attempts": [{"attempt": 0}]})
        return 130
    finally:
        lock.release()


if __name__ == "__main__":
    sys.exit(main())
