"""`launch slurm submit`: write a batch script that runs `launch --slurm` and submit it.

The script and a copy of the spec (hosts left out: the allocation is the host list) go into the
run directory, so a requeued job runs exactly what was submitted, and no environment value of the
spec reaches the script or a command line. Then it waits until the job starts, at most the spec's
`restart.start_timeout_s` (a job that cannot get its resources is cancelled with Slurm's reason),
and with `--wait` follows the job's output until it ends.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from launcher.errors import LaunchError, UsageError
from launcher.private_files import make_private_dir, open_private
from launcher.spec import ClusterSpec, SlurmSpec

_POLL_S = 0.5
_ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE")


class SubmitError(LaunchError):
    exit_code = 1


def tasks_per_node(slurm: SlurmSpec) -> int:
    if slurm.tasks_per_node is not None:
        return slurm.tasks_per_node
    return slurm.gpus_per_node or 1 if slurm.worker_per_gpu else 1


def batch_script(spec: ClusterSpec, spec_copy: Path, run_dir: Path) -> str:
    """The sbatch script for `spec`; it runs `launch --slurm` on the copy of the spec."""
    slurm = spec.slurm or SlurmSpec()
    options = [
        f"--job-name={spec.name}",
        f"--nodes={slurm.nodes}",
        f"--ntasks-per-node={tasks_per_node(slurm)}",
        f"--output={run_dir}/slurm-%j.out",
        "--open-mode=append",  # a requeued job adds to the same file
        f"--chdir={spec.workdir or os.getcwd()}",
        "--requeue" if slurm.requeue else "--no-requeue",
    ]
    if slurm.signal_before_end_s:
        options.append(f"--signal=TERM@{slurm.signal_before_end_s}")  # to the steps: the workers save
    for flag, value in (("partition", slurm.partition), ("account", slurm.account), ("time", slurm.time_limit)):
        if value is not None:
            options.append(f"--{flag}={value}")
    if slurm.gpus_per_node:
        options.append(f"--gpus-per-node={slurm.gpus_per_node}")
    options += slurm.sbatch_options
    command = [spec.python or sys.executable, "-m", "launcher", "--cluster", str(spec_copy), "--slurm", "--plain"]
    lines = ["#!/bin/bash", *(f"#SBATCH {shlex.quote(option)}" for option in options), ""]
    lines += [
        "# Written by `launch slurm submit`; the spec it runs is the copy beside this script.",
        "# SLURM_RESTART_COUNT counts requeues; the attempts of earlier runs stay in the run directory.",
        "exec " + " ".join(shlex.quote(part) for part in command),
        "",
    ]
    return "\n".join(lines)


def write_job(spec: ClusterSpec, run_dir: Path) -> Path:
    """The spec copy and the script in the run directory (private: the spec may hold secrets)."""
    make_private_dir(run_dir)
    spec_copy = run_dir / "submitted-spec.json"
    data = spec.model_dump(mode="json", exclude_unset=True, exclude={"hosts"})
    data["run_root"] = str(run_dir.parent)  # the job may start elsewhere: the same run directory
    with open_private(spec_copy, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2)
    script = run_dir / "submit.sbatch"
    with open_private(script, "w", encoding="utf-8") as handle:
        handle.write(batch_script(spec, spec_copy, run_dir))
    return script


def _slurm(*argv: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        raise UsageError(f"'{argv[0]}' is not on PATH: run `launch slurm submit` on a Slurm login node") from None


def job_fields(job_id: str) -> dict[str, str]:
    done = _slurm("scontrol", "show", "job", "-o", job_id)
    fields: dict[str, str] = {}
    for word in done.stdout.split():
        key, _, value = word.partition("=")
        fields.setdefault(key, value)
    return fields


def submit(script: Path) -> str:
    done = _slurm("sbatch", "--parsable", str(script))
    if done.returncode != 0:
        raise SubmitError(f"sbatch refused the job: {(done.stderr or done.stdout).strip()} (script: {script})")
    return done.stdout.strip().split(";")[0]


def wait_started(job_id: str, timeout_s: float, say: Callable[[str], None]) -> dict[str, str]:
    """Until the job runs (or already ended); past `timeout_s` still pending: cancel it and fail."""
    deadline = time.monotonic() + timeout_s
    while True:
        fields = job_fields(job_id)
        if fields.get("JobState") not in ("PENDING", "CONFIGURING", None):
            return fields
        if time.monotonic() > deadline:
            _slurm("scancel", job_id)
            raise SubmitError(
                f"job {job_id} did not start within restart.start_timeout_s={timeout_s:g}s (Slurm: "
                f"{fields.get('JobState', 'unknown')}, reason {fields.get('Reason', 'unknown')}); cancelled it. "
                f"Ask for fewer nodes or GPUs, another partition, or a longer start_timeout_s"
            )
        time.sleep(_POLL_S)


def follow(job_id: str, output: Path, say: Callable[[str], None], echo: Callable[[str], None]) -> int:
    """Echo the job's output until it ends; its exit code (0 when it completed)."""
    offset = 0
    while True:
        fields = job_fields(job_id)
        if output.exists():
            with open(output, "rb") as handle:
                handle.seek(offset)
                chunk = handle.read()
                offset += len(chunk)
            for line in chunk.decode("utf-8", "replace").splitlines():
                echo(line)
        state = fields.get("JobState", "")
        if state in _ENDED:
            exit_code, restarts = fields.get("ExitCode", "?"), fields.get("Restarts", "0")
            say(f"job {job_id} ended: {state} (exit {exit_code}, requeued {restarts}x)")
            return 0 if state == "COMPLETED" else 1
        time.sleep(_POLL_S)
