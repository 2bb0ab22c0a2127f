"""SSH fan-out: N namespace hosts (each its own address and sshd), one trivial task per host.

Measures, under `launch` and for N plain OpenSSH clients started in parallel (`ssh host cmd`, the
baseline): time from the start until every task printed its first line, and time from the stop
until no process the launch started is left on any host (tasks, agents, keepers; plain ssh's clients
leave their remote commands running). For the launcher also its peak RSS and threads, alone
and with its SSH relays (launcher/transport/relays.py), and the CPU the launcher, its relays and the
plain ssh clients had used once every task was up: the per-host cost that projects to a fleet of
PROJECTED hosts on a machine of more cores. Needs root (network namespaces); see
tests/labs/netns.py for the hosts.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from bench.common import Exits, interleaved, save, summarize, table, wait_for, workdir
from launcher.transport.relays import relay_count

if TYPE_CHECKING:  # the lab is imported where it is made (run), so that reading the targets does not need it
    from tests.labs.netns import NetnsHost, NetnsLab

TASK = "import time; print('up', flush=True); time.sleep(3600)"
SIZES = (8, 32, 64, 128, 256)
TASK_PORT = 29500
# The targets hold at these sizes: below them, the launcher's own start weighs more than the hosts.
TARGET_SIZES = (32, 64, 128, 256)
START_RATIO = 1.2  # launch / plain ssh, start to every task up, median
TEARDOWN_S = 1.0  # stop to every process the launch started on the hosts gone (tasks, agents, keepers), median
RSS_MIB = {32: 60.0, 64: 60.0, 128: 100.0, 256: 100.0}  # the launcher's peak RSS, median (its relays reported)
THREADS_PER_HOST = 2  # the launcher's peak threads: this many per host, plus a constant
PROJECTED = 1024  # hosts the measured per-host CPU is projected to
RELAY = "launcher.transport.ssh_relay"


def _spec(lab: NetnsLab, hosts: list[NetnsHost], run_root: Path) -> dict[str, Any]:
    # the stock ssh.connect_timeout_s (10 s), not the lab's 3 s for its partition tests: 64 handshakes at
    # once on 2 cores may take longer than 3 s to see a banner
    ssh = {key: value for key, value in lab.ssh_settings().items() if key != "connect_timeout_s"}
    return {
        "name": "fanout",
        "run_root": str(run_root),
        "python": sys.executable,
        # each host is a namespace of its own: any port is free there
        "hosts": [{"address": h.address, "ports": [TASK_PORT], "ssh": ssh} for h in hosts],
        "restart": {"max_restarts": 0, "grace_period_s": 5},
    }


def _host_processes(hosts: list[NetnsHost]) -> list[int]:
    """Every process on these hosts but sshd's: agents, their keepers, tasks (read once: a listing runs
    `ip netns pids` per host, far too slow to poll at fleet size)."""
    found = []
    for host in hosts:
        for pid in host.task_pids():
            try:
                if psutil.Process(pid).name() != "sshd":
                    found.append(pid)
            except psutil.NoSuchProcess:  # exited meanwhile
                continue
    return found


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


def _cpu(processes: list[psutil.Process]) -> float:
    """User and system CPU seconds these processes used so far (0 for one that is gone)."""
    total = 0.0
    for proc in processes:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def _sample(sample: dict[str, float], launcher: psutil.Process, relays: list[psutil.Process]) -> None:
    """The peaks so far: the launcher's RSS and threads, alone and with its relays (found once started)."""
    if not relays:
        relays += [p for p in launcher.children() if RELAY in " ".join(p.cmdline())]
    rss, threads = launcher.memory_info().rss, launcher.num_threads()
    sample["rss_mib"] = max(sample.get("rss_mib", 0.0), rss / 2**20)
    sample["threads"] = max(sample.get("threads", 0.0), float(threads))
    for relay in relays:
        try:
            rss, threads = rss + relay.memory_info().rss, threads + relay.num_threads()
        except psutil.NoSuchProcess:  # ended with the launch
            continue
    sample["total_rss_mib"] = max(sample.get("total_rss_mib", 0.0), rss / 2**20)
    sample["total_threads"] = max(sample.get("total_threads", 0.0), float(threads))


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
    relays: list[psutil.Process] = []
    while not done.wait(0.02):
        try:
            _sample(sample, launcher, relays)
        except psutil.NoSuchProcess:  # the launcher exited: a failed run, reported below
            break
    if len(seen) < len(hosts):
        proc.kill()
        raise RuntimeError(f"launch started {len(seen)} of {len(hosts)} tasks (exit {proc.wait()})")
    up = seen[-1] - started
    sample["launcher_cpu_s"] = _cpu([launcher])
    sample["relays_cpu_s"] = _cpu(relays)
    sample["relays"] = float(len(relays))
    exits = Exits(_host_processes(hosts))
    stop = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    exits.wait(30, "every process on the hosts to stop")
    down = time.monotonic() - stop
    wait_for(lambda: _all_gone(hosts), 30, "nothing else to be left on the hosts")
    proc.wait(timeout=30)
    return up, down


def plain_ssh_once(
    lab: NetnsLab, hosts: list[NetnsHost], leftovers: list[float], cpu: list[float]
) -> tuple[float, float]:
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
    cpu.append(_cpu([psutil.Process(client.pid) for client in clients]))
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

    plain_cpu: list[float] = []

    def plain_up() -> float:
        up, down = plain_ssh_once(lab, hosts, left, plain_cpu)
        plain_downs.append(down)
        return up

    launch_ups, plain_ups, ratios = interleaved(launch_up, plain_up, pairs)
    rss, total_rss = [s["rss_mib"] for s in samples], [s["total_rss_mib"] for s in samples]
    threads, total_threads = [s["threads"] for s in samples], [s["total_threads"] for s in samples]
    cpu = {key: [s[key] for s in samples] for key in ("launcher_cpu_s", "relays_cpu_s")}
    rows = [
        (f"N={size}: launch, start to every task up", summarize(launch_ups), "s"),
        (f"N={size}: plain ssh, start to every command up", summarize(plain_ups), "s"),
        (f"N={size}: ratio launch / plain ssh", summarize(ratios), "x"),
        (f"N={size}: launch, stop to every process on the hosts gone", summarize(downs), "s"),
        (f"N={size}: plain ssh, clients stopped (remote commands left running)", summarize(plain_downs), "s"),
        (f"N={size}: plain ssh, remote commands left after the clients stopped", summarize(left), "processes"),
        (f"N={size}: launcher peak RSS", summarize(rss), "MiB"),
        (
            f"N={size}: launcher and its {samples[0]['relays']:.0f} SSH relays, peak RSS together",
            summarize(total_rss),
            "MiB",
        ),
        (f"N={size}: launcher peak threads", summarize(threads), "threads"),
        (f"N={size}: launcher peak threads per host", summarize([t / size for t in threads]), "threads"),
        (f"N={size}: launcher and relays, peak threads together", summarize(total_threads), "threads"),
        (f"N={size}: CPU used by every task up: launcher", summarize(cpu["launcher_cpu_s"]), "s"),
        (f"N={size}: CPU used by every task up: relays", summarize(cpu["relays_cpu_s"]), "s"),
        (f"N={size}: CPU used by every command up: plain ssh clients", summarize(plain_cpu), "s"),
    ]
    raw = {
        "launch_up": launch_ups,
        "plain_up": plain_ups,
        "ratios": ratios,
        "launch_down": downs,
        "plain_down": plain_downs,
        "plain_leftovers": left,
        "rss_mib": rss,
        "total_rss_mib": total_rss,
        "threads": threads,
        "total_threads": total_threads,
        "relays": samples[0]["relays"],
        **cpu,
        "plain_cpu_s": plain_cpu,
    }
    return rows, raw


def _per_host(raw: dict[str, Any], key: str) -> float:
    """CPU seconds one more host costs: the slope between the smallest and the largest size measured."""
    small, large = min(SIZES), max(SIZES)
    return (statistics.median(raw[str(large)][key]) - statistics.median(raw[str(small)][key])) / (large - small)


def project(
    raw: dict[str, Any], hosts: int = PROJECTED, cores: tuple[int, ...] = (2, 4, 8, 16, 32, 64)
) -> dict[str, Any]:
    """The start-up of `hosts` hosts from the measured per-host CPU, on a launching machine of each of `cores`
    (each host does its own side on its own cores, as the smallest size measured shows it): launch = its time
    at the smallest size + the launcher's per-host work on its core, or the relays' on theirs (as many as
    launch would start there), whichever is longer; plain ssh = its time there + the clients' per-host work
    on all cores."""
    small = str(min(SIZES))
    launcher, relays, plain = (_per_host(raw, key) for key in ("launcher_cpu_s", "relays_cpu_s", "plain_cpu_s"))
    base_launch, base_plain = statistics.median(raw[small]["launch_up"]), statistics.median(raw[small]["plain_up"])
    ratios = {}
    for count in cores:
        launch = base_launch + max(launcher * hosts, relays * hosts / relay_count(hosts, count))
        ratios[str(count)] = launch / (base_plain + plain * hosts / count)
    holds = [count for count in cores if ratios[str(count)] <= START_RATIO]
    return {
        "hosts": hosts,
        "per_host_ms": {"launcher": 1000 * launcher, "relays": 1000 * relays, "plain_ssh": 1000 * plain},
        "ratios_by_cores": ratios,
        "holds_up_to_cores": max(holds) if holds and holds[0] == cores[0] else 0,
    }


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
        shutil.rmtree(directory, ignore_errors=True)  # the hosts' homes, keys and logs: nothing is kept
    raw["projection"] = project(raw)
    save("fanout", raw, quick)
    limits = ", ".join(f"< {mib:g} MiB at {size}" for size, mib in RSS_MIB.items())
    title = (
        f"SSH fan-out: N namespace hosts, one trivial task each (targets at N={', '.join(map(str, TARGET_SIZES))}: "
        f"start-up <= {START_RATIO:g}x plain ssh, teardown < {TEARDOWN_S:g} s, launcher RSS {limits}, "
        f"launcher threads <= {THREADS_PER_HOST} per host plus a constant)"
    )
    projected = raw["projection"]
    words = ", ".join(f"{cores} cores {ratio:.2f}x" for cores, ratio in projected["ratios_by_cores"].items())
    per_host = ", ".join(f"{name} {ms:.1f} ms" for name, ms in projected["per_host_ms"].items())
    return (
        f"{table(title, rows)}\n\nProjected to {projected['hosts']:,} hosts from the CPU per host ({per_host}): "
        f"start-up against plain ssh on a launching machine of {words}; within {START_RATIO:g}x up to "
        f"{projected['holds_up_to_cores']} cores."
    )


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    print(run("--quick" in sys.argv))
