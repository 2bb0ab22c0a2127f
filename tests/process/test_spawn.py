"""How the agent starts a task: leading its own process group, with the run's umask, killed by the
kernel with its agent; through setpriv where it works (Python keeps vfork), else a preexec_fn."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from launcher.agent import spawn
from tests.conftest import REPO

# Stands in for an agent: starts one task the agent's way, says its pid, then waits to be killed.
HOLDER = """
import os, sys
sys.path.insert(0, sys.argv[1])
from launcher.agent import spawn
if sys.argv[2] == "preexec":
    spawn._setpriv[:] = [None]
code = "import sys, time; print('up', flush=True); time.sleep(120)"
env = {**os.environ, "TFLAUNCH_UMASK": "027"}
proc = spawn.start_task([sys.executable, "-c", code], env, None, 1, ())
print(proc.pid, proc.args[0], flush=True)
sys.stdin.read()
"""


def _umask(pid: int) -> str:
    status = Path(f"/proc/{pid}/status").read_text()
    return next(line.split()[1] for line in status.splitlines() if line.startswith("Umask:"))


@pytest.mark.parametrize("way", ["setpriv", "preexec"])
def test_a_task_leads_its_group_takes_the_umask_and_dies_with_its_agent(way: str) -> None:
    if way == "setpriv" and spawn.setpriv() is None:
        pytest.skip("no setpriv that takes --pdeathsig on this machine")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(REPO), way], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None
    try:
        pid_text, program = holder.stdout.readline().split()
        task = psutil.Process(int(pid_text))
        assert holder.stdout.readline() == "up\n"  # the task's own line: past setpriv, in python
        assert (program == spawn.setpriv()) == (way == "setpriv"), program
        assert os.getpgid(task.pid) == task.pid
        assert _umask(task.pid) == "0027"
        holder.kill()
        holder.wait(timeout=10)
        gone, alive = psutil.wait_procs([task], timeout=10)
        assert gone and not alive, "the task outlived its agent"
    finally:
        holder.kill()
        holder.wait(timeout=10)
        assert not psutil.pid_exists(int(pid_text)) or psutil.Process(int(pid_text)).status() == psutil.STATUS_ZOMBIE


def test_a_program_exec_would_not_find_is_started_the_way_that_says_why(tmp_path: Path) -> None:
    """setpriv would only print its own complaint and exit 127; Popen raises what the agent reports."""
    with pytest.raises(FileNotFoundError):
        spawn.start_task(["no-such-program-here"], {"PATH": str(tmp_path)}, str(tmp_path), subprocess.DEVNULL, ())
    plain = tmp_path / "plain"
    plain.write_text("#!/bin/sh\n")
    with pytest.raises(PermissionError):
        spawn.start_task(["./plain"], {"PATH": ""}, str(tmp_path), subprocess.DEVNULL, ())


def test_programs_are_found_as_execvp_finds_them(tmp_path: Path) -> None:
    folder = tmp_path / "bin"
    folder.mkdir()
    tool = folder / "tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    (folder / "plain").write_text("")
    env = {"PATH": f"/nonexistent:{folder}"}
    assert spawn._findable("tool", env, None)
    assert not spawn._findable("plain", env, None)  # not executable
    assert not spawn._findable("bin", {"PATH": str(tmp_path)}, None)  # a directory
    assert spawn._findable("bin/tool", {"PATH": ""}, str(tmp_path))  # a path: from the working directory
    assert spawn._findable("tool", {"PATH": "bin"}, str(tmp_path))  # a relative PATH entry, too
    assert not spawn._findable("tool", {"PATH": "bin"}, str(folder))
