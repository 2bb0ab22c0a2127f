"""The `#SBATCH` lines of `launch slurm submit` read by the real sbatch (a one-node lab,
tests/labs/slurm.py): the working directory, the output path and an sbatch option full of quotes,
backslashes, `#` and `%` reach Slurm as the spec has them. A few seconds; the job is a shell
script of two lines in place of the launcher, and nothing is left in the queue."""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from launcher.slurm.submit import batch_script
from launcher.spec.load import parse_spec

ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL")


@pytest.fixture(scope="module")
def slurm() -> Iterator[Any]:
    from tests.labs.slurm import lab_or_skip

    yield from lab_or_skip(1)


@pytest.fixture
def cluster(slurm: Any) -> Iterator[Any]:
    """The lab; after each test no job is left in the queue."""
    yield slurm
    from tests.labs.slurm import cancel_left_jobs

    queued = cancel_left_jobs(slurm)
    assert not queued, f"jobs left in the queue: {queued}"


def test_sbatch_reads_every_value_as_the_spec_has_it(cluster: Any, work: Path) -> None:
    workdir = work / "work dir \\ with \"quotes\" 'and' #hash %j"
    workdir.mkdir()
    run_root = work / "runs 50% %j #x 'q' \"d\""
    comment = "a \\ b \"c\" 'd' #e $HOME %j\\"
    spec = parse_spec(
        {
            "name": "odd-values",
            "workdir": str(workdir),
            "run_root": str(run_root),
            "slurm": {"nodes": 1, "signal_before_end_s": 0, "sbatch_options": [f"--comment={comment}"]},
        },
        hosts_from=lambda first: None,
    )
    run_dir = run_root / spec.name
    run_dir.mkdir(parents=True)
    header = batch_script(spec, run_dir / "submitted-spec.json", run_dir).split("\n\n")[0]
    script = work / "job.sbatch"
    script.write_text(header + '\n\nprintf "%s\\n" "$SLURM_JOB_NAME" "$(pwd -P)"\n', encoding="utf-8")
    done = cluster.run("sbatch", "--parsable", str(script), check=False)
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip().split(";")[0]
    fields = cluster.wait_job(job, ENDED, timeout=30)
    assert fields["JobState"] == "COMPLETED", fields
    output = run_dir / f"slurm-{job}.out"
    assert output.read_text(encoding="utf-8").splitlines() == [spec.name, os.path.realpath(workdir)]
    seen = cluster.run("squeue", "-h", "-t", "all", "-j", job, "-o", "%k").stdout
    assert seen.rstrip("\n") == comment


def test_shell_quoting_is_what_sbatch_stopped_at(cluster: Any, work: Path) -> None:
    """The old writer's line (shlex.quote) with a trailing backslash: sbatch refuses the script."""
    script = work / "job.sbatch"
    script.write_text(f"#!/bin/bash\n#SBATCH {shlex.quote('--comment=a' + chr(92))}\ntrue\n", encoding="utf-8")
    done = cluster.run("sbatch", "--parsable", "--hold", str(script), check=False)
    assert done.returncode != 0 and "Unmatched" in done.stderr, done
