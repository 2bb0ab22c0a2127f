"""Recovery: SIGKILL (or SIGTERM, a preemption) one worker once the gang is past step K; time from
the signal to the first training step of the new attempt, divided by the cold time from `launch`
to the first step of the same run; steps redone; with warm spares and without, interleaved.

Each run waits, before the signal, until the launcher's status says every spare is ready (with
spares), so the numbers are those of a failure that comes after start-up, as real ones do. The
run is then stopped by an interrupt once the new attempt made its first step, and the restart's
per-phase breakdown is read from summary.json. The memory a waiting spare costs is measured too.

Targets: with spares, recovery <= 0.25x cold (median); without, no regression (<= 1.2x cold); 0 steps
redone after a preemption.
"""

from __future__ import annotations

import json
import shutil
import signal
import statistics
import time
from typing import Any

import psutil

from bench.common import (
    builtin_spec,
    kill_all,
    metrics,
    save,
    spares_ready,
    start_launch,
    summarize,
    table,
    wait_for,
    wait_step,
    workdir,
    worker_processes,
    write_spec,
)
from launcher.supervise.recovery import PHASES

KILL_AT = 40
EVERY = 25
KINDS = {"kill": signal.SIGKILL, "term": signal.SIGTERM}
WARM_TARGET = 0.25  # recovery / cold with warm spares, median
COLD_TARGET = 1.2  # recovery / cold without spares, median


def _spare_memory(launcher_pid: int) -> dict[str, float]:
    """RSS, PSS and USS (MiB) of one waiting spare (a TensorFlow-importing interpreter, not a task yet)."""
    for proc in psutil.Process(launcher_pid).children(recursive=True):
        try:
            if any("tflaunch_spare" in part for part in proc.cmdline()):
                info = proc.memory_full_info()
                return {"rss_mib": info.rss / 2**20, "pss_mib": info.pss / 2**20, "uss_mib": info.uss / 2**20}
        except (psutil.NoSuchProcess, psutil.AccessDenied):  # gone meanwhile: try the next
            continue
    return {}


def _one(kind: str, warm: bool) -> dict[str, Any]:
    directory = workdir("rec")
    spec = builtin_spec("rec", 2, directory / "runs", steps=100_000, checkpoint_every=EVERY, log_every=1)
    spec["restart"]["warm_spares"] = warm
    run_dir = directory / "runs" / "rec"
    launched = time.time()
    proc = start_launch(write_spec(directory, spec), cwd=directory)
    first = wait_step(run_dir, 1)
    wait_step(run_dir, KILL_AT)
    memory: dict[str, float] = {}
    if warm:
        wait_for(lambda: spares_ready(run_dir, 2), 180, "the spares to be ready", poll=0.1)
        memory = _spare_memory(proc.pid)
        worker = worker_processes(run_dir, "worker:0")[0].memory_info().rss / 2**20
        memory["worker_rss_mib"] = worker
    worker_processes(run_dir, "worker:1")[0].send_signal(KINDS[kind])
    signalled = time.time()
    resumed = wait_for(
        lambda: [m for m in metrics(run_dir) if m.get("attempt") == 1], 120, "the new attempt's first step"
    )[0]
    last_before = max(m["step"] for m in metrics(run_dir) if m.get("attempt") == 0)
    proc.send_signal(signal.SIGINT)  # the measurement is over: stop the run (summary.json is written)
    proc.wait(timeout=120)
    kill_all(worker_processes(run_dir, spares=True))
    summary = json.loads((run_dir / "summary.json").read_text())
    recovery = summary["attempts"][1].get("recovery") or {}
    shutil.rmtree(directory, ignore_errors=True)
    cold = first["time"] - launched
    took = resumed["time"] - signalled
    return {
        "cold_s": cold,
        "recovery_s": took,
        "ratio": took / cold,
        "redone": float(max(0, last_before - (resumed["step"] - 1))),
        "warm_tasks": recovery.get("warm_tasks", 0),
        "phases_s": recovery.get("phases_s", {}),
        "memory": memory,
    }


def _median_phase(runs: list[dict[str, Any]], phase: str) -> str:
    values = [r["phases_s"].get(phase) for r in runs]
    known = [v for v in values if v is not None]
    return f"{statistics.median(known):.2f}" if known else "-"


def run(quick: bool) -> str:
    rounds = 1 if quick else 5
    results: dict[str, list[dict[str, Any]]] = {f"{k}-{m}": [] for k in KINDS for m in ("cold", "warm")}
    for _ in range(rounds):  # interleaved: kill cold, kill warm, term cold, term warm, ...
        for kind in KINDS:
            for mode in ("cold", "warm"):
                results[f"{kind}-{mode}"].append(_one(kind, mode == "warm"))
    spares = [r["memory"] for r in results["kill-warm"] + results["term-warm"] if r["memory"].get("rss_mib")]
    save(
        "recovery",
        {
            "kill_at_step": KILL_AT,
            "checkpoint_every": EVERY,
            **results,
            "target": f"with warm spares: recovery / cold <= {WARM_TARGET:g} (median); preemption redoes 0 steps",
        },
        quick,
    )
    rows = []
    for key, label in (
        ("kill-cold", "SIGKILL, cold restart"),
        ("kill-warm", "SIGKILL, warm spares"),
        ("term-cold", "SIGTERM (preemption), cold restart"),
        ("term-warm", "SIGTERM (preemption), warm spares"),
    ):
        runs = results[key]
        rows += [
            (f"{label}: cold launch to first step", summarize([r["cold_s"] for r in runs]), "s"),
            (f"{label}: signal to first step of new attempt", summarize([r["recovery_s"] for r in runs]), "s"),
            (f"{label}: ratio recovery / cold", summarize([r["ratio"] for r in runs]), "x"),
            (f"{label}: steps redone", summarize([r["redone"] for r in runs]), "steps"),
            (f"{label}: tasks that ran in a spare", summarize([float(r["warm_tasks"]) for r in runs]), "of 2"),
        ]
    if spares:
        for name, label in (
            ("rss_mib", "one waiting spare: RSS"),
            ("pss_mib", "one waiting spare: PSS (shared pages split)"),
            ("uss_mib", "one waiting spare: USS (its own pages)"),
            ("worker_rss_mib", "a training worker's RSS, for scale"),
        ):
            rows.append((label, summarize([s[name] for s in spares]), "MiB"))
    text = table(
        f"Recovery: 2 workers, signal after step {KILL_AT}, checkpoint every {EVERY} "
        f"(target with spares: ratio <= {WARM_TARGET:g})",
        rows,
    )
    header = "| restart | " + " | ".join(phase for phase, _ in PHASES) + " |"
    lines = ["", "Where a restart's time goes (median seconds per phase, from summary.json):", "", header]
    lines.append("| --- |" + " ---: |" * len(PHASES))
    for key in results:
        lines.append(f"| {key} | " + " | ".join(_median_phase(results[key], p) for p, _ in PHASES) + " |")
    return text + "\n" + "\n".join(lines)
