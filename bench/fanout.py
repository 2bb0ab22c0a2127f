"""SSH fan-out: N namespace hosts (each its own address and sshd), one trivial task per host.

Measures, under `launch` and for N plain OpenSSH clients started in parallel (`ssh host cmd`, the
baseline): time from the start until every task printed its first line, and time from the stop
until no task process is left on any host. For the launcher also its peak RSS and thread count.
Needs root (network namespaces); see tests/labs/netns.py for the hosts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from bench.common import interleaved, save, summarize, table, wait_for, workdir

if TYPE_CHECKING:  # the lab is imported where it is made (run), so that reading the targets does not need it
    from tests.labs.netns import NetnsHost, NetnsLab

TASK = "import time; print('up', flush=True); time.sleep(3600)"
SIZES = (8, 32, 64)
TASK_PORT = 29500
# The targets hold at these sizes: below them, the start-up pool (one thread per host up to 32) and
# the launcher's own start weigh more than the hosts.
TARGET_SIZES = (32, 64)
START_RATIO = 1.2  # launch / plain ssh, start to every task up, median
TEARDOWN_S = 1.0  # stop to every task gone, median
RSS_MIB = 60.0  # the launcher's peak RSS, median
THREADS_PER_HOST = 2  # the launcher's peak threads: this many per host, plus a constant


def _spec(lab: NetnsLab, hosts: list[NetnsHost], run_root: Path) -> dict[str, Any]:
    return {
        "name": "fanout",
        "run_root": str(run_root),
        "python": sys.executable,
        # each host is a namespace of its own: any port is free there
        "hosts": [{"address": h.address, "ports": [TASK_PORT], "ssh": lab.ssh_settings()} for h in hosts],
        "restart": {"max_restarts": 0, "grace_period_s": 5},
    }


def _all_gone(hosts: list[NetnsHost]) -> bool:
    return not any(h.tasks_alive() for h in hosts)


def _clean(hosts: list[NetnsHost]) -> None:
    """Kill what a run left on the hosts (the plain-ssh baseline leaves its remote commands running)."""
    for host in hosts:
        for pid in host.task_pids():
            try:
                proc = psutil.Process(pid)
                if proc.name() != "sshd":
                    proc.kill()
            except psutil.NoSuchProcess:  # exited meanwhile
                continue
    wait_for(lambda: _all_gone(hosts), 20, "leftovers to go")


def _read_until_up(stream: Any, count: int, seen: list[float], done: threading.Event) -> None:
    for raw in stream:
        if raw.rstrip().endswith(b"up"):
            seen.append(time.monotonic())
            if len(seen) >= count:
                done.set()
    done.set()


def launch_once(
    lab: NetnsLab, hosts: list[NetnsHost], directory: Path, sample: dict[str, float]
) -> tuple[float, float]:
    spec_path = directory / "fanout.json"
    spec_path.write_text(json.dumps(_spec(lab, hosts, directory / "runs")))
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "launcher", "--cluster", str(spec_path), "--plain", "--", "python3", "-c", TASK],
        cwd=directory,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    launcher = psutil.Process(proc.pid)
    seen: list[float] = []
    done = threading.Event()
    threading.Thread(target=_read_until_up, args=(proc.stdout, len(hosts), seen, done), daemon=True).start()
    while not done.wait(0.02):
        try:
            sample["rss_mib"] = max(sample.get("rss_mib", 0.0), launcher.memory_info().rss / 2**20)
            sample["threads"] = max(sample.get("threads", 0.0), float(launcher.num_threads()))
        except psutil.NoSuchProcess:  # the launcher exited: a failed run, reported below
            break
    if len(seen) < len(hosts):
        proc.kill()
        raise RuntimeError(f"launch started {len(seen)} of {len(hosts)} tasks (exit {proc.wait()})")
    up = seen[-1] - started
    stop = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    wait_for(lambda: _all_gone(hosts), 30, "every task to stop", poll=0.005)
    down = time.monotonic() - stop
    proc.wait(timeout=30)
    return up, down


def plain_ssh_once(lab: NetnsLab, hosts: list[NetnsHost], leftovers: list[float]) -> tuple[float, float]:
    base = [
        "ssh",
        "-i",
        lab.identity_file,
        "-o",
        f"UserKnownHostsFile={lab.known_hosts}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
    ]
    started = time.monotonic()
    clients = [
        subprocess.Popen(
            [*base, f"root@{h.address}", f'{sys.executable} -c "{TASK}"'],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        for h in hosts
    ]
    seen: list[float] = []
    done = threading.Event()
    for client in clients:
        threading.Thread(target=_read_until_up, args=(client.stdout, len(hosts), seen, done), daemon=True).start()
    if not done.wait(60) or len(seen) < len(hosts):
        raise RuntimeError(f"plain ssh started {len(seen)} of {len(hosts)} commands")
    up = seen[-1] - started
    stop = time.monotonic()
    for client in clients:
        client.terminate()
    for client in clients:
        client.wait()
    down = time.monotonic() - stop  # the clients are gone; their remote commands are not
    leftovers.append(float(sum(len(h.tasks_alive()) for h in hosts)))
    _clean(hosts)
    return up, down


def _measure(
    lab: NetnsLab, hosts: list[NetnsHost], directory: Path, pairs: int
) -> tuple[list[tuple[str, dict[str, float], str]], dict[str, Any]]:
    size = len(hosts)
    downs: list[float] = []
    plain_downs: list[float] = []
    left: list[float] = []
    samples: list[dict[str, float]] = []

    def launch_up() -> float:
        samples.append({})
        up, down = launch_once(lab, hosts, directory, samples[-1])
        downs.append(down)
        return up

    def plain_up() -> float:
        up, down = plain_ssh_once(lab, hosts, left)
        plain_downs.append(down)
        return up

    launch_ups, plain_ups, ratios = interleaved(launch_up, plain_up, pairs)
    rss = [s["rss_mib"] for s in samples]
    threads = [s["threads"] for s in samples]
    rows = [
        (f"N={size}: launch, start to every task up", summarize(launch_ups), "s"),
        (f"N={size}: plain ssh, start to every command up", summarize(plain_ups), "s"),
        (f"N={size}: ratio launch / plain ssh", summarize(ratios), "x"),
        (f"N={size}: launch, stop to every task gone", summarize(downs), "s"),
        (f"N={size}: plain ssh, clients stopped (remote commands left running)", summarize(plain_downs), "s"),
        (f"N={size}: plain ssh, remote commands left after the clients stopped", summarize(left), "processes"),
        (f"N={size}: launcher peak RSS", summarize(rss), "MiB"),
        (f"N={size}: launcher peak threads", summarize(threads), "threads"),
        (f"N={size}: launcher peak threads per host", summarize([t / size for t in threads]), "threads"),
    ]
    raw = {
        "launch_up": launch_ups,
        "plain_up": plain_ups,
        "ratios": ratios,
        "launch_down": downs,
        "plain_down": plain_downs,
        "plain_leftovers": left,
        "rss_mib": rss,
        "threads": threads,
    }
    return rows, raw


def run(quick: bool) -> str:
    from tests.labs.netns import make_lab, unavailable_reason  # see TYPE_CHECKING above

    reason = unavailable_reason()
    if reason is not None:
        return f"### SSH fan-out\n\nskipped: {reason}"
    pairs = 1 if quick else 5
    directory = workdir("fanout")
    lab = make_lab(directory / "lab", max(SIZES))
    rows: list[tuple[str, dict[str, float], str]] = []
    raw: dict[str, Any] = {}
    try:
        for size in SIZES:
            size_rows, raw[str(size)] = _measure(lab, lab.hosts[:size], directory, pairs)
            rows += size_rows
    finally:
        lab.close()
    save("fanout", raw, quick)
    title = (
        f"SSH fan-out: N namespace hosts, one trivial task each (targets at N={' and '.join(map(str, TARGET_SIZES))}: "
        f"start-up <= {START_RATIO:g}x plain ssh, teardown < {TEARDOWN_S:g} s, launcher RSS < {RSS_MIB:g} MiB, "
        f"threads <= {THREADS_PER_HOST} per host plus a constant)"
    )
    return table(title, rows)


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    print(run("--quick" in sys.argv))
