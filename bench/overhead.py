"""Launch overhead: wall time of `launch` for a short 2-worker job vs the same workers by hand.

Target: ratio <= 1.05. The baseline is bench/by_hand.py: a minimal script, handed the plan ready-made,
that sets TF_CONFIG and starts both workers. Both sides pay one interpreter start; `launch` also
validates the spec, plans, and supervises.
"""

from __future__ import annotations

import shutil
import time

from bench.common import (
    builtin_spec,
    interleaved,
    plan_by_hand,
    save,
    start_by_hand,
    start_launch,
    summarize,
    table,
    workdir,
    write_spec,
)

TARGET = 1.05  # launch / by hand, median of the pairs


def _under_launch(steps: int) -> float:
    directory = workdir("ovh-launch")
    spec = builtin_spec("ovh", 2, directory / "runs", steps=steps, checkpoint_every=10_000, log_every=10_000)
    path = write_spec(directory, spec)
    started = time.monotonic()
    code = start_launch(path, cwd=directory).wait()
    elapsed = time.monotonic() - started
    shutil.rmtree(directory, ignore_errors=True)
    assert code == 0, f"launch exited {code}"
    return elapsed


def _by_hand(steps: int) -> float:
    directory = workdir("ovh-hand")
    spec = builtin_spec("ovh", 2, directory / "runs", steps=steps, checkpoint_every=10_000, log_every=10_000)
    plan = plan_by_hand(spec)  # computed before the clock starts: the script gets it ready-made
    started = time.monotonic()
    code = start_by_hand(plan).wait()
    elapsed = time.monotonic() - started
    shutil.rmtree(directory, ignore_errors=True)
    assert code == 0, f"a worker exited {code}"
    return elapsed


def run(quick: bool) -> str:
    pairs, steps = (1, 10) if quick else (7, 30)
    launch, hand, ratios = interleaved(lambda: _under_launch(steps), lambda: _by_hand(steps), pairs)
    save(
        "overhead",
        {"steps": steps, "launch_s": launch, "by_hand_s": hand, "ratios": ratios, "target": f"<= {TARGET:g}"},
        quick,
    )
    return table(
        f"Launch overhead: 2 workers, {steps} steps (target ratio <= {TARGET:g})",
        [
            ("launch wall time", summarize(launch), "s"),
            ("by hand wall time", summarize(hand), "s"),
            ("ratio launch / by hand", summarize(ratios), "x"),
        ],
    )
