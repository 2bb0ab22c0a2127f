"""The text dry run: a plan a user can read, and copy from."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from launcher.cli.launch_command import Would, dry_run
from launcher.plan import LaunchPlan, PlanInputs, build_plan
from launcher.spec.load import parse_spec

INPUTS = PlanInputs(run_dir="/runs/r", attempt=1, launcher_python="/usr/bin/python3", launcher_cwd="/work")


def _plan(argv: list[str]) -> LaunchPlan:
    spec = parse_spec(
        {
            "name": "r",
            "hosts": [{"address": "localhost", "workers": 1, "ports": [5000]}],
            "training": {"kind": "command", "argv": argv},
        }
    )
    return build_plan(spec, INPUTS)


def test_a_dry_runs_command_line_is_quoted_as_a_shell_reads_it(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["python", "-c", "import sys; print('a b')", "--flag=x y", "it's"]
    dry_run(_plan(argv), False)
    [line] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  command: ")]
    assert shlex.split(line.removeprefix("  command: "))[1:] == argv[1:], line


@pytest.mark.parametrize(("do", "end"), [("nothing", ""), ("refused", ".")])
def test_a_plan_that_would_not_start_says_so_first(capsys: pytest.CaptureFixture[str], do: str, end: str) -> None:
    """A finished run's dry run plans an attempt that never comes: its answer leads, not only ends."""
    says = "the launch would start nothing: the run already trained all its training.steps=4"
    dry_run(_plan(["python", "-c", "pass"]), False, would=Would(do, says + end))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{says}. The plan below would not start:" and lines[2].startswith("run r: 1 task(s)")
    assert says in lines[-3]  # and still where it always was, after the plan


def test_a_plan_that_would_start_leads_with_the_plan(capsys: pytest.CaptureFixture[str]) -> None:
    dry_run(_plan(["python", "-c", "pass"]), False, would=Would("resume", "the launch would resume from X"))
    assert capsys.readouterr().out.startswith("run r: 1 task(s)")


@pytest.mark.parametrize("preview", ["--dry-run", "--check"])
def test_fresh_cannot_be_previewed_and_says_what_it_would_do(
    capsys: pytest.CaptureFixture[str], preview: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from launcher.cli.main import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "local").mkdir(parents=True)
    assert main(["--local", "1", preview, "--fresh"]) == 2
    err = capsys.readouterr().err
    assert "renames the run directory" in err and "deleting nothing" in err and "Traceback" not in err, err
