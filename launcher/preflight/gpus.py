"""What each host's GPUs are, from nvidia-smi's answers, and what is wrong with them for this spec.

The probe on each host runs nvidia-smi and sends its output back unparsed; this module reads it
(the GPU list as CSV, the CUDA version from the plain header) and compares hosts: nvidia-smi
present and working, the driver and CUDA versions the same on every host, at least as many GPUs
as the spec gives the host, and every GPU id of the spec present. Pure functions: no processes,
no files; every problem is one line naming the host and how to fix it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_CUDA_VERSION = re.compile(r"CUDA Version\s*:\s*([0-9][0-9.]*)")


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as nvidia-smi lists it."""

    index: int
    uuid: str
    name: str
    driver: str
    memory_mib: int | None


@dataclass(frozen=True)
class GpuInventory:
    """A host's GPUs, or why they could not be listed (`problem`, a sentence without the host)."""

    gpus: tuple[GpuInfo, ...] = ()
    cuda: str | None = None
    problem: str | None = None
    slurm_step_devices: tuple[str, ...] | None = None  # in a Slurm step: the devices its CUDA_VISIBLE_DEVICES gives

    @property
    def driver(self) -> str | None:
        return self.gpus[0].driver if self.gpus else None

    def describe(self) -> str:
        if not self.gpus:
            return "no GPU"
        names: dict[str, int] = {}
        for gpu in self.gpus:
            names[gpu.name] = names.get(gpu.name, 0) + 1
        kinds = ", ".join(f"{count} x {name}" for name, count in names.items())
        return f"{kinds} (driver {self.driver}, CUDA {self.cuda or 'unknown'})"


def parse_gpu_list(text: str) -> list[GpuInfo]:
    """`nvidia-smi --query-gpu=index,uuid,name,driver_version,memory.total --format=csv,noheader[,nounits]`.

    Raises ValueError naming the first line it cannot read."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = [field.strip() for field in line.split(",")]
        if len(fields) < 5:
            raise ValueError(f"expected index, uuid, name, driver, memory in {line.strip()!r}")
        # a GPU name may hold a comma: the fields around it are fixed
        index, uuid, name, driver, memory = fields[0], fields[1], ", ".join(fields[2:-2]), fields[-2], fields[-1]
        if not index.isdigit():
            raise ValueError(f"GPU index {index!r} is not a number in {line.strip()!r}")
        amount = memory.removesuffix("MiB").strip()
        gpus.append(GpuInfo(int(index), uuid, name, driver, int(amount) if amount.isdigit() else None))
    return gpus


def parse_cuda_version(header: str) -> str | None:
    """The 'CUDA Version: 12.4' of plain nvidia-smi (also the 'CUDA Version : 12.4' of `nvidia-smi -q`)."""
    match = _CUDA_VERSION.search(header)
    return match.group(1) if match else None


def _first_line(call: dict[str, Any]) -> str:
    for stream in ("stdout", "stderr"):
        for line in str(call.get(stream) or "").splitlines():
            if line.strip():
                return line.strip()[:200]
    return "no output"


def _call_problem(call: dict[str, Any]) -> str | None:
    if "timeout" in call:
        return (
            f"nvidia-smi did not answer within {call['timeout']:g}s; a GPU or the driver may be hung (look for Xid "
            "errors in dmesg, reset the GPU or reboot the host)"
        )
    if "error" in call:
        return f"nvidia-smi could not be run ({call['error']}); check that it is executable"
    if call.get("code") != 0:
        return (
            f"nvidia-smi failed (exit {call.get('code')}: {_first_line(call)}); the NVIDIA driver is not working "
            "there (after a driver update, reboot; otherwise reinstall the driver)"
        )
    return None


def inventory(answer: dict[str, Any] | None) -> GpuInventory:
    """The host's GPUs from the probe's `gpus` answer (see launcher.agent.probe._nvidia_smi)."""
    if not answer:
        return GpuInventory(problem="the probe did not report GPUs")
    devices = answer.get("slurm_step_devices")
    step = tuple(d for d in str(devices).split(",") if d) if devices is not None else None
    if not answer.get("path"):
        return GpuInventory(
            problem="nvidia-smi is not on PATH; install the NVIDIA driver (it brings nvidia-smi) or put it on the "
            "PATH that non-interactive sessions get",
            slurm_step_devices=step,
        )
    query = answer.get("query") or {}
    problem = _call_problem(query)
    if problem is not None:
        return GpuInventory(problem=problem, slurm_step_devices=step)
    try:
        gpus = parse_gpu_list(str(query.get("stdout") or ""))
    except ValueError as error:
        return GpuInventory(problem=f"cannot read nvidia-smi's GPU list ({error})", slurm_step_devices=step)
    header = answer.get("header") or {}
    cuda = parse_cuda_version(str(header.get("stdout") or "")) if header.get("code") == 0 else None
    return GpuInventory(tuple(gpus), cuda, None, step)


@dataclass(frozen=True)
class GpuHost:
    """One host as the GPU check sees it: where, which GPU ids the spec gives it, what it has."""

    address: str
    where: str  # the spec's path of its gpus, e.g. hosts[1].gpus
    wanted: tuple[int, ...]
    found: GpuInventory


def _id_ranges(ids: list[int]) -> str:
    if not ids:
        return "none"
    ids = sorted(ids)
    if ids == list(range(ids[0], ids[-1] + 1)) and len(ids) > 2:
        return f"{ids[0]}-{ids[-1]}"
    return ", ".join(str(i) for i in ids)


def host_problems(host: GpuHost) -> list[str]:
    """Whether this host has what the spec gives it: nvidia-smi working, enough GPUs, every id."""
    found = host.found
    if found.problem is not None:
        return [f"{host.address}: {found.problem} (the spec gives this host GPUs {_id_ranges(list(host.wanted))})"]
    if not found.gpus:
        return [
            f"{host.address}: nvidia-smi lists no GPU but the spec gives this host {len(host.wanted)} "
            f"({_id_ranges(list(host.wanted))}); check the driver, or remove {host.where}"
        ]
    if found.slurm_step_devices is not None:
        # the ids are slots of the step's devices (the task helper maps them), not nvidia-smi's indices
        have = len(found.slurm_step_devices) or len(found.gpus)
        missing = [slot for slot in host.wanted if slot >= have]
        if missing:
            return [
                f"{host.address}: the Slurm step sees {have} GPU(s) but the node's tasks need {len(host.wanted)}; "
                "allocate more GPUs per node (slurm.gpus_per_node, --gpus-per-node) or run fewer tasks per node"
            ]
        return []
    indices = [gpu.index for gpu in found.gpus]
    missing = [gpu for gpu in host.wanted if gpu not in indices]
    if missing:
        return [
            f"{host.address}: GPU {_id_ranges(missing)} of {host.where} does not exist there: nvidia-smi lists "
            f"{len(indices)} GPU(s) ({_id_ranges(indices)}) and the spec gives this host {len(host.wanted)}; "
            f"list only ids nvidia-smi shows"
        ]
    return []


def fleet_problems(hosts: list[GpuHost]) -> list[str]:
    """Per host (see host_problems), then the driver and CUDA versions compared across hosts."""
    problems = [line for host in hosts for line in host_problems(host)]
    for label, version_of in (
        ("NVIDIA driver", lambda h: h.found.driver),
        ("CUDA", lambda h: h.found.cuda),
    ):
        versions: dict[str, list[str]] = {}
        for host in hosts:
            version = version_of(host)
            if version and host.address not in versions.setdefault(version, []):
                versions[version].append(host.address)
        if len(versions) > 1:
            spread = "; ".join(f"{version} on {', '.join(where)}" for version, where in sorted(versions.items()))
            problems.append(
                f"{label} versions differ across hosts ({spread}); install the same NVIDIA driver on every host, so "
                "every worker runs the same CUDA stack"
            )
    return problems
