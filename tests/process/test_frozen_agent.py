"""A local agent held frozen (SIGSTOP) is given up for its silence and killed at once: its keeper then
stops its tasks, so none trains on beside the next attempt (writing checkpoints that attempt resumes
from, its output lost) or outlives the launcher."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import psutil

from tests.conftest import launch_cmd, write_spec

SLEEPER = ["python3", "-c", "import time; print('up', flush=True); time.sleep(120)"]


def test_a_frozen_local_agents_tasks_are_gone_before_the_next_attempt_runs(work: Path) -> None:
    spec = {
        "name": "frozen",
        "run_root": str(work / "runs"),
        "hosts": [{"address": "localhost", "workers": 2}],
        "restart": {"max_restarts": 1, "backoff_s": 0, "liveness_timeout_s": 2},
        "training": {"kind": "command", "argv": SLEEPER},
    }
    proc = subprocess.Popen(
        launch_cmd("--cluster", str(write_spec(work, spec)), "--plain"),
        cwd=work,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        for _ in range(2):  # both tasks run
            while "up" not in proc.stdout.readline():
                assert proc.poll() is None
        tasks = [
            p for p in psutil.Process(proc.pid).children(recursive=True) if "time.sleep(120)" in " ".join(p.cmdline())
        ]
        [agent] = {task.parent() for task in tasks}
        os.kill(agent.pid, signal.SIGSTOP)
        for _ in range(2):  # the next attempt's tasks run
            while "up" not in proc.stdout.readline():
                assert proc.poll() is None
        running = [t for t in tasks if t.is_running() and t.status() != psutil.STATUS_ZOMBIE]
        assert not running, f"the given-up attempt's tasks still run beside the next: {running}"
        assert not agent.is_running() or agent.status() == psutil.STATUS_ZOMBIE
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "lost: nothing from localhost for" in err, err
