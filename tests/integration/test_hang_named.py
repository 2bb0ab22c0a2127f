"""A hang is named: real TensorFlow workers in an all-reduce, worker:1 blocked for good in its data loader.

On a local host and on two SSH hosts of a stock sshd: `launch stacks` on the running gang prints each task's
current frame, stopping nothing; the stall then takes every task's stack before the stop, the report and
`launch status` name worker:1 with read_shard's file and line, and nothing is left running.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import HELPERS, launch_cmd, launcher_traceback, run_launch, write_spec
from tests.integration.test_ssh import ssh_host
from tests.labs.sshd import SshServer
from tests.labs.waiting import wait_for, wait_for_text

pytestmark = pytest.mark.tf

SCRIPT = HELPERS / "hang_in_step" / "train.py"
DATA = HELPERS / "hang_in_step" / "data.py"
STALL_S = 45  # long enough for every look at the running gang below, on a loaded machine


def hang_line() -> int:
    return next(n for n, line in enumerate(DATA.read_text().splitlines(), 1) if "# THE HANG" in line)


def hang_spec(work: Path, hosts: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "name": "hang",
        "run_root": str(work / "runs"),
        "hosts": hosts,
        "env": {"TF_CPP_MIN_LOG_LEVEL": "2"},
        "training": {"kind": "command", "argv": ["python", str(SCRIPT)]},
        "restart": {"max_restarts": 0, "stall_timeout_s": STALL_S, "grace_period_s": 5},
    }


def sampled(run_dir: Path) -> bool:
    """Whether status.json shows every task's resident memory, as its agent sampled it."""
    try:
        tasks = json.loads((run_dir / "status.json").read_text())["tasks"]
    except (OSError, ValueError, KeyError):
        return False
    return len(tasks) == 2 and all(isinstance(t.get("rss_bytes"), float) and t["rss_bytes"] > 2**20 for t in tasks)


def run_to_its_hang(work: Path, spec: dict[str, Any]) -> None:
    out = work / "launch.out"
    run_dir = work / "runs" / "hang"
    with open(out, "w") as handle:
        proc = subprocess.Popen(
            launch_cmd("--cluster", str(write_spec(work, spec)), "--plain"), cwd=work, stdout=handle, stderr=handle
        )
        try:
            wait_for_text(out, "stuck in read_shard", 180, lambda: proc.poll() is None)
            shown = run_launch(["stacks", str(run_dir)], work, timeout=120)
            assert shown.returncode == 0, shown.stdout + shown.stderr
            assert proc.poll() is None, "`launch stacks` stopped nothing"
            assert f"read_shard ({DATA}:{hang_line()})" in shown.stdout, shown.stdout
            behind = "behind: worker:1 at step 4 since "
            assert shown.stdout.startswith(behind) and f"in data.py:{hang_line()} read_shard" in shown.stdout
            assert "worker:0 on " in shown.stdout and "site-packages/tensorflow/" in shown.stdout, shown.stdout
            only = run_launch(["stacks", str(run_dir), "--task", "worker:0"], work, timeout=120)
            assert only.returncode == 0 and "worker:0 on" in only.stdout, only.stdout
            assert "worker:1" not in only.stdout, "neither worker:1's stack nor a behind line over one task"
            unknown = run_launch(["stacks", str(run_dir), "--task", "worker:7"], work, timeout=120)
            assert unknown.returncode == 2 and "no running task named worker:7" in unknown.stderr, unknown.stderr
            alive = lambda: proc.poll() is None  # noqa: E731
            wait_for(lambda: sampled(run_dir), 30, "every task's memory in status.json", while_alive=alive)
            shown_status = run_launch(["status", str(run_dir)], work)
            assert " MiB " in shown_status.stdout and "mem" in shown_status.stdout, shown_status.stdout
            assert proc.poll() is None, f"the stall came before every look at the running gang (STALL_S={STALL_S})"
            assert proc.wait(timeout=STALL_S + 120) == 1
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    console = out.read_text()
    assert not launcher_traceback(console), console
    named = "worker:1 at step 4 since"
    assert named in console and f"in data.py:{hang_line()} read_shard" in console, console
    assert "the others wait in TensorFlow (a collective): worker:0 at step 4" in console, console
    summary = json.loads((run_dir / "summary.json").read_text())
    attempt = summary["attempts"][0]
    assert attempt["kind"] == "stalled" and attempt["cause"] == "worker:1", attempt
    files = attempt["hang"]["stack_files"]
    assert sorted(files) == ["worker:0", "worker:1"] and not attempt["hang"]["no_stack"], attempt["hang"]
    worker1 = Path(files["worker:1"]).read_text()
    worker0 = Path(files["worker:0"]).read_text()
    assert Path(files["worker:1"]).name == "worker-1.stack.txt"
    assert f"read_shard ({DATA}:{hang_line()})" in worker1 and f"<module> ({SCRIPT}:" in worker1, worker1
    assert "site-packages/tensorflow/" in worker0 and f"<module> ({SCRIPT}:" in worker0, worker0
    status = run_launch(["status", str(run_dir)], work)
    assert named in status.stdout and "worker-1.stack.txt" not in status.stdout, status.stdout
    assert "the tasks' stacks, taken before they were killed" in status.stdout, status.stdout


def test_a_local_hang_is_named_with_every_task_s_stack(work: Path) -> None:
    run_to_its_hang(work, hang_spec(work, [{"address": "localhost", "workers": 2}]))


def test_a_hang_on_ssh_hosts_is_named_with_every_task_s_stack(work: Path, sshd: SshServer) -> None:
    run_to_its_hang(work, hang_spec(work, [ssh_host(sshd, "127.0.0.2"), ssh_host(sshd, "127.0.0.3")]))
