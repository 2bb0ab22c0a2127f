"""Throughput: steady-state steps/s of the same job under `launch` vs the same workers by hand.

Target: ratio >= 0.98 (streaming logs and supervising must not slow the workers down). The first
log windows (start-up, tracing) are left out.

The job is the built-in example with a wider model (512 units, 256 examples per replica: about
15 ms a step on 2 cores). The workers keep every core busy whatever the width, so the launcher's
own CPU is the same share of the machine; but at the default width a step takes about 6 ms, and a
pair's ratio measured the machine's scheduling more than the launcher: pairs spread 0.78-1.24 (and
medians of 10 pairs 0.94-1.09 from run to run), against 0.95-1.07 at this width. Logs come every
25 steps, about as many lines a second as at the default width every 50.
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
WIDE = {"hidden_units": 512, "batch_per_replica": 256, "log_every": 25}  # see above


def _steady_rate(run_dir: Path) -> float:
    rows = metrics(run_dir)[2:]
    return (rows[-1]["step"] - rows[0]["step"]) / (rows[-1]["time"] - rows[0]["time"])


def _under_launch(steps: int) -> float:
    directory = workdir("tp-launch")
    spec = builtin_spec("tp", 2, directory / "runs", steps=steps, checkpoint_every=10 * steps, **WIDE)
    assert start_launch(write_spec(directory, spec), cwd=directory).wait() == 0
    rate = _steady_rate(directory / "runs" / "tp")
    shutil.rmtree(directory, ignore_errors=True)
    return rate


def _by_hand(steps: int) -> float:
    directory = workdir("tp-hand")
    spec = builtin_spec("tp", 2, directory / "runs", steps=steps, checkpoint_every=10 * steps, **WIDE)
    assert start_by_hand(plan_by_hand(spec)).wait() == 0
    rate = _steady_rate(directory / "runs" / "tp")
    shutil.rmtree(directory, ignore_errors=True)
    return rate


def run(quick: bool) -> str:
    pairs, steps = (1, 150) if quick else (12, 500)
    launch, hand, ratios = interleaved(lambda: _under_launch(steps), lambda: _by_hand(steps), pairs)
    save(
        "throughput",
        {
            "steps": steps,
            "model": WIDE,
            "launch_steps_per_s": launch,
            "by_hand_steps_per_s": hand,
            "ratios": ratios,
            "target": f">= {TARGET:g}",
        },
        quick,
    )
    return table(
        f"Throughput: 2 workers, {steps} steps of a 512-unit model, steady state (target ratio >= {TARGET:g})",
        [
            ("under launch", summarize(launch), "steps/s"),
            ("by hand", summarize(hand), "steps/s"),
            ("ratio launch / by hand", summarize(ratios), "x"),
        ],
    )
