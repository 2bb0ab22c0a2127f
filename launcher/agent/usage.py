"""What each task of the host uses, sampled a few times a minute: CPU, resident memory, and GPU where
nvidia-smi answers. A task that pins a core while its peers idle in the all-reduce is the straggler.

A task is its whole process group (a shell leading python, the runtime's children): one pass over /proc
per sample sums every member's CPU time (utime + stime) and resident set. Only members' stat files are
read (a process's group is one system call): a machine simulating a fleet runs an agent per host, and
every agent reading every process's stat made the passes grow with the square of the hosts. CPU is
the share of one core since the last sample (200 for two cores' worth). GPU: nvidia-smi's compute
processes (their memory, and the utilization of the GPUs they run on), by pid; inside a container whose
pids nvidia-smi does not see, nothing. Standard library only.
"""

from __future__ import annotations

import os
import subprocess
import time
from typing import Any

from launcher.agent.keeper import proc_stat
from launcher.agent.processes import which

USAGE_S = 15.0  # between samples
NVIDIA_SMI_TIMEOUT_S = 5.0
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def by_group(pgids: set[int]) -> dict[int, tuple[int, int, list[int]]]:
    """For each process group asked: (CPU ticks, resident bytes, pids), over every member alive now."""
    found: dict[int, tuple[int, int, list[int]]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.getpgid(int(entry)) not in pgids:
                continue
        except OSError:  # exited meanwhile
            continue
        fields = proc_stat(entry)
        if fields is None or len(fields) < 22:
            continue
        try:
            pgid = int(fields[2])
            if pgid not in pgids:
                continue
            ticks, pages = int(fields[11]) + int(fields[12]), int(fields[21])
        except ValueError:
            continue
        before = found.get(pgid, (0, 0, []))
        found[pgid] = (before[0] + ticks, before[1] + pages * _PAGE, [*before[2], int(entry)])
    return found


def _smi(query: str, fields: str) -> list[list[str]]:
    tool = which("nvidia-smi")
    if tool is None:
        return []
    try:
        done = subprocess.run(
            [tool, f"--query-{query}={fields}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    if done.returncode != 0:
        return []
    return [[cell.strip() for cell in line.split(",")] for line in done.stdout.splitlines() if line.strip()]


def gpu_of(pids_by_group: dict[int, list[int]], apps: list[list[str]], gpus: list[list[str]]) -> dict[int, Any]:
    """Per group: its GPU memory (bytes, from nvidia-smi's MiB) and the utilization of the GPUs it runs on
    (the highest), from `--query-compute-apps=pid,gpu_uuid,used_memory` and `--query-gpu=uuid,utilization.gpu`."""
    busy: dict[str, int] = {}
    for row in gpus:
        if len(row) >= 2 and row[1].isdigit():
            busy[row[0]] = int(row[1])
    group_of = {pid: pgid for pgid, pids in pids_by_group.items() for pid in pids}
    found: dict[int, dict[str, Any]] = {}
    for row in apps:
        if len(row) < 3 or not row[0].isdigit() or not row[2].isdigit() or int(row[0]) not in group_of:
            continue
        entry = found.setdefault(group_of[int(row[0])], {"gpu_mem": 0, "gpu": None})
        entry["gpu_mem"] += int(row[2]) * 2**20
        if row[1] in busy:
            entry["gpu"] = max(entry["gpu"] or 0, busy[row[1]])
    return found


class Sampler:
    """Keeps the last sample's CPU ticks per task, so each sample gives the CPU used since."""

    def __init__(self) -> None:
        self._last: dict[int, tuple[float, int]] = {}  # pgid -> (monotonic time, ticks)
        self._gpus = which("nvidia-smi") is not None

    def sample(self, tasks: dict[int, int]) -> dict[str, dict[str, Any]]:
        """{ident: {"cpu": percent of one core or None at the first sample, "rss": bytes, ...}} for tasks
        given as {ident: pgid}."""
        now = time.monotonic()
        groups = by_group(set(tasks.values()))
        gpu = {}
        if self._gpus:
            apps = _smi("compute-apps", "pid,gpu_uuid,used_memory")
            gpu = gpu_of({g: found[2] for g, found in groups.items()}, apps, _smi("gpu", "uuid,utilization.gpu"))
        usage: dict[str, dict[str, Any]] = {}
        for ident, pgid in tasks.items():
            if pgid not in groups:
                continue
            ticks, rss, _ = groups[pgid]
            last = self._last.get(pgid)
            cpu = None
            if last is not None and now > last[0] and ticks >= last[1]:
                cpu = round(100.0 * (ticks - last[1]) / _TICKS / (now - last[0]), 1)
            self._last[pgid] = (now, ticks)
            usage[str(ident)] = {"cpu": cpu, "rss": rss, **gpu.get(pgid, {})}
        for gone in set(self._last) - set(tasks.values()):
            del self._last[gone]
        return usage
