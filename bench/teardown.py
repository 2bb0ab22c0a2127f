"""Teardown: after one worker is SIGKILLed (or SIGSTOPped), how long until every other worker
process is gone: under `launch` vs the same workers by hand (TensorFlow's own survivors).

Target under launch: <= 0.5 s for a crash. By hand, survivors that never exit are cut off at the
cap and reported at the cap.
"""

from __future__ import annotations

import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path

from bench.common import (
    all_gone,
    builtin_spec,
    kill_all,
    plan_by_hand,
    save,
    start_by_hand,
    start_launch,
    summarize,
    table,
    wait_step,
    workdir,
    worker_processes,
    write_spec,
)

CAP_S = 30.0
TARGET_S = 0.5  # a crash under launch, median
QUICK_CAP_S = 8.0


def _measure(run_dir: Path, signum: int, cleanup: Callable[[], object], cap: float = CAP_S) -> float:
    wait_step(run_dir, 20)
    victim = worker_processes(run_dir, "worker:1")
    others = [p for p in worker_processes(run_dir) if p not in victim]
    assert victim and others, "workers not found"
    victim[0].send_signal(signum)
    started = time.monotonic()
    while not all_gone(others) and time.monotonic() - started < cap:
        time.sleep(0.002)
    elapsed = time.monotonic() - started
    cleanup()
    kill_all(worker_processes(run_dir))
    return elapsed


def _under_launch(signum: int) -> float:
    directory = workdir("td-launch")
    spec = builtin_spec("td", 2, directory / "runs", steps=1_000_000, checkpoint_every=1_000_000, log_every=1)
    spec["restart"].update(max_restarts=0, stall_timeout_s=2)
    proc = start_launch(write_spec(directory, spec), cwd=directory)
    elapsed = _measure(directory / "runs" / "td", signum, lambda: proc.wait(timeout=60))
    shutil.rmtree(directory, ignore_errors=True)
    return elapsed


def _by_hand(signum: int, cap: float) -> float:
    directory = workdir("td-hand")
    spec = builtin_spec("td", 2, directory / "runs", steps=1_000_000, checkpoint_every=1_000_000, log_every=1)
    script = start_by_hand(plan_by_hand(spec))

    def cleanup() -> None:
        kill_all(worker_processes(directory / "runs" / "td"))
        script.wait()

    elapsed = _measure(directory / "runs" / "td", signum, cleanup, cap)
    shutil.rmtree(directory, ignore_errors=True)
    return elapsed


def run(quick: bool) -> str:
    crash_pairs, hang_pairs = (1, 1) if quick else (5, 3)
    cap = QUICK_CAP_S if quick else CAP_S
    data: dict[str, list[float]] = {"crash_launch": [], "crash_by_hand": [], "hang_launch": [], "hang_by_hand": []}
    for _ in range(crash_pairs):
        data["crash_launch"].append(_under_launch(signal.SIGKILL))
        data["crash_by_hand"].append(_by_hand(signal.SIGKILL, cap))
    for _ in range(hang_pairs):
        data["hang_launch"].append(_under_launch(signal.SIGSTOP))
        if not quick:  # by hand a hang costs the whole cap; the full run measures it
            data["hang_by_hand"].append(_by_hand(signal.SIGSTOP, cap))
    save(
        "teardown",
        {**data, "cap_s": cap, "stall_timeout_s": 2, "target": f"crash under launch <= {TARGET_S:g} s"},
        quick,
    )
    rows = [
        (label, summarize(data[key]), "s")
        for key, label in (
            ("crash_launch", "SIGKILL, under launch"),
            ("crash_by_hand", "SIGKILL, by hand"),
            ("hang_launch", "SIGSTOP, under launch"),
            ("hang_by_hand", "SIGSTOP, by hand"),
        )
        if data[key]
    ]
    return table(
        f"Teardown: time until every other worker is gone (by hand capped at {cap:g} s; stall_timeout_s=2 for the "
        f"hang)",
        rows,
    )


if __name__ == "__main__":
    print(run(quick=True))
