"""Shared pieces of the benchmarks: jobs under `launch` and the same workers by hand, timing,
interleaved pairs, markdown tables and raw JSON results.

Benchmarks compare side by side in one script (A B, B A, A B ...) because absolute times drift on a
shared 2-core machine; ratios are what the targets are about.
"""

from __future__ import annotations

import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from launcher.plan import LaunchPlan, PlanInputs, build_plan
from launcher.preflight.ports import choose_free_ports
from launcher.spec.load import parse_spec
from launcher.spec.models import ClusterSpec

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
QUIET_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2"}
# every benchmark, in the order `python -m bench` runs them (each is the module bench/<name>.py)
ORDER = (
    "overhead",
    "teardown",
    "recovery",
    "host_loss",
    "throughput",
    "checkpoint",
    "chaos",
    "memory",
    "fanout",
    "scale",
    "fleet",
)


def builtin_spec(name: str, workers: int, run_root: Path, **training: Any) -> dict[str, Any]:
    return {
        "name": name,
        "run_root": str(run_root),
        "hosts": [{"address": "localhost", "workers": workers}],
        "env": dict(QUIET_ENV),
        "training": {"kind": "builtin", **training},
        "restart": {},  # the defaults users have
    }


def workdir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"tflaunch-bench-{prefix}-"))


def write_spec(directory: Path, spec: dict[str, Any]) -> Path:
    path = directory / f"{spec['name']}.json"
    path.write_text(json.dumps(spec))
    return path


def start_launch(spec_path: Path, *args: str, cwd: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "launcher", "--cluster", str(spec_path), "--quiet", *args],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def plan_by_hand(spec_data: dict[str, Any]) -> LaunchPlan:
    """The plan `launch` would use, so the hand-started workers run the very same command and env."""
    spec: ClusterSpec = parse_spec(spec_data)
    run_dir = str(Path(spec.run_root).resolve() / spec.name)
    return build_plan(spec, PlanInputs(run_dir, 0, sys.executable, os.getcwd(), choose_free_ports(spec)))


def by_hand_script(plan: LaunchPlan) -> list[str]:
    """The baseline command: bench/by_hand.py with the plan's tasks, as its own process."""
    os.makedirs(plan.attempt_dir, exist_ok=True)
    path = Path(plan.run_dir) / "by_hand_plan.json"
    path.write_text(json.dumps([{"argv": t.argv, "cwd": t.cwd, "env": t.task_env} for t in plan.tasks]))
    return [sys.executable, str(ROOT / "bench" / "by_hand.py"), str(path)]


def start_by_hand(plan: LaunchPlan) -> subprocess.Popen[bytes]:
    """Start the baseline (every worker, set up by hand) and return the script's process."""
    return subprocess.Popen(by_hand_script(plan), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@dataclass
class _Tail:
    """What was read of one metrics file so far: only what is appended since is parsed again."""

    inode: int = -1
    offset: int = 0
    rows: list[dict[str, Any]] = field(default_factory=list)


_tails: dict[Path, _Tail] = {}


def metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The run's metrics rows so far. Read incrementally: a waiting benchmark polls this every 10 ms
    on a 2-core machine, and parsing thousands of rows each time took a third of a CPU from the very
    workers being measured."""
    path = run_dir / "metrics.jsonl"
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return []
    with handle:
        stat = os.fstat(handle.fileno())
        tail = _tails.get(path)
        if tail is None or tail.inode != stat.st_ino or stat.st_size < tail.offset:  # new, or replaced
            tail = _tails[path] = _Tail(inode=stat.st_ino)
        handle.seek(tail.offset)
        chunk = handle.read()
    complete = chunk[: chunk.rfind(b"\n") + 1]  # a line being written right now waits for the next call
    tail.offset += len(complete)
    for line in complete.splitlines():
        try:
            tail.rows.append(json.loads(line))
        except ValueError:  # not a row (never expected of the launcher's writer): skipped, as before
            continue
    return list(tail.rows)


def wait_for(condition: Callable[[], Any], timeout: float, what: str, poll: float = 0.01) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(poll)
    raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")


def wait_step(run_dir: Path, step: int, timeout: float = 120, attempt: int | None = None) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        rows = [m for m in metrics(run_dir) if m["step"] >= step and (attempt is None or m.get("attempt") == attempt)]
        return rows[0] if rows else None

    return wait_for(reached, timeout, f"step {step} in {run_dir}")


def worker_processes(run_dir: Path, task: str | None = None, spares: bool = False) -> list[psutil.Process]:
    """The TF worker processes (`-m worker`) of a run, found by their environment; with `spares`,
    also warm spares, waiting or running a task (what must be gone once a run ended)."""
    found = []
    for proc in psutil.process_iter():
        try:
            cmdline = proc.cmdline()
            spare = any("tflaunch_spare" in part for part in cmdline)
            runtime = cmdline[1:3] == ["-m", "worker"] or cmdline[1:4] == ["-P", "-m", "worker"]
            if not runtime and not (spares and spare):
                continue
            env = proc.environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):  # gone or not ours
            continue
        if env.get("TFLAUNCH_RUN_DIR") == str(run_dir) and (task is None or env.get("TFLAUNCH_TASK") == task):
            found.append(proc)
    return found


def all_gone(processes: Iterable[psutil.Process]) -> bool:
    for proc in processes:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            continue
    return True


class Exits:
    """Wakes on each exit of these processes (a zombie counts), a pidfd each (Linux 5.3+): polling
    hundreds of processes would take the CPU the exits it times need. Opened before what ends them."""

    def __init__(self, pids: Iterable[int]) -> None:
        self._fds = []
        for pid in pids:
            try:
                self._fds.append(os.pidfd_open(pid))
            except ProcessLookupError:  # gone already
                continue

    def wait(self, timeout: float, what: str) -> None:
        """Until every one has exited; closes the pidfds either way."""
        poller = select.poll()
        for fd in self._fds:
            poller.register(fd, select.POLLIN)
        left, deadline = len(self._fds), time.monotonic() + timeout
        try:
            while left:
                ready = poller.poll(max(0, int(1000 * (deadline - time.monotonic()))))
                if not ready:
                    raise TimeoutError(f"timed out after {timeout:g}s waiting for {what} ({left} left)")
                for fd, _ in ready:
                    poller.unregister(fd)
                    left -= 1
        finally:
            for fd in self._fds:
                os.close(fd)
            self._fds = []


def kill_all(processes: Iterable[psutil.Process]) -> None:
    for proc in processes:
        try:
            proc.kill()
        except psutil.NoSuchProcess:  # already gone
            continue


def interleaved(
    a: Callable[[], float], b: Callable[[], float], pairs: int
) -> tuple[list[float], list[float], list[float]]:
    """Run A B, B A, A B ... and return the A values, the B values and the A/B ratio of each pair. The
    order turns each pair, so that whatever the run just before leaves (or a machine that slows or
    speeds up over minutes) weighs on both sides alike."""
    first, second, ratios = [], [], []
    for index in range(pairs):
        if index % 2 == 0:
            x, y = a(), b()
        else:
            y = b()
            x = a()
        first.append(x)
        second.append(y)
        ratios.append(x / y)
    return first, second, ratios


def summarize(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def table(title: str, rows: list[tuple[str, dict[str, float], str]]) -> str:
    lines = [
        f"### {title}",
        "",
        "| measure | median | min | max | n | unit |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for name, stats, unit in rows:
        lines.append(
            f"| {name} | {stats['median']:.3f} | {stats['min']:.3f} | {stats['max']:.3f} | {int(stats['n'])} | {unit} |"
        )
    return "\n".join(lines)


def save(name: str, data: dict[str, Any], quick: bool) -> Path:
    """Keep a run's raw numbers: bench/results/<name>.json, which BENCHMARKS.md is made from, or
    <name>-quick.json for a quick run (fewer pairs and shorter jobs), which the page never shows."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}{'-quick' if quick else ''}.json"
    data = {"machine": machine(), "time": time.strftime("%Y-%m-%d %H:%M:%S"), **data}
    path.write_text(json.dumps(data, indent=2))
    return path


def machine() -> dict[str, Any]:
    import platform

    return {
        "cpus": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def spares_ready(run_dir: Path, count: int) -> bool:
    """Whether the launcher's status says at least `count` warm spares are ready."""
    try:
        spares = json.loads((run_dir / "status.json").read_text()).get("spares") or {}
    except (OSError, ValueError):  # not written yet, or being replaced
        return False
    return spares.get("ready", 0) >= count
