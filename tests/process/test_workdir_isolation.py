"""The launcher's own processes (agent, probe, spare) import nothing from the working directory.

A working directory holds a module of every standard-library name (and tensorflow, worker,
launcher, sitecustomize, ...), each of which leaves a marker file when imported. The real `launch`
script (not `python -m launcher`, which itself puts the working directory on sys.path) checks
and runs from there, and a warm spare takes a task whose script lives there: no marker may
appear. The user's own script may import what it likes; these scripts import nothing.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

from launcher.plan import PlanInputs, build_plan
from launcher.spec.load import parse_spec
from launcher.transport.base import OutputLine
from tests.conftest import REPO
from tests.labs.ports import free_port
from tests.process.test_spares import local_transport, run_to_end, standing_by, warm_report

LAUNCH = Path(sys.executable).parent / "launch"
EXTRA = (
    "tensorflow",
    "worker",
    "launcher",
    "tflaunch",
    "sitecustomize",
    "usercustomize",
    "_distutils_hack",
    "psutil",
    "pydantic",
)


def planted(work: Path) -> tuple[Path, Path]:
    """A working directory full of modules that betray their import, and the markers' directory."""
    directory, markers = work / "project", work / "markers"
    directory.mkdir()
    markers.mkdir()
    for name in sorted(set(sys.stdlib_module_names) | set(EXTRA)):
        (directory / f"{name}.py").write_text(f"open({str(markers)!r} + '/' + __name__, 'w').close()\n")
    return directory, markers


def imported(markers: Path) -> list[str]:
    return sorted(path.name for path in markers.iterdir())


def launch(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    return subprocess.run(
        [str(LAUNCH), *args], cwd=directory, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_check_and_run_import_nothing_from_the_working_directory(work: Path) -> None:
    assert LAUNCH.exists(), f"{LAUNCH}: install the project into its venv (pip install -e .)"
    directory, markers = planted(work)
    checked = launch(directory, "--local", "1", "--check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "preflight passed" in checked.stdout + checked.stderr
    assert imported(markers) == []
    ran = launch(directory, "--local", "2", "--", "python3", "-c", "pass")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert imported(markers) == []


def test_a_spare_imports_nothing_from_the_working_directory(work: Path) -> None:
    """The task's script sits in the working directory, so that directory is first on sys.path
    once the spare becomes the task: whatever the spare still imports then must already be loaded."""
    directory, markers = planted(work)
    ran = work / "ran"
    (directory / "train.py").write_text(f"open({str(ran)!r}, 'w').write(__name__)\n")
    launches = []
    for attempt in (0, 1):
        spec = parse_spec(
            {
                "name": "s",
                "env": {"PYTHONPATH": str(REPO)},
                "training": {"kind": "command", "argv": ["python", "train.py"]},
                "hosts": [{"address": "localhost", "ports": [free_port()]}],
            }
        )
        launch = build_plan(spec, PlanInputs(str(work / "run"), attempt, sys.executable, str(directory))).tasks[0]
        launches.append(dataclasses.replace(launch, preload=("tests.helpers.preloaded",)))
    transport = local_transport()
    try:
        standing_by(transport, launches[0])
        events, exited = run_to_end(transport, launches[1])
        assert warm_report(events)["used"] is True
        output = [event.line for event in events if isinstance(event, OutputLine)]
        assert exited.exit.code == 0, output
    finally:
        transport.close()
    assert ran.read_text() == "__main__"
    assert imported(markers) == []


def test_the_trampoline_that_hides_secret_arguments_imports_nothing_from_the_working_directory(work: Path) -> None:
    """`-- python3 /elsewhere/train.py --token=...` runs through `python -c TRAMPOLINE`, and `-c` puts
    the working directory first on sys.path: the trampoline imports nothing from there, and the script
    still sees its own directory as sys.path[0] and its arguments as given."""
    directory, markers = planted(work)
    elsewhere = work / "elsewhere"
    elsewhere.mkdir()
    said = work / "said"
    script = elsewhere / "train.py"
    script.write_text(f"import sys\nopen({str(said)!r}, 'w').write(repr((sys.argv[1:], sys.path[0])))\n")
    token = "--token=hf_" + "a" * 30
    ran = launch(directory, "--local", "1", "--run-root", str(work / "runs"), "--", "python3", str(script), token)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert imported(markers) == []
    assert said.read_text() == repr(([token], str(elsewhere)))


def test_a_script_beside_its_own_worker_and_launcher_modules_reports_through_tflaunch(work: Path) -> None:
    """The script's directory is first on its sys.path: `from tflaunch import report` must not reach
    for the project's `worker` or `launcher` there, and the script's own `import worker` stays its own."""
    project = work / "project"
    project.mkdir()
    for name in ("worker", "launcher"):
        (project / f"{name}.py").write_text(f"MINE = {name!r}\n")
    (project / "train.py").write_text(
        "from tflaunch import report\nimport launcher, worker\n"
        "print('own modules:', worker.MINE, launcher.MINE)\nreport('step', step=5, total=5)\n"
    )
    ran = launch(project, "--local", "1", "--plain", "--run-root", str(work / "runs"), "--", "python3", "train.py")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "own modules: worker launcher" in ran.stdout
    assert '"final_step": 5' in (work / "runs" / "train" / "summary.json").read_text()


def test_python_m_launcher_from_a_directory_with_its_own_worker_module_uses_the_projects(work: Path) -> None:
    """`python -m` puts the working directory first on sys.path; a user's `worker.py` there is not the runtime."""
    for name in ("worker", "tflaunch"):
        (work / f"{name}.py").write_text(f"open({str(work / ('imported-' + name))!r}, 'w').close()\n")
    ran = subprocess.run(
        [sys.executable, "-m", "launcher", "--local", "1", "--plain", "--run-root", str(work / "runs"), "--"]
        + ["python3", "-c", "print('ran')"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0 and "ran" in ran.stdout, ran.stdout + ran.stderr
    assert not list(work.glob("imported-*"))
