"""examples/train.py, a user's own script, run as every task through the real command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO, processes_mentioning, run_launch

pytestmark = pytest.mark.tf

STEPS = 20


def test_example_script_trains_two_local_workers_to_the_same_weights(work: Path) -> None:
    script = REPO / "examples" / "train.py"
    args = ["--local", "2", "--run-root", str(work / "runs"), "--plain"]
    proc = run_launch([*args, "--", "python", str(script), "--steps", str(STEPS), "--checkpoint-every", "10"], work)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]

    run_dir = work / "runs" / "train"  # a run without a spec is named after its script
    results = [json.loads(p.read_text()) for p in sorted((run_dir / "attempt-0").glob("*.result.json"))]
    assert len(results) == 2, results
    assert {r["step"] for r in results} == {STEPS}
    assert len({r["fingerprint"] for r in results}) == 1, f"the replicas disagree: {results}"
    assert (run_dir / "checkpoints" / f"ckpt-{STEPS}.index").exists()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["state"] == "succeeded" and summary["final_step"] == STEPS and summary["restarts"] == 0
    # what the launcher read from the result files: "every replica has weights X"
    assert {t["fingerprint"] for t in summary["attempts"][-1]["tasks"]} == {results[0]["fingerprint"]}
    assert not processes_mentioning(str(work))
