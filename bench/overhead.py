"""Launch overhead: wall time of `launch` for a short 2-worker job vs the same workers by hand.

Target: ratio <= 1.05. The by-hand baseline runs in this process (no interpreter start-up of its
own), which makes it the strictest possible comparison.
"""

from __future__ import annotations

import shutil
import time

from bench.common import builtin_spec, plan_by_hand, save, start_by_hand, start_launch, summarize, table, workdir, write_spec


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
    started = time.monotonic()
    codes = [p.wait() for p in start_by_hand(plan_by_hand(spec))]
    elapsed = time.monotonic() - started
    shutil.rmtree(directory, ignore_errors=True)
    assert codes == [0, 0], f"workers exited {codes}"
    return elapsed


def run(quick: bool) -> str:
    pairs, steps = (1, 10) if quick else (5, 30)
    launch, hand, ratios = [], [], []
    for _ in range(pairs):
        a = _under_launch(steps)
        b = _by_hand(steps)
        launch.append(a)
        hand.append(b)
        ratios.append(a / b)
    save("overhead", {"steps": steps, "launch_s": launch, "by_hand_s": hand, "ratios": ratios, "target": "<= 1.05"})
    return table(f"Launch overhead: 2 workers, {steps} steps (target ratio <= 1.05)", [
        ("launch wall time", summarize(launch), "s"),
        ("by hand wall time", summarize(hand), "s"),
        ("ratio launch / by hand", summarize(ratios), "x"),
    ])
