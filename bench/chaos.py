"""Chaos: N runs of a 3-worker job, each with one random fault (SIGKILL, SIGTERM, SIGSTOP, exit 1)
on a random worker at a random step. Counts the runs that finished at exactly the last step with
identical weight fingerprints on every worker (and equal to an uninterrupted run's), the steps
redone, and the worker processes left behind (must be 0).
"""

from __future__ import annotations

import json
import random
import shutil
import time
from pathlib import Path
from typing import Any

from bench.common import (
    builtin_spec,
    kill_all,
    save,
    start_launch,
    summarize,
    table,
    workdir,
    worker_processes,
    write_spec,
)

EVERY = 20
FAULTS = ("kill", "term", "hang", "exit=1")


def _spec(directory: Path, name: str, steps: int) -> Path:
    spec = builtin_spec(name, 3, directory / "runs", steps=steps, checkpoint_every=EVERY, log_every=20)
    # spares in play from the first step, so early faults restart into them too
    spec["restart"].update(max_restarts=3, stall_timeout_s=2, warm_spares_after_s=0)
    return write_spec(directory, spec)


def _final(run_dir: Path) -> tuple[set[Any], set[Any], dict[str, Any]]:
    summary = json.loads((run_dir / "summary.json").read_text())
    last = summary["attempts"][-1]["tasks"]
    steps = {(t.get("result") or {}).get("step") for t in last}
    prints = {(t.get("result") or {}).get("fingerprint") for t in last}
    return steps, prints, summary


def run(quick: bool, seed: int = 7) -> str:
    runs, steps = (5, 50) if quick else (20, 100)
    rng = random.Random(seed)
    directory = workdir("chaos")
    assert start_launch(_spec(directory, "reference", steps), cwd=directory).wait() == 0
    _, reference, _ = _final(directory / "runs" / "reference")
    records = []
    for number in range(runs):
        fault, task, step = rng.choice(FAULTS), f"worker:{rng.randrange(3)}", rng.randrange(10, steps - 10)
        name = f"chaos{number}"
        started = time.monotonic()
        code = start_launch(
            _spec(directory, name, steps), "--inject", f"{fault}:{task}@step={step}", cwd=directory
        ).wait(timeout=600)
        run_dir = directory / "runs" / name
        steps_seen, prints, summary = _final(run_dir)
        left = worker_processes(run_dir, spares=True)
        kill_all(left)
        resumed = [t for t in summary["attempts"][1]["tasks"]] if len(summary["attempts"]) > 1 else []
        start_step = min(((t.get("result") or {}).get("start_step", step) for t in resumed), default=step)
        records.append(
            {
                "fault": fault,
                "task": task,
                "step": step,
                "exit": code,
                "attempts": len(summary["attempts"]),
                "reasons": [a["reason"] for a in summary["attempts"]],  # why each attempt ended
                "exact": code == 0 and steps_seen == {steps} and len(prints) == 1 and prints == reference,
                "redone": max(0, step - start_step),
                "leftover": len(left),
                "warm_tasks": sum((a.get("recovery") or {}).get("warm_tasks", 0) for a in summary["attempts"]),
                "seconds": time.monotonic() - started,
            }
        )
    shutil.rmtree(directory, ignore_errors=True)
    exact = sum(r["exact"] for r in records)
    left = sum(r["leftover"] for r in records)
    save("chaos", {"seed": seed, "runs": records, "exact": exact, "leftover_processes": left}, quick)
    lines = [
        table(
            f"Chaos: {runs} runs of 3 workers x {steps} steps, checkpoint every {EVERY}, one random fault each",
            [
                ("steps redone", summarize([float(r["redone"]) for r in records]), "steps"),
                ("run time", summarize([r["seconds"] for r in records]), "s"),
            ],
        ),
        "",
        f"Finished at exactly step {steps} with identical fingerprints equal to an uninterrupted run: "
        f"**{exact}/{runs}**. Worker processes (warm spares included) left behind: **{left}**.",
        "",
        "| fault | worker | step | attempts | exact | redone | tasks restarted in a warm spare |",
        "| --- | --- | ---: | ---: | --- | ---: | ---: |",
    ]
    lines += [
        f"| {r['fault']} | {r['task']} | {r['step']} | {r['attempts']} | {'yes' if r['exact'] else 'NO'} | "
        f"{r['redone']} | {r['warm_tasks']} |"
        for r in records
    ]
    return "\n".join(lines)
