"""Warm spares with real TensorFlow: a user script restarted into its spare finds TensorFlow
imported and nothing initialised, joins the gang and all-reduces; nothing is left at the end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import HELPERS, local_spec, run_launch, wait_until_gone, write_spec

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
