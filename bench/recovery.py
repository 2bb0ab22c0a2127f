"""Recovery: SIGKILL (or SIGTERM, a preemption) one worker at step K; time from the signal to the
first training step of the new attempt, divided by the cold time from `launch` to the first step,
and the number of steps redone.

Targets: ratio <= 1.2; 0 steps redone after a preemption.
"""

from __future__ import annotations

import shutil
import signal
import time

from bench.common import (
    builtin_spec,
    kill_all,
    metrics,
    save,
    start_launch,
    summarize,
    table,
    wait_for,
    wait_step,
    workdir,
    worker_processes,
    write_spec,
)

KILL_AT = 40


def _one(signum: int) -> dict[str, float]:
    directory = workdir("rec")
    spec = builtin_spec("rec", 2, directory / "runs", steps=KILL_AT + 40, checkpoint_every=25, log_every=1)
    run_dir = directory / "runs" / "rec"
    launched = time.time()
    proc = start_launch(write_spec(directory, spec), cwd=directory)
    first = wait_step(run_dir, 1)
    wait_step(run_dir, KILL_AT)
    worker_processes(run_dir, "worker:1")[0].send_signal(signum)
    signalled = time.time()
    resumed = wait_for(
        lambda: [m for m in metrics(run_dir) if m.get("attempt") == 1], 120, "the new attempt's first step"
    )[0]
    code = proc.wait(timeout=120)
    assert code == 0, f"launch exited {code}"
    last_before = max(m["step"] for m in metrics(run_dir) if m.get("attempt") == 0)
    start_step = resumed["step"] - 1
    kill_all(worker_processes(run_dir))
    shutil.rmtree(directory, ignore_errors=True)
    cold = first["time"] - launched
    recovery = resumed["time"] - signalled
    return {
        "cold_s": cold,
        "recovery_s": recovery,
        "ratio": recovery / cold,
        "redone": float(max(0, last_before - start_step)),
    }


def run(quick: bool) -> str:
    runs = 1 if quick else 5
    results: dict[str, list[dict[str, float]]] = {"kill": [], "term": []}
    for _ in range(runs):  # interleaved: kill, term, kill, term ...
        results["kill"].append(_one(signal.SIGKILL))
        results["term"].append(_one(signal.SIGTERM))
    save(
        "recovery",
        {
            "kill_at_step": KILL_AT,
            "checkpoint_every": 25,
            **results,
            "target": "ratio <= 1.2; preemption redoes 0 steps",
        },
    )
    rows = []
    for kind, label in (("kill", "SIGKILL"), ("term", "SIGTERM (preemption)")):
        rows += [
            (f"{label}: cold launch to first step", summarize([r["cold_s"] for r in results[kind]]), "s"),
            (f"{label}: signal to first step of new attempt", summarize([r["recovery_s"] for r in results[kind]]), "s"),
            (f"{label}: ratio recovery / cold", summarize([r["ratio"] for r in results[kind]]), "x"),
            (f"{label}: steps redone", summarize([r["redone"] for r in results[kind]]), "steps"),
        ]
    return table(f"Recovery: 2 workers, signal at step {KILL_AT}, checkpoint every 25 (target ratio <= 1.2)", rows)
