"""Launch overhead: wall time of `launch` for a short 2-worker job vs the same workers by hand.

Target: ratio <= 1.05. The baseline is bench/by_hand.py: a minimal script, handed the plan ready-made,
that sets TF_CONFIG and starts both workers. Both sides pay one interpreter start; `launch` also
validates the spec, plans, and supervises. The launch runs twice per round, side by side: as users
get it (its tasks in a private network, launcher/transport/local_network.py) and with
`local_network: "host"` (the machine's network, as by hand), so the isolation's own cost shows.
Each of the three goes first in turn, round by round.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable

from bench.common import (
    builtin_spec,
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


def _under_launch(steps: int, network: str = "private") -> float:
    directory = workdir("ovh-launch")
    spec = builtin_spec("ovh", 2, directory / "runs", steps=steps, checkpoint_every=10_000, log_every=10_000)
    spec["local_network"] = network
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
    pairs, steps = (1, 10) if quick else (9, 30)
    sides: dict[str, Callable[[], float]] = {
        "private": lambda: _under_launch(steps),
        "host": lambda: _under_launch(steps, "host"),
        "hand": lambda: _by_hand(steps),
    }
    took: dict[str, list[float]] = {side: [] for side in sides}
    order = list(sides)
    for round_ in range(pairs):  # private, host network, by hand side by side, each first in turn
        for side in order[round_ % 3 :] + order[: round_ % 3]:
            took[side].append(sides[side]())
    launch, open_, hand = took["private"], took["host"], took["hand"]
    ratios = [private / by_hand for private, by_hand in zip(launch, hand, strict=True)]
    open_ratios = [host / by_hand for host, by_hand in zip(open_, hand, strict=True)]
    isolation = [private / host for private, host in zip(launch, open_, strict=True)]
    save(
        "overhead",
        {
            "steps": steps,
            "launch_s": launch,
            "by_hand_s": hand,
            "ratios": ratios,
            "host_network_s": open_,
            "host_network_ratios": open_ratios,
            "isolation_ratios": isolation,
            "target": f"<= {TARGET:g}",
        },
        quick,
    )
    return table(
        f"Launch overhead: 2 workers, {steps} steps (target ratio <= {TARGET:g})",
        [
            ("launch wall time (private network)", summarize(launch), "s"),
            ("launch wall time (local_network host)", summarize(open_), "s"),
            ("by hand wall time", summarize(hand), "s"),
            ("ratio launch / by hand", summarize(ratios), "x"),
            ("ratio launch (host network) / by hand", summarize(open_ratios), "x"),
            ("ratio private / host network", summarize(isolation), "x"),
        ],
    )
