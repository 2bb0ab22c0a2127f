"""Throughput: steady-state steps/s of the same job under `launch` vs the same workers by hand.

Target: ratio >= 0.98 (streaming logs and supervising must not slow the workers down). The first
log windows (start-up, tracing) are left out.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from bench.common import (
    builtin_spec,
    interleaved,
    metrics,
    plan_by_hand,
    save,
    start_by_hand,
    start_launch,
    summarize,
    table,
    workdir,
    write_spec,
)

TARGET = 0.98  # launch / by hand, median of the pairs


def _steady_rate(run_dir: Path) -> float:
    rows = metrics(run_dir)[2:]
    return (rows[-1]["step"] - rows[0]["step"]) / (rows[-1]["time"] - rows[0]["time"])


def _under_launch(steps: int) -> float:
    directory = workdir("tp-launch")
    spec = builtin_spec("tp", 2, directory / "runs", steps=steps, checkpoint_every=10 * steps, log_every=50)
    assert start_launch(write_spec(directory, spec), cwd=directory).wait() == 0
    rate = _steady_rate(directory / "runs" / "tp")
    shutil.rmtree(directory, ignore_errors=True)
    return rate


def _by_hand(steps: int) -> float:
    directory = workdir("tp-hand")
    spec = builtin_spec("tp", 2, directory / "runs", steps=steps, checkpoint_every=10 * steps, log_every=50)
    assert start_by_hand(plan_by_hand(spec)).wait() == 0
    rate = _steady_rate(directory / "runs" / "tp")
    shutil.rmtree(directory, ignore_errors=True)
    return rate


def run(quick: bool) -> str:
    pairs, steps = (1, 300) if quick else (10, 1000)
    launch, hand, ratios = interleaved(lambda: _under_launch(steps), lambda: _by_hand(steps), pairs)
    save(
        "throughput",
        {
            "steps": steps,
            "launch_steps_per_s": launch,
            "by_hand_steps_per_s": hand,
            "ratios": ratios,
            "target": f">= {TARGET:g}",
        },
        quick,
    )
    return table(
        f"Throughput: 2 workers, {steps} steps, steady state (target ratio >= {TARGET:g})",
        [
            ("under launch", summarize(launch), "steps/s"),
            ("by hand", summarize(hand), "steps/s"),
            ("ratio launch / by hand", summarize(ratios), "x"),
        ],
    )
