"""A run directory on a full file system (a real 64 KiB tmpfs): the run goes on and says what it
could not keep, instead of ending as a lost connection or a launcher that left no word."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import run_launch


@pytest.fixture
def tiny(work: Path) -> Iterator[Path]:
    """A 64 KiB file system at work/tiny, unmounted after the test, pass or fail."""
    point = work / "tiny"
    point.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount(8) here")
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(point)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode(errors='replace').strip()}")
    try:
        yield point
    finally:
        subprocess.run(["umount", str(point)], check=True)


def test_a_full_run_directory_loses_logs_and_summary_not_the_run(work: Path, tiny: Path) -> None:
    chatty = "[print('line', i, 'x' * 40) for i in range(3000)]"
    proc = run_launch(["--local", "2", "--run-root", str(tiny), "--plain", "--", "python3", "-c", chatty], work)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for task in ("worker-0", "worker-1"):
        assert f"cannot write {tiny}/local/attempt-0/{task}.log (No space left on device): lines not kept" in (
            proc.stdout + proc.stderr
        )
    assert f"cannot write the summary {tiny}/local/summary.json (No space left on device)" in proc.stderr
    assert "launch succeeded" in proc.stderr and "line 2999" in proc.stdout  # the console kept every line
    assert "Traceback" not in proc.stderr and "lost" not in proc.stderr
