"""A task that describes how it was started, as one JSON line, then exits with argv[1] (default 0)."""

import gc
import json
import os
import sys

print(
    json.dumps(
        {
            "name": __name__,
            "argv": sys.argv,
            "path0": sys.path[0],
            "cwd": os.getcwd(),
            "mark": os.environ.get("MARK"),
            "tf_config": os.environ.get("TF_CONFIG"),
            "preloaded": "tests.helpers.preloaded" in sys.modules,
            "pid": os.getpid(),
            "frozen": gc.get_freeze_count(),
        }
    ),
    flush=True,
)
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
