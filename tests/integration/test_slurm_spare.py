"""A Slurm node gone for good, against a real Slurm of three nodes (tests/labs/slurm.py): the job is
submitted with a spare node (slurm.spare_nodes), one node's slurmd and everything in it are killed
for good mid-training, and the run finishes on the spare node within the allocation (--no-kill).

Slurm itself declares the node down only after its SlurmdTimeout (300 s by default); until then the
job stays in the queue after the launcher inside it ended. The test does not wait for that: it
follows the run's own output, then cancels the job."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.integration.test_slurm import _spec, _submit, _wait_output
from tests.integration.test_train_local import assert_agree, results
from tests.labs.waiting import wait_for_text

pytestmark = [pytest.mark.slow, pytest.mark.tf]  # a Slurm cluster of three nodes, for one test


@pytest.fixture(scope="module")
def slurm3() -> Iterator[Any]:
    from tests.labs.slurm import lab_or_skip

    yield from lab_or_skip(3)


def _kill_node(lab: Any, index: int) -> None:
    """The node's slurmd and everything in the node (the job's step daemon, the agent, its tasks), for good."""
    slurmd = lab.daemons[2 + index]  # munged, slurmctld, then a slurmd per node
    os.kill(slurmd.pid, signal.SIGKILL)
    slurmd.wait(timeout=10)
    for pid in lab.net.hosts[index].task_pids():
        try:
            psutil.Process(pid).kill()
        except psutil.NoSuchProcess:
            pass


def test_a_node_gone_for_good_is_replaced_by_the_spare_node(slurm3: Any, work: Path) -> None:
    spec = _spec(work, "spare", steps=400, spare_nodes=1)
    spec["restart"].update(liveness_timeout_s=5)
    proc = _submit(slurm3, work, spec)
    seen: list[str] = []
    _wait_output(proc, seen, "submitted Slurm job")
    assert proc.wait(timeout=60) == 0
    job = next(line.split("job ")[1].split(":")[0] for line in seen if "submitted Slurm job" in line)
    run_dir = work / "runs" / "spare"
    output = run_dir / f"slurm-{job}.out"
    try:
        wait_for_text(output, "step 30/", 180)
        _kill_node(slurm3, 1)
        wait_for_text(output, "launch succeeded", 180)
    finally:
        slurm3.run("scancel", job, check=False)
    text = output.read_text()
    doomed, spare = slurm3.net.hosts[1].address, slurm3.net.hosts[2].address
    assert f"host {doomed} excluded" in text and f"spare {spare} takes its tasks" in text, text[-4000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    last = summary["attempts"][-1]
    assert {t["host"] for t in last["tasks"]} == {slurm3.net.hosts[0].address, spare}
    assert_agree(results(run_dir, len(summary["attempts"]) - 1), 2, 400)
    assert summary["restarts"] == 0 and summary["excluded_hosts"][0]["host"] == doomed
    assert "--no-kill" in (run_dir / "submit.sbatch").read_text()
    deadline = time.monotonic() + 30
    while slurm3.node_processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not slurm3.node_processes(), f"processes left in the nodes: {slurm3.node_processes()}"
