"""The Slurm allocation the launcher runs in, and the host list it stands for.

Inside an allocation (an sbatch script, salloc) Slurm says which nodes the job holds
(`SLURM_JOB_NODELIST`, expanded by `scontrol show hostnames`), how many tasks per node it asked
for (`SLURM_NTASKS_PER_NODE`) and how many GPUs each node has for it (`SLURM_GPUS_ON_NODE`).
Each node becomes one host entry of the spec, addressed by its NodeAddr (what the other nodes
reach it by; usually its name), so the plan and TF_CONFIG are built exactly as for SSH hosts.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from launcher.common.errors import UsageError
from launcher.spec.models import ClusterSpec, SlurmSpec
from launcher.spec.placement import CHIEF_WITH_GPUS, uneven_node_split

_NODE_ADDR = re.compile(r"\bNodeAddr=(\S+)")
_NODE_NAME = re.compile(r"\bNodeName=(\S+)")


@dataclass(frozen=True)
class Allocation:
    job_id: str
    nodes: list[str]
    addresses: list[str]
    tasks_per_node: int | None
    gpus_on_node: int | None
    restart_count: int

    def requeueable(self) -> bool:
        """A batch job that Slurm may requeue (`scontrol requeue` refuses salloc jobs)."""
        done = subprocess.run(
            ["scontrol", "show", "job", "-o", self.job_id], capture_output=True, text=True, timeout=60
        )
        fields = dict(w.partition("=")[::2] for w in done.stdout.split())
        return done.returncode == 0 and fields.get("BatchFlag") == "1" and fields.get("Requeue") == "1"

    def requeue(self) -> str | None:
        """Requeue this job; None when done, else Slurm's reason."""
        done = subprocess.run(["scontrol", "requeue", self.job_id], capture_output=True, text=True, timeout=60)
        return None if done.returncode == 0 else (done.stderr or done.stdout).strip()

    def hosts(self, spec: ClusterSpec) -> list[dict[str, Any]]:
        """One host entry per node: the same plan and TF_CONFIG as SSH hosts at these addresses."""
        slurm = spec.slurm or SlurmSpec()
        gpus = slurm.gpus_per_node if slurm.gpus_per_node is not None else self.gpus_on_node
        if slurm.worker_per_gpu and not gpus:
            raise UsageError(
                "slurm.worker_per_gpu: this allocation has no GPUs (SLURM_GPUS_ON_NODE is not set); allocate "
                "GPUs (--gpus-per-node) or set slurm.tasks_per_node"
            )
        workers = slurm.tasks_per_node or (gpus if slurm.worker_per_gpu else None) or self.tasks_per_node or 1
        if gpus and slurm.chief:
            raise UsageError(f"slurm.chief with GPUs: {CHIEF_WITH_GPUS}")
        uneven = uneven_node_split(workers, gpus)
        if uneven:
            raise UsageError(uneven)
        entries: list[dict[str, Any]] = []
        for index, address in enumerate(self.addresses):
            chief = slurm.chief and index == 0
            count = workers + (1 if chief else 0)
            entry: dict[str, Any] = {
                "address": address,
                "workers": workers,
                "chief": chief,
                "ports": [slurm.port + k for k in range(count)],
                "python": spec.python or sys.executable,
                "workdir": spec.workdir or os.getcwd(),
            }
            if gpus:  # slots of the node's GPUs; each task's helper maps them to the ids Slurm gave the step
                entry["gpus"] = list(range(gpus))
                entry["worker_per_gpu"] = slurm.worker_per_gpu
            entries.append(entry)
        return entries


def _scontrol(*args: str) -> str:
    try:
        done = subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise UsageError("--slurm: 'scontrol' is not on PATH; run inside a Slurm allocation") from None
    if done.returncode != 0:
        raise UsageError(f"--slurm: scontrol {' '.join(args)} failed: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def _int(env: Mapping[str, str], name: str) -> int | None:
    """A count Slurm wrote, such as SLURM_NTASKS_PER_NODE=2 (or '2(x3)' per node groups: the first)."""
    match = re.match(r"\d+", env.get(name, ""))
    return int(match.group()) if match else None


def read_allocation(env: Mapping[str, str] = os.environ) -> Allocation:
    """The allocation this process runs in; UsageError (exit 2) outside one."""
    job_id = env.get("SLURM_JOB_ID")
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not job_id or not nodelist:
        raise UsageError(
            "--slurm: not inside a Slurm allocation (SLURM_JOB_ID / SLURM_JOB_NODELIST are not set); run it from "
            "an sbatch script or salloc, or submit with `launch slurm submit --cluster FILE`"
        )
    nodes = _scontrol("show", "hostnames", nodelist).split()
    addresses = {}
    for line in _scontrol("show", "node", "-o", ",".join(nodes)).splitlines():
        name, address = _NODE_NAME.search(line), _NODE_ADDR.search(line)
        if name and address:
            addresses[name.group(1)] = address.group(1)
    return Allocation(
        job_id=job_id,
        nodes=nodes,
        addresses=[addresses.get(n, n) for n in nodes],
        tasks_per_node=_int(env, "SLURM_NTASKS_PER_NODE"),
        gpus_on_node=_int(env, "SLURM_GPUS_ON_NODE"),
        restart_count=_int(env, "SLURM_RESTART_COUNT") or 0,
    )
