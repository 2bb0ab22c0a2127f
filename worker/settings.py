"""What the launcher tells a worker besides TF_CONFIG: files, directories, training settings.

Read from TFLAUNCH_* variables once, at start-up. Without a launcher (a bare `python -m worker`)
sensible local defaults apply, so the runtime can be tried by hand.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

PREFIX = "TFLAUNCH_"


@dataclass(frozen=True)
class WorkerSettings:
    run_dir: str
    attempt: int
    task: str
    checkpoint_dir: str
    result_file: str
    error_file: str
    metrics_file: str
    export_dir: str
    preemption_exit_code: int
    training: dict[str, Any] = field(default_factory=dict)


def read_settings() -> WorkerSettings:
    env = os.environ
    run_dir = env.get(f"{PREFIX}RUN_DIR", os.path.abspath("worker-run"))
    task = env.get(f"{PREFIX}TASK", "worker:0")
    stem = task.replace(":", "-")
    return WorkerSettings(
        run_dir=run_dir,
        attempt=int(env.get(f"{PREFIX}ATTEMPT", "0")),
        task=task,
        checkpoint_dir=env.get(f"{PREFIX}CHECKPOINT_DIR", os.path.join(run_dir, "checkpoints")),
        result_file=env.get(f"{PREFIX}RESULT_FILE", os.path.join(run_dir, f"{stem}.result.json")),
        error_file=env.get(f"{PREFIX}ERROR_FILE", os.path.join(run_dir, f"{stem}.error.json")),
        metrics_file=env.get(f"{PREFIX}METRICS_FILE", os.path.join(run_dir, "metrics.jsonl")),
        export_dir=env.get(f"{PREFIX}EXPORT_DIR", os.path.join(run_dir, "model")),
        preemption_exit_code=int(env.get(f"{PREFIX}PREEMPTION_EXIT_CODE", "42")),
        training=json.loads(env.get(f"{PREFIX}TRAINING", '{"kind": "builtin"}')),
    )
