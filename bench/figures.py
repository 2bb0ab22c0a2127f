"""BENCHMARKS.md, made from the stored results: one table of the current figure of every target.

`python -m bench.figures` rewrites the page from bench/results/<name>.json without running anything;
`python -m bench` does so at the end of every run that is not --quick. Each figure is computed as
the benchmark's own table computes it (medians over the interleaved pairs), against the targets the
benchmark's module states.

The page names the commit that stored each results file, so it is rewritten once the results are
committed: a results file with changes not committed yet is shown as "uncommitted".
"""

from __future__ import annotations

import itertools
import json
import subprocess
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import fanout, fleet, host_loss, memory, overhead, recovery, scale, teardown, throughput
from bench.common import ORDER, RESULTS, ROOT, summarize

PAGE = ROOT / "BENCHMARKS.md"
UNCOMMITTED = "uncommitted"
KIND_NAMES = {"kill": "SIGKILL", "term": "preemption"}  # recovery's signals, as the page names them

Results = dict[str, Any]  # one benchmark's JSON
CommitOf = Callable[[Path], str]  # a results file -> the commit that stored it


@dataclass(frozen=True)
class Row:
    """One target of a benchmark and its latest figure; `met` is None for a figure only reported."""

    target: str
    latest: str
    met: bool | None


# ---- figures, one function per benchmark ---------------------------------------------------------


def _median(values: Iterable[float]) -> float:
    return summarize(list(values))["median"]


def _x(ratio: float) -> str:
    return f"{ratio:.3f}x"


def _s(seconds: float) -> str:
    return f"{seconds:.3f} s" if seconds < 1 else f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.1f} s"


def _overhead(data: Results) -> list[Row]:
    ratio = _median(data["ratios"])
    latest = f"{_x(ratio)} ({_s(_median(data['launch_s']))} against {_s(_median(data['by_hand_s']))} by hand)"
    target = f"wall time of a {data['steps']}-step 2-worker job <= {overhead.TARGET:g}x by hand"
    rows = [Row(target, latest, ratio <= overhead.TARGET)]
    if data.get("isolation_ratios"):
        rows.append(
            Row(
                "the private network's own cost: the same launch with local_network host, side by side (reported)",
                f"private / host network {_x(_median(data['isolation_ratios']))} "
                f"(host network {_s(_median(data['host_network_s']))}, "
                f"{_x(_median(data['host_network_ratios']))} by hand)",
                None,
            )
        )
    return rows


def _teardown(data: Results) -> list[Row]:
    crash = _median(data["crash_launch"])
    rows = [
        Row(
            f"every other worker gone <= {teardown.TARGET_S:g} s after a crash",
            f"{_s(crash)} (TensorFlow's survivors by hand: {_s(_median(data['crash_by_hand']))})",
            crash <= teardown.TARGET_S,
        )
    ]
    if data["hang_launch"]:
        by_hand = f" (by hand: {_s(_median(data['hang_by_hand']))})" if data["hang_by_hand"] else ""
        rows.append(
            Row(
                f"every worker gone after a hang, stall_timeout_s = {data['stall_timeout_s']:g} (reported)",
                f"{_s(_median(data['hang_launch']))}{by_hand}",
                None,
            )
        )
    return rows


def _recovery_medians(data: Results, mode: str, key: str) -> dict[str, float]:
    """Per kind of signal, the median of one figure over the runs of `mode` (cold or warm)."""
    return {kind: _median(run[key] for run in data[f"{kind}-{mode}"]) for kind in recovery.KINDS}


def _by_kind(values: dict[str, float], show: Callable[[float], str]) -> str:
    return ", ".join(f"{KIND_NAMES[kind]} {show(value)}" for kind, value in values.items())


def _recovery(data: Results) -> list[Row]:
    warm, cold = _recovery_medians(data, "warm", "ratio"), _recovery_medians(data, "cold", "ratio")
    took = _recovery_medians(data, "warm", "recovery_s")
    preempted = [run["redone"] for mode in ("cold", "warm") for run in data[f"term-{mode}"]]
    rows = [
        Row(
            f"with warm spares: signal to the new attempt's first step <= {recovery.WARM_TARGET:g}x cold launch to "
            "first step",
            f"{_by_kind(warm, _x)} ({' and '.join(_s(value) for value in took.values())} after the signal)",
            max(warm.values()) <= recovery.WARM_TARGET,
        ),
        Row(
            f"without spares: <= {recovery.COLD_TARGET:g}x cold launch to first step",
            _by_kind(cold, _x),
            max(cold.values()) <= recovery.COLD_TARGET,
        ),
        Row(
            "0 steps redone after a preemption",
            f"{sum(steps == 0 for steps in preempted)} of {len(preempted)} runs redid none",
            not any(preempted),
        ),
    ]
    spares = [run["memory"] for run in data["kill-warm"] + data["term-warm"] if run["memory"].get("rss_mib")]
    if spares:
        rss, uss = _median(s["rss_mib"] for s in spares), _median(s["uss_mib"] for s in spares)
        rows.append(Row("memory of one waiting spare (reported)", f"{rss:.0f} MiB RSS, {uss:.0f} MiB its own", None))
    return rows


def _host_loss(data: Results) -> list[Row]:
    warm = _median(run["recovery_s"] for run in data["warm"])
    spare = _median(run["recovery_s"] for run in data["spare"])
    shrink = _median(run["recovery_s"] for run in data["shrink"])
    cold = _median(run["cold_s"] for mode in ("warm", "spare", "shrink") for run in data[mode])
    return [
        Row(
            f"host killed for good, with a spare: to the new attempt's first step <= warm restart + "
            f"{host_loss.SPARE_EXTRA_S:g} s",
            f"{_s(spare)} against {_s(warm)} ({spare - warm:+.2f} s)",
            spare - warm <= host_loss.SPARE_EXTRA_S,
        ),
        Row(
            "without a spare, elastic: shrink to 2 hosts, against a cold start",
            f"{_s(shrink)}, {_x(shrink / cold)}",
            None,
        ),
    ]


def _throughput(data: Results) -> list[Row]:
    ratio = _median(data["ratios"])
    launch, hand = _median(data["launch_steps_per_s"]), _median(data["by_hand_steps_per_s"])
    return [
        Row(
            f"steady-state steps/s >= {throughput.TARGET:g}x by hand (warm spares on)",
            f"{_x(ratio)} ({launch:.0f} against {hand:.0f} steps/s)",
            ratio >= throughput.TARGET,
        )
    ]


def _checkpoint(data: Results) -> list[Row]:
    blocked, steps = _median(data["save_s"]), _median(data["ratios"])
    size = _median(data["bytes_per_save"]) / 1e6
    return [
        Row(
            f"time a save blocks training, and its size, {data['parameters'] / 1e6:.1f} M parameters + Adam (reported)",
            f"{_s(blocked)} = {steps:.2f} steps; {size:.1f} MB per save",
            None,
        )
    ]


def _chaos(data: Results) -> list[Row]:
    runs, exact, left = len(data["runs"]), data["exact"], data["leftover_processes"]
    return [
        Row(
            "every run with a random fault ends at exactly its last step with an uninterrupted run's weights",
            f"{exact} of {runs} runs",
            exact == runs,
        ),
        Row("0 processes left, warm spares included", f"{left}", left == 0),
    ]


def _memory(data: Results) -> list[Row]:
    training, flood = data["training"]["launcher_mb"], data["flood"]["launcher_mb"]
    return [
        Row(
            f"launcher peak RSS < {memory.LAUNCHER_MIB:g} MiB with 3 tasks",
            f"{training:.1f} MiB with 3 TF workers, {flood:.1f} MiB with 3 tasks printing "
            f"{data['flood']['lines_per_task']:,} lines each",
            max(training, flood) < memory.LAUNCHER_MIB,
        )
    ]


def _fanout_sizes(data: Results) -> list[int]:
    """The target sizes this run measured (an older run measured fewer)."""
    return [size for size in fanout.TARGET_SIZES if str(size) in data]


def _fanout_medians(data: Results, key: str) -> dict[int, float]:
    return {size: _median(data[str(size)][key]) for size in _fanout_sizes(data) if key in data[str(size)]}


def _at_sizes(values: dict[int, float], show: Callable[[float], str]) -> str:
    return ", ".join(f"{show(value)} at {size}" for size, value in values.items()) + " hosts"


def _fanout(data: Results) -> list[Row]:
    sizes = ", ".join(str(size) for size in _fanout_sizes(data))
    up, down = _fanout_medians(data, "ratios"), _fanout_medians(data, "launch_down")
    rss = _fanout_medians(data, "rss_mib")
    threads = _fanout_medians(data, "threads")
    largest = _fanout_sizes(data)[-1]
    left = _median(data[str(largest)]["plain_leftovers"])
    # "plus a constant": the threads beyond THREADS_PER_HOST a host may grow from one size to the next
    # by no more than one host's worth
    over = {size: count - fanout.THREADS_PER_HOST * size for size, count in threads.items()}
    per_host = max(count / size for size, count in threads.items())
    steady = all(b - a <= fanout.THREADS_PER_HOST for a, b in itertools.pairwise(over.values()))
    limits = ", ".join(f"< {mib:g} MiB at {size}" for size, mib in fanout.RSS_MIB.items() if size in rss)
    rows = [
        Row(
            f"start-up <= {fanout.START_RATIO:g}x plain ssh, {sizes} hosts",
            _at_sizes(up, _x),
            max(up.values()) <= fanout.START_RATIO,
        ),
        Row(
            f"stop to every process on the hosts gone (tasks, agents, keepers) < {fanout.TEARDOWN_S:g} s",
            f"{_at_sizes(down, _s)} (plain ssh left {left:.0f} of {largest} remote commands running)",
            max(down.values()) < fanout.TEARDOWN_S,
        ),
        Row(
            f"launcher peak RSS {limits}",
            _at_sizes(rss, lambda v: f"{v:.1f} MiB"),
            all(value < fanout.RSS_MIB[size] for size, value in rss.items()),
        ),
        Row(
            f"launcher threads <= {fanout.THREADS_PER_HOST} per host plus a constant",
            f"{_at_sizes(threads, lambda v: f'{v:.0f}')}: {per_host:.2f} per host at most",
            steady,
        ),
    ]
    total, total_rss = _fanout_medians(data, "total_threads"), _fanout_medians(data, "total_rss_mib")
    if total and total_rss:
        relays = ", ".join(f"{data[str(size)]['relays']:.0f} at {size}" for size in total)
        rss_text = _at_sizes(total_rss, lambda v: f"{v:.1f} MiB")
        rows.append(
            Row(
                "the launcher and its SSH relays together: peak RSS and threads (reported)",
                f"{rss_text}; {_at_sizes(total, lambda v: f'{v:.0f} threads')} (relays: {relays})",
                None,
            )
        )
    projected = data.get("projection")
    if projected:
        per_host = ", ".join(f"{name.replace('_', ' ')} {ms:.1f} ms" for name, ms in projected["per_host_ms"].items())
        rows.append(
            Row(
                f"{projected['hosts']:,} hosts, projected from the measured CPU per host (reported)",
                f"<= {fanout.START_RATIO:g}x plain ssh on launching machines of up to {projected['holds_up_to_cores']} "
                f"cores ({per_host})",
                None,
            )
        )
    return rows


def _scale(data: Results) -> list[Row]:
    many, fixed = _median(data["many"]["ratio"]), _median(data["fixed"]["extra_s"])
    peaks = data["line_peak_rss_mib"]
    return [
        Row(
            f"{data['many']['tasks']:,} trivial local tasks <= {scale.MANY_RATIO:g}x by hand",
            f"{_x(many)} ({_s(_median(data['many']['launch_s']))} against {_s(_median(data['many']['by_hand_s']))})",
            many <= scale.MANY_RATIO,
        ),
        Row(
            f"fixed cost of a trivial 2-task launch <= +{scale.FIXED_S:g} s",
            f"+{fixed:.3f} s ({_s(_median(data['fixed']['launch_s']))} against "
            f"{_s(_median(data['fixed']['by_hand_s']))})",
            fixed <= scale.FIXED_S,
        ),
        Row(
            f"one {scale.LINE_BYTES >> 20} MiB line: launcher peak RSS < {scale.LINE_MIB:g} MiB",
            ", ".join(f"{peak:.1f} MiB ({where} line)" for where, peak in peaks.items()),
            max(peaks.values()) < scale.LINE_MIB,
        ),
    ]


def _fleet_traffic(data: Results, hosts: int, per_host: int) -> dict[str, Any]:
    (found,) = [row for row in data["traffic"][str(per_host)] if row["hosts"] == hosts]
    return dict(found)


def _fleet(data: Results) -> list[Row]:
    names = [fleet.fleet_name(*shape) for shape in fleet.FLEETS]
    plan = {name: fleet.planning_medians(data["planning"][name]) for name in names}
    sent = {name: _fleet_traffic(data, *shape) for name, shape in zip(names, fleet.FLEETS, strict=True)}
    spread = {
        name: data["linearity_spread"][str(per_host)] for name, (_, per_host) in zip(names, fleet.FLEETS, strict=True)
    }
    one_host = {name: (sent[name]["to_one_host"], sent[name]["slurm_input"]) for name in names}

    def each(show: Callable[[str], str]) -> str:
        return "; ".join(f"{name}: {show(name)}" for name in names)

    def to_one_host(name: str) -> str:
        ssh, slurm = (fleet.human_bytes(count) for count in one_host[name])
        return f"SSH {ssh}, Slurm {slurm}"

    return [
        Row(
            f"validate + plan <= {fleet.PLAN_S:g} s",
            each(lambda n: _s(plan[n][0])),
            max(p[0] for p in plan.values()) <= fleet.PLAN_S,
        ),
        Row(
            f"planning peak RSS <= {fleet.PLAN_MIB:g} MiB",
            each(lambda n: f"{plan[n][1]:.1f} MiB"),
            max(p[1] for p in plan.values()) <= fleet.PLAN_MIB,
        ),
        Row(
            f"<= {fleet.HOST_BYTES / 2**20:g} MiB sent to one host (SSH) or read by one Slurm node",
            each(to_one_host),
            max(max(counts) for counts in one_host.values()) <= fleet.HOST_BYTES,
        ),
        Row(
            f"total bytes linear in tasks: bytes per added task within {fleet.LINEAR:.0%}",
            each(lambda n: f"SSH {spread[n]['ssh']:.1%}, Slurm {spread[n]['slurm']:.1%}"),
            max(max(s.values()) for s in spread.values()) <= fleet.LINEAR,
        ),
    ]


FIGURES: dict[str, Callable[[Results], list[Row]]] = {
    "overhead": _overhead,
    "teardown": _teardown,
    "recovery": _recovery,
    "host_loss": _host_loss,
    "throughput": _throughput,
    "checkpoint": _checkpoint,
    "chaos": _chaos,
    "memory": _memory,
    "fanout": _fanout,
    "scale": _scale,
    "fleet": _fleet,
}


# ---- the page -------------------------------------------------------------------------------------

NAMES = {
    "overhead": "launch overhead",
    "teardown": "teardown",
    "recovery": "recovery",
    "host_loss": "host loss",
    "throughput": "throughput",
    "checkpoint": "checkpoint cost",
    "chaos": "chaos",
    "memory": "launcher memory",
    "fanout": "SSH fan-out",
    "scale": "scale and bounds",
    "fleet": "simulated fleets",
}

BASELINES = {
    "overhead": (
        "`bench/by_hand.py`: a minimal script that sets TF_CONFIG and starts both workers",
        "the launcher must cost almost nothing on top of the job",
    ),
    "teardown": (
        "the same workers with no launcher: how long TensorFlow's own survivors take to exit",
        "survivors of a crash hold GPUs and ports, for minutes if nothing stops them",
    ),
    "recovery": (
        "the cold time from `launch` to the first training step of the same run",
        "a failure should cost what a restart cannot avoid, not Python's and TensorFlow's start-up again",
    ),
    "host_loss": (
        "a warm restart of the same three SSH hosts (SIGKILL to a worker), and a cold start of them",
        "a host gone for good should cost what a warm restart costs, not the rest of the run",
    ),
    "throughput": (
        "the same job (the example with a 512-unit model) started by hand",
        "streaming logs, supervising and standing by must not slow the workers",
    ),
    "checkpoint": ("one training step", "how long a save holds training up, and its size on disk"),
    "chaos": (
        "an uninterrupted run of the same job",
        "a random kill, exit, SIGTERM or hang must cost neither correctness nor a stray process",
    ),
    "memory": ("one TensorFlow worker, for scale", "the launcher must fit next to the workers"),
    "fanout": (
        "N plain `ssh host cmd` started in parallel, on network-namespace hosts with their own sshd (needs root)",
        "reaching a fleet should take about as long as a shell loop, and stopping it must leave nothing",
    ),
    "scale": (
        "the same processes started by hand from one script",
        "the launcher's cost must not grow with the tasks, with a line's length, or with its own start-up",
    ),
    "fleet": (
        "none: the planner alone, in a fresh interpreter, and the bytes the transport would send",
        "a plan is made at every attempt; what is sent must grow with the fleet, not with its square",
    ),
}


def load(results: Path = RESULTS) -> dict[str, Results]:
    """Every benchmark's stored results, in ORDER."""
    found = {}
    for name in ORDER:
        path = results / f"{name}.json"
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing: run `python -m bench {name}`")
        found[name] = json.loads(path.read_text())
    return found


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def committed_in(path: Path) -> str:
    """The short commit that stored `path` as it is now, or "uncommitted" (no git here, the file is
    not tracked, or it has changes not committed yet)."""
    try:
        changed = _git("status", "--porcelain", "--", str(path))
        commit = _git("log", "-1", "--format=%H", "--", str(path))
    except (OSError, subprocess.CalledProcessError):
        return UNCOMMITTED
    return commit[:7] if commit and not changed else UNCOMMITTED


def _machine(data: dict[str, Results]) -> str:
    """The machines the results come from, in words (`platform` without the kernel's build tag)."""
    described: dict[str, list[str]] = {}
    for name, results in data.items():
        found = results["machine"]
        parts = str(found["platform"]).split("-")
        words = f"{found['cpus']} CPUs, {found['memory_gib']:g} GiB of memory, Python {found['python']}, "
        words += " ".join(parts[:2])
        if "with" in parts[2:]:
            words += f" ({parts[parts.index('with') - 1]})"
        described.setdefault(words, []).append(name)
    if len(described) == 1:
        return f"a machine with {next(iter(described))}"
    return "these machines: " + "; ".join(f"{words} ({', '.join(names)})" for words, names in described.items())


def _intro(data: dict[str, Results]) -> list[str]:
    return [
        "# Benchmarks",
        "",
        "<!-- Written by `python -m bench.figures` from bench/results/: edit bench/figures.py, not this page. -->",
        "",
        "Each benchmark runs `launch` and a baseline side by side, each first in turn (A B, B A, ...), and",
        "reports their ratio or difference: absolute times drift between runs, ratios much less. The figures",
        f"below are from each benchmark's newest full run, on {_machine(data)}.",
        "",
        "Run them with the project installed (see README) and nothing else running on the machine:",
        "",
        "```bash",
        "python -m bench                     # every benchmark, about half an hour on 2 cores; then rewrites this page",
        "python -m bench --quick             # fewer pairs and shorter jobs, a few minutes; leaves this page as it is",
        "python -m bench recovery teardown   # some of them, by name",
        "python -m bench.figures             # rewrites this page from the stored results, running nothing",
        "```",
    ]


def _table(data: dict[str, Results], results: Path, commit_of: CommitOf) -> list[str]:
    lines = [
        "| benchmark | target | latest | met | measured | command |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name in ORDER:
        measured = f"{str(data[name]['time']).split()[0]}, {commit_of(results / f'{name}.json')}"
        for row in FIGURES[name](data[name]):
            met = "—" if row.met is None else "yes" if row.met else "no"
            lines.append(
                f"| {NAMES[name]} | {row.target} | {row.latest} | {met} | {measured} | `python -m bench {name}` |"
            )
    return lines


def _spread(values: Collection[float], spec: str, unit: str = "") -> str:
    """One figure, or the range of several when they do not show alike: `spec` formats a number."""
    low, high = (format(value, spec) for value in (min(values), max(values)))
    return f"{low}{unit}" if low == high else f"{low}-{high}{unit}"


def _costs(data: dict[str, Results]) -> list[str]:
    """What a user pays: at start-up, while training, at a crash, at a checkpoint."""
    over, thr, fixed = data["overhead"], data["throughput"], data["scale"]["fixed"]
    launch, hand = _median(over["launch_s"]), _median(over["by_hand_s"])
    down = data["teardown"]
    ckpt = data["checkpoint"]
    return [
        f"While the workers train, their steps run at {_median(thr['ratios']):.2f}x the speed of the same workers "
        f"started by hand. What `launch` adds is mostly at start-up and exit: {launch - hand:.1f} s on a "
        f"{hand:.0f}-second 2-worker job here ({_x(_median(over['ratios']))}), +{_median(fixed['extra_s']):.2f} s on "
        "a trivial one; a job of hours does not notice it.",
        f"When a worker crashes, `launch` has the others gone in {_s(_median(down['crash_launch']))}, so their GPUs, "
        f"memory and ports are free again at once; TensorFlow's survivors, left alone, took "
        f"{_s(_median(down['crash_by_hand']))} and up to {_s(max(down['crash_by_hand']))}. A hung worker is "
        f"noticed once the gang has reported no step for `stall_timeout_s`: with {down['stall_timeout_s']:g} s, every "
        f"worker was gone {_s(_median(down['hang_launch']))} after the hang began.",
        f"A checkpoint of {ckpt['parameters'] / 1e6:.1f} M parameters with Adam holds training up for "
        f"{_s(_median(ckpt['save_s']))} ({_median(ckpt['ratios']):.1f} steps) and writes "
        f"{_median(ckpt['bytes_per_save']) / 1e6:.0f} MB: `checkpoint_every` sets how often that is paid, and how "
        "many steps a crash can cost.",
    ]


def _recovery_words(data: dict[str, Results]) -> list[str]:
    rec, chaos = data["recovery"], data["chaos"]
    warm = _spread([100 * ratio for ratio in _recovery_medians(rec, "warm", "ratio").values()], ".0f", "%")
    took = _spread(_recovery_medians(rec, "warm", "recovery_s").values(), ".2f", " s")
    cold_start = _spread(_recovery_medians(rec, "warm", "cold_s").values(), ".1f", " s")
    cold = _spread(_recovery_medians(rec, "cold", "ratio").values(), ".2f", "x")
    killed = _median(run["redone"] for mode in ("cold", "warm") for run in rec[f"kill-{mode}"])
    preempted = max(run["redone"] for mode in ("cold", "warm") for run in rec[f"term-{mode}"])
    redid = "no steps" if preempted == 0 else f"up to {preempted:.0f} steps"
    return [
        f"With warm spares (the default), a restart after a crash or a preemption costs {warm} of a cold start: "
        f"the new attempt's first step came {took} after the signal, against {cold_start} from `launch` to the "
        f"first step. Without spares it costs about a cold start ({cold}). A preemption redid {redid}; a crash "
        f"redoes the steps since the last checkpoint ({killed:.0f} here, with one every {rec['checkpoint_every']} "
        "steps).",
        f"In {len(chaos['runs'])} runs with one random fault each (a kill, a SIGTERM, a hang or an exit with an "
        f"error, on a random worker at a random step), {chaos['exact']} ended at exactly their last step with the "
        f"weights of an uninterrupted run, and {chaos['leftover_processes']} processes were left behind.",
    ]


def _size_words(data: dict[str, Results]) -> list[str]:
    mem, lines, far = data["memory"], data["scale"]["line_peak_rss_mib"], data["fanout"]
    peaks = [mem["training"]["launcher_mb"], mem["flood"]["launcher_mb"], *lines.values()]
    hosts = _fanout_sizes(far)[-1]
    shape = max(fleet.FLEETS)
    name = fleet.fleet_name(*shape)
    plan_s = fleet.planning_medians(data["fleet"]["planning"][name])[0]
    return [
        f"The launcher's own memory stayed at {_spread(peaks, '.0f', ' MiB')} whatever the tasks "
        f"printed ({mem['flood']['lines_per_task']:,} lines each, or one {scale.LINE_BYTES >> 20} MiB line); one "
        f"TensorFlow worker takes {mem['training']['task_mb']:.0f} MiB.",
        f"Over SSH, `launch` had a task up on each of {hosts} hosts in {_s(_median(far[str(hosts)]['launch_up']))} "
        f"({_x(_median(far[str(hosts)]['ratios']))} plain `ssh host cmd` started in parallel) and every process it "
        f"started there gone "
        f"{_s(_median(far[str(hosts)]['launch_down']))} after its stop; plain ssh leaves the remote commands "
        f"running. Planning {shape[0]:,} hosts takes {_s(plan_s)}.",
    ]


def _meanings(data: dict[str, Results]) -> list[str]:
    cpus = sorted({str(results["machine"]["cpus"]) for results in data.values()})
    caveat = (
        f"These figures come from a machine with {' or '.join(cpus)} CPUs. Ratios carry over to other machines "
        "better than absolute times, which move between runs of the same code; a ratio close to its line can fall "
        "on either side of it from one run to the next."
    )
    bullets = [*_costs(data), *_recovery_words(data), *_size_words(data), caveat]
    return ["## What the numbers mean for you", "", *(f"- {bullet}" for bullet in bullets)]


def _baselines() -> list[str]:
    lines = ["## Baselines", "", "| benchmark | baseline | why it matters |", "| --- | --- | --- |"]
    lines += [f"| {NAMES[name]} | {BASELINES[name][0]} | {BASELINES[name][1]} |" for name in ORDER]
    return lines


def render(results: Path = RESULTS, commit_of: CommitOf = committed_in) -> str:
    """The page, from the results in `results`; `commit_of` names the commit that stored a results file."""
    data = load(results)
    pointer = (
        "Raw numbers and their history: `bench/results/<name>.json` (each benchmark's newest full run; earlier "
        "runs in git history). The tables of the newest run, one section per benchmark, are in "
        "`bench/results/latest.md`; those of the last run of them all in `bench/results/full-run.md`."
    )
    sections = [
        _intro(data),
        ["## Current figures", "", *_table(data, results, commit_of)],
        _meanings(data),
        [pointer],
        _baselines(),
    ]
    return "\n\n".join("\n".join(section) for section in sections) + "\n"


def write(results: Path = RESULTS, page: Path = PAGE) -> Path:
    """Rewrite the page from the stored results; return its path."""
    page.write_text(render(results))
    return page


if __name__ == "__main__":
    print(f"Rewrote {write().relative_to(ROOT)} from {RESULTS.relative_to(ROOT)}")
