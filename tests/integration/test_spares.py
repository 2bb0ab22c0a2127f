"""Warm spares with real TensorFlow: a user script restarted into its spare finds TensorFlow
imported and nothing initialised, joins the gang and all-reduces; nothing is left at the end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.conftest import HELPERS, local_spec, run_launch, wait_until_gone, write_spec
from worker.contract import SPARE_FDS_VAR

pytestmark = pytest.mark.tf


def test_a_user_script_restarts_into_warm_spares_with_nothing_initialised(work: Path) -> None:
    out = work / "seen"
    out.mkdir()
    spec = local_spec("warm", 2, work / "runs")
    spec["restart"] = {"max_restarts": 1, "backoff_s": 0, "grace_period_s": 5, "warm_spares_after_s": 0}
    proc = run_launch(
        ["--cluster", str(write_spec(work, spec)), "--", "python", str(HELPERS / "spare_probe.py"), str(out)], work
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((work / "runs" / "warm" / "summary.json").read_text())
    assert summary["restarts"] == 1
    assert summary["attempts"][1]["recovery"]["warm_tasks"] == 2, summary["attempts"][1]["recovery"]
    assert summary["attempts"][1]["recovery"]["forked_tasks"] == 0, "a script's spares import: nothing forks in it"
    for task in ("worker-0", "worker-1"):
        seen = json.loads((out / f"{task}.json").read_text())
        assert seen["preloaded"], "the spare had imported TensorFlow before the script ran"
        assert not seen["context_initialised"] and not seen["devices_initialised"], seen
        assert seen["name"] == "__main__" and seen["argv"] == [str(HELPERS / "spare_probe.py"), str(out)]
        assert seen["all_reduced"] == 2.0 and seen["workers"] == 2
    assert not wait_until_gone(str(work), 15)


def test_a_forked_spare_is_ready_at_its_fork_with_the_runtime_imported(work: Path) -> None:
    """The task imports the runtime's modules before its fork: the spare's first word says it is ready,
    and it spends no CPU until its order (an import of its own took the busy workers' cores)."""
    orders_r, orders_w = os.pipe()
    ready_r, ready_w = os.pipe()
    out_r, out_w = os.pipe()
    events_r, events_w = os.pipe()
    handed = (orders_r, ready_w, out_w, events_w)
    # a TF_CONFIG that is not JSON: the task itself stops at it, after its fork
    env = {**os.environ, SPARE_FDS_VAR: ",".join(map(str, handed)), "TF_CONFIG": "{", "MARK": str(work)}
    task = subprocess.Popen(
        [sys.executable, "-P", "-m", "worker"],
        cwd=work,  # the task writes its error file under its working directory
        env=env,
        pass_fds=handed,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for fd in handed:
        os.close(fd)
    with os.fdopen(ready_r, encoding="utf-8") as words:
        first = json.loads(words.readline())
        assert first.get("ready") is True and first["forked"] and first["pid"] > 0, first
        spare = psutil.Process(first["pid"])
        assert task.wait(timeout=120) != 0, "the task stops at its TF_CONFIG; its spare stands by"
        used = spare.cpu_times()
        assert used.user + used.system < 0.1, f"the spare worked after its fork: {used}"
        os.close(orders_w)  # no order: the spare ends
        assert words.readline() == "", "nothing more said without an order"
    psutil.wait_procs([spare], timeout=30)
    assert not spare.is_running()
    for fd in (out_r, events_r):
        os.close(fd)
