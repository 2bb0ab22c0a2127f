"""A host gone for good: three SSH hosts on loopback aliases (stock sshd; the host to lose has an sshd of
its own), the built-in runtime, side by side and interleaved:

- warm restart: SIGKILL to a worker once every warm spare is ready; signal to the new attempt's first step;
- spare: the same gang with a spare host; the lost host's sshd and everything under it killed for good
  once every spare (the spare host's standby too) is ready; kill to the new attempt's first step;
- shrink: the same gang, elastic with min_hosts 2 and no spare; kill to the first step on two hosts;
- cold start: `launch` to the first step of the same three-host gang (measured in every run).

Targets: host loss with a spare <= warm restart + 1 s (median); shrink measured against a cold start.
Needs root (loopback sshd as root); see tests/labs/sshd.py.
"""

from __future__ import annotations

import json
import shutil
import signal
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.common import (
    QUIET_ENV,
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

if TYPE_CHECKING:
    from tests.labs.sshd import SshServer

SPARE_EXTRA_S = 1.0  # host loss with a spare, against a warm restart: at most this much longer
DOOMED = "127.0.0.5"
KILL_AT = 40


def _host(server: SshServer, address: str, port: int) -> dict[str, Any]:
    settings = {"port": server.port, "identity_file": server.identity_file, "known_hosts": server.known_hosts}
    return {"address": address, "workers": 1, "ports": [port], "ssh": settings}


def _spec(mode: str, shared: SshServer, doomed: SshServer, run_root: Path) -> dict[str, Any]:
    from tests.labs.ports import free_port

    hosts = [_host(shared, "127.0.0.2", free_port()), _host(shared, "127.0.0.3", free_port())]
    hosts.append(_host(doomed, DOOMED, free_port()))
    spec: dict[str, Any] = {
        "name": mode,
        "run_root": str(run_root),
        "env": dict(QUIET_ENV),
        "hosts": hosts,
        "training": {"kind": "builtin", "steps": 100_000, "checkpoint_every": 20, "log_every": 1},
        "restart": {"max_restarts": 1, "backoff_s": 0, "warm_spares_after_s": 0},
    }
    if mode == "spare":
        spec["spare_hosts"] = [_host(shared, "127.0.0.4", free_port())]
    if mode == "shrink":
        spec["elastic"] = {"min_hosts": 2}
    return spec


def _one(mode: str, shared: SshServer) -> dict[str, Any]:
    from tests.labs.sshd import start_sshd

    directory = workdir("loss")
    doomed = start_sshd(directory / "doomed-sshd", (DOOMED,))
    run_dir = directory / "runs" / mode
    try:
        launched = time.time()
        proc = start_launch(write_spec(directory, _spec(mode, shared, doomed, directory / "runs")), cwd=directory)
        first = wait_step(run_dir, 1, timeout=180)
        wait_step(run_dir, KILL_AT)
        spares = {"warm": 3, "spare": 4, "shrink": 3}[mode]  # each task's forked spare; a spare host's standby
        wait_for(lambda: spares_ready(run_dir, spares), 180, "the spares to be ready", poll=0.1)
        if mode == "warm":
            lost = time.time()
            worker_processes(run_dir, "worker:1")[0].send_signal(signal.SIGKILL)
        else:
            lost = time.time()
            doomed.stop()  # sshd, the agent and its tasks: the host is gone
        resumed = wait_for(
            lambda: [m for m in metrics(run_dir) if m.get("attempt") == 1], 120, "the new attempt's first step"
        )[0]
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
        summary = json.loads((run_dir / "summary.json").read_text())
        recovery = summary["attempts"][1].get("recovery") or {}
    finally:
        kill_all(worker_processes(run_dir, spares=True))
        doomed.stop()
        shutil.rmtree(directory, ignore_errors=True)
    return {
        "cold_s": first["time"] - launched,
        "recovery_s": resumed["time"] - lost,
        "warm_tasks": recovery.get("warm_tasks", 0),
        "replicas": resumed.get("replicas"),
        "phases_s": recovery.get("phases_s", {}),
    }


def run(quick: bool) -> str:
    from tests.labs.sshd import start_sshd

    rounds = 1 if quick else 3
    results: dict[str, list[dict[str, Any]]] = {"warm": [], "spare": [], "shrink": []}
    directory = workdir("loss-sshd")
    shared = start_sshd(directory / "sshd", ("127.0.0.2", "127.0.0.3", "127.0.0.4"))
    try:
        for _ in range(rounds):  # interleaved: warm, spare, shrink, warm, ...
            for mode in results:
                results[mode].append(_one(mode, shared))
    finally:
        shared.stop()
        shutil.rmtree(directory, ignore_errors=True)
    warm = statistics.median(r["recovery_s"] for r in results["warm"])
    spare = statistics.median(r["recovery_s"] for r in results["spare"])
    cold = statistics.median(r["cold_s"] for runs in results.values() for r in runs)
    save(
        "host_loss",
        {
            **results,
            "spare_minus_warm_s": spare - warm,
            "shrink_over_cold": statistics.median(r["recovery_s"] for r in results["shrink"]) / cold,
            "target": f"host loss with a spare <= warm restart + {SPARE_EXTRA_S:g} s (median)",
        },
        quick,
    )
    rows = [
        (
            "cold start: launch to first step (3 SSH hosts)",
            summarize([r["cold_s"] for rs in results.values() for r in rs]),
            "s",
        ),
        ("warm restart: SIGKILL to first step", summarize([r["recovery_s"] for r in results["warm"]]), "s"),
        (
            "host killed for good, spare: kill to first step",
            summarize([r["recovery_s"] for r in results["spare"]]),
            "s",
        ),
        (
            "host killed for good, shrink to 2: kill to first step",
            summarize([r["recovery_s"] for r in results["shrink"]]),
            "s",
        ),
        ("spare minus warm restart (medians)", summarize([spare - warm]), "s"),
        (
            "shrink / cold start (medians)",
            summarize([statistics.median(r["recovery_s"] for r in results["shrink"]) / cold]),
            "x",
        ),
        (
            "tasks that ran warm after the loss, spare",
            summarize([float(r["warm_tasks"]) for r in results["spare"]]),
            "of 3",
        ),
        (
            "tasks that ran warm after the loss, shrink",
            summarize([float(r["warm_tasks"]) for r in results["shrink"]]),
            "of 2",
        ),
    ]
    return table(
        f"Host loss: 3 SSH hosts on loopback, loss after step {KILL_AT} (target: spare <= warm restart + "
        f"{SPARE_EXTRA_S:g} s)",
        rows,
    )
