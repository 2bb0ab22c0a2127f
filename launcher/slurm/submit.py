"""`launch slurm submit`: write a batch script that runs `launch --slurm` and submit it.

The script and a copy of the spec (hosts left out: the allocation is the host list) go into the
run directory, so a requeued job runs exactly what was submitted, and no environment value of the
spec reaches the script or a command line. Then it waits until the job starts, at most the spec's
`restart.start_timeout_s` (a job that cannot get its resources is cancelled with Slurm's reason),
and with `--wait` follows the job's output until it ends.

The `#SBATCH` lines are read by sbatch's own parser, not by a shell (`sbatch_word`), and the
`--output` path by Slurm's file-name patterns (`%j`): each value is written so that Slurm reads
back exactly the spec's value, or refused with the spec field it comes from.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from launcher.common.errors import LaunchError, SpecError, SpecProblem, UsageError
from launcher.common.private_files import make_private_dir, open_private
from launcher.spec.models import ClusterSpec, SlurmSpec

_POLL_S = 0.5
_ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE")
_WAITING = ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING")


class SubmitError(LaunchError):
    exit_code = 1


class SubmitRefused(LaunchError):
    """sbatch refused what the spec asks for (a partition or account that is not there, more nodes
    than exist...): a spec mistake, and nothing was queued."""

    exit_code = 2


# What sbatch says when Slurm itself could not take the job now: trying again may be all it needs.
_SLURM_BUSY = ("unable to contact", "socket timed out", "temporarily unavailable", "not responding", "try again")
_NO_SLURM_HERE = ("configuration source", "slurm.conf", "could not find slurm", "cannot find slurm")


def tasks_per_node(slurm: SlurmSpec) -> int:
    if slurm.tasks_per_node is not None:
        return slurm.tasks_per_node
    return slurm.gpus_per_node or 1 if slurm.worker_per_gpu else 1


_PLAIN_WORD = re.compile(r"[A-Za-z0-9_@%+,./=-][A-Za-z0-9_@%+,./=:-]*")
_SEPARATORS = ("hetjob", "packjob")  # a word sbatch takes as a job component separator


def unwritable(value: str) -> str | None:
    """Why `value` cannot be one word of an `#SBATCH` line, or None when it can."""
    if "\n" in value:
        return "a newline, which ends the #SBATCH line"
    if "\0" in value:
        return "a NUL byte, which ends the string sbatch reads"
    if not value:
        return "nothing: an empty word ends the #SBATCH line"
    return None


def sbatch_word(value: str) -> str:
    """`value` as one word of an `#SBATCH` line, which sbatch reads back unchanged.

    sbatch splits these lines itself (`get_argument` in src/sbatch/opt.c, Slurm 22.05), not a
    shell: a word ends at unquoted white space, an unquoted `#` starts a comment, `"` and `'`
    quote, and a backslash takes the next character as it is, inside quotes too. So shell
    quoting does not fit (`'a\\'` leaves its quote open and sbatch stops). Inside double quotes
    with every backslash and double quote escaped, any character but a newline or NUL
    (`unwritable`) reads back as written; plain words are left bare for the reader."""
    why = unwritable(value)
    if why is not None:
        raise ValueError(f"{value!r} holds {why}")
    if _PLAIN_WORD.fullmatch(value) and value.lower() not in _SEPARATORS:
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def output_pattern(run_dir: Path) -> str:
    """The --output file name pattern for `run_dir`/slurm-JOBID.out: a `%` of the path doubled, as
    Slurm reads `%%`. (A path with a backslash has no such pattern: `_problems` refuses it.)"""
    return str(run_dir).replace("%", "%%") + "/slurm-%j.out"


def _options(spec: ClusterSpec, run_dir: Path, workdir: str) -> list[tuple[str, str]]:
    """Each sbatch option of the script with the JSON path of the spec field it comes from."""
    slurm = spec.slurm or SlurmSpec()
    options = [
        ("$.name", f"--job-name={spec.name}"),
        ("$.slurm.nodes", f"--nodes={slurm.nodes + slurm.spare_nodes}"),
        ("$.slurm", "--no-kill"),  # a node that fails does not end the allocation: the launcher decides
        ("$.slurm.tasks_per_node", f"--ntasks-per-node={tasks_per_node(slurm)}"),
        ("$.run_root", f"--output={output_pattern(run_dir)}"),
        ("$.run_root", "--open-mode=append"),  # a requeued job adds to the same file
        ("$.workdir", f"--chdir={workdir}"),
        ("$.slurm.requeue", "--requeue" if slurm.requeue else "--no-requeue"),
    ]
    if slurm.signal_before_end_s:  # to the steps: the workers save
        options.append(("$.slurm.signal_before_end_s", f"--signal=TERM@{slurm.signal_before_end_s}"))
    for key, flag in (("partition", "partition"), ("account", "account"), ("time_limit", "time")):
        value = getattr(slurm, key)
        if value is not None:
            options.append((f"$.slurm.{key}", f"--{flag}={value}"))
    if slurm.gpus_per_node:
        options.append(("$.slurm.gpus_per_node", f"--gpus-per-node={slurm.gpus_per_node}"))
    options += [(f"$.slurm.sbatch_options[{i}]", option) for i, option in enumerate(slurm.sbatch_options)]
    return options


_FIXES = {
    "$.run_root": "choose a run_root without one (an absolute one when the working directory has it)",
    "$.workdir": "set workdir to a directory without one",
}


def _problems(options: list[tuple[str, str]], run_dir: Path) -> list[SpecProblem]:
    problems = []
    for path, option in options:
        why = unwritable(option)
        if why is not None:
            fix = _FIXES.get(path, "remove it")
            problems.append(SpecProblem(path, f"sbatch cannot be given {_shown(option)}: it holds {why}; {fix}"))
    if "\\" in str(run_dir):
        problems.append(
            SpecProblem(
                "$.run_root",
                f"the run directory {_shown(str(run_dir))} has a backslash: Slurm drops every backslash of an "
                f"--output path that has one (and expands no %j there); {_FIXES['$.run_root']}",
            )
        )
    return problems


def _shown(text: str) -> str:
    text = json.dumps(text)
    return text if len(text) <= 80 else text[:77] + "..."


def batch_script(spec: ClusterSpec, spec_copy: Path, run_dir: Path) -> str:
    """The sbatch script for `spec`; it runs `launch --slurm` on the copy of the spec.

    Raises SpecError (naming the field) when a value cannot reach sbatch as it is."""
    workdir = spec.workdir or os.getcwd()
    options = _options(spec, run_dir, workdir)
    problems = _problems(options, run_dir)
    if problems:
        raise SpecError("launch slurm submit", problems)
    # -P: the launcher starts in the job's working directory, whose files must not stand in for its modules
    command = [spec.python or sys.executable, "-P", "-m", "launcher", "--cluster", str(spec_copy), "--slurm", "--plain"]
    lines = ["#!/bin/bash", *(f"#SBATCH {sbatch_word(option)}" for _, option in options), ""]
    lines += [
        "# Written by `launch slurm submit`; the spec it runs is the copy beside this script.",
        "# SLURM_RESTART_COUNT counts requeues; the attempts of earlier runs stay in the run directory.",
        "exec " + " ".join(shlex.quote(part) for part in command),
        "",
    ]
    return "\n".join(lines)


def write_job(spec: ClusterSpec, run_dir: Path) -> Path:
    """The spec copy and the script in the run directory (private: the spec may hold secrets)."""
    spec_copy = run_dir / "submitted-spec.json"
    text = batch_script(spec, spec_copy, run_dir)  # first: a value sbatch cannot take leaves nothing behind
    make_private_dir(run_dir)
    data = spec.model_dump(mode="json", exclude_unset=True, exclude={"hosts"})
    data["run_root"] = str(run_dir.parent)  # the job may start elsewhere: the same run directory
    with open_private(spec_copy, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2)
    script = run_dir / "submit.sbatch"
    with open_private(script, "w", encoding="utf-8") as handle:
        handle.write(text)
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
        said = (done.stderr or done.stdout).strip() or f"exit code {done.returncode}"
        if any(words in said.lower() for words in _NO_SLURM_HERE):
            raise SubmitError(
                f"sbatch cannot reach a Slurm from this machine: {said}; run `launch slurm submit` on a Slurm login "
                f"node (script: {script})"
            )
        if any(words in said.lower() for words in _SLURM_BUSY):
            raise SubmitError(f"sbatch could not submit the job: {said}; submit it again later (script: {script})")
        limit = (
            " (a QOS submit limit clears as your queued jobs end: submit again then)" if "qos" in said.lower() else ""
        )
        raise SubmitRefused(
            f"sbatch refused the job: {said}; check the spec's slurm section (partition, account, time_limit, "
            f"nodes, gpus_per_node, sbatch_options) against this cluster's `sinfo`{limit} (script: {script})"
        )
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
    """Echo the job's output until it ends; its exit code (0 when it completed). A requeued job's
    time back in the queue is said when it begins and ends, so a quiet follow is never a mystery."""
    offset, previous = 0, "RUNNING"
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
        change = queue_change(job_id, previous, fields)
        if change:
            say(change)
        previous = state or previous
        if state in _ENDED:
            exit_code, restarts = fields.get("ExitCode", "?"), fields.get("Restarts", "0")
            say(f"job {job_id} ended: {state} (exit {exit_code}, requeued {restarts}x)")
            return 0 if state == "COMPLETED" else 1
        time.sleep(_POLL_S)


def queue_change(job_id: str, previous: str, fields: dict[str, str]) -> str | None:
    """What a followed job's move between running and waiting means to its user, or None."""
    state, reason = fields.get("JobState", ""), fields.get("Reason", "None")
    if state in _WAITING and previous not in _WAITING:
        eligible = fields.get("EligibleTime", "")
        when = f", eligible at {eligible}" if eligible[:1].isdigit() else ""
        why = (
            ": Slurm holds a requeued job for AuthInfo's cred_expire (120 s by default) before it runs again"
            if reason == "BeginTime"
            else ""
        )
        return f"job {job_id} is back in the queue ({state.lower()}, reason {reason}{when}){why}"
    if state == "RUNNING" and previous in _WAITING:
        nodes, restarts = fields.get("NodeList", "?"), fields.get("Restarts", "?")
        return f"job {job_id} is running again on {nodes} (requeued {restarts}x)"
    return None
