"""The baseline: a minimal script that sets TF_CONFIG and starts every worker, nothing else.

    python bench/by_hand.py PLAN.json

PLAN.json lists each task's argv, cwd and environment additions (what `launch` would use). No
helper, no streaming, no supervision: the workers' output goes to /dev/null. Exits with the
highest worker exit code. Standard library only, so its own start-up costs as little as can be.
"""

import json
import os
import subprocess
import sys


def main() -> int:
    with open(sys.argv[1], encoding="utf-8") as handle:
        tasks = json.load(handle)
    procs = [
        subprocess.Popen(
            t["argv"],
            cwd=t["cwd"],
            env={**os.environ, **t["env"]},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for t in tasks
    ]
    return max(p.wait() for p in procs)


if __name__ == "__main__":
    raise SystemExit(main())
