"""How the agent starts a task: leading its own process group, with the run's umask, killed with its
agent: by the agent's keeper (Python keeps vfork), else by the kernel's parent-death signal, through
setpriv where it works, else a preexec_fn."""

from __future__ import annotations

import errno
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
from launcher.agent import keeper, spawn
kept = keeper.start() if sys.argv[2] == "keeper" else None
if sys.argv[2] == "preexec":
    spawn._setpriv[:] = [None]
code = "import sys, time; print('up', flush=True); time.sleep(120)"
env = {**os.environ, "TFLAUNCH_UMASK": "027"}
proc = spawn.start_task([sys.executable, "-c", code], env, None, 1, (), kept)
print(proc.pid, proc.args[0], flush=True)
sys.stdin.read()
"""


def _umask(pid: int) -> str:
    status = Path(f"/proc/{pid}/status").read_text()
    return next(line.split()[1] for line in status.splitlines() if line.startswith("Umask:"))


@pytest.mark.parametrize("way", ["keeper", "setpriv", "preexec"])
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
        assert (program == spawn.setpriv()) == (way == "setpriv"), program  # the keeper's: started as it is
        assert os.getpgid(task.pid) == task.pid
        assert _umask(task.pid) == "0027"
        keepers = [p for p in psutil.Process(holder.pid).children() if p.pid != task.pid]
        assert len(keepers) == (way == "keeper"), keepers
        holder.kill()
        holder.wait(timeout=10)
        gone, alive = psutil.wait_procs([task, *keepers], timeout=10)
        assert gone and not alive, f"outlived its agent: {alive}"
    finally:
        holder.kill()
        holder.wait(timeout=10)
        assert not psutil.pid_exists(int(pid_text)) or psutil.Process(int(pid_text)).status() == psutil.STATUS_ZOMBIE


def _executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_a_program_exec_would_not_run_as_it_is_is_started_the_way_that_says_why(tmp_path: Path) -> None:
    """setpriv would print its own complaint after the task seemed to start, or hand a file without
    `#!` to /bin/sh (an empty file would then 'succeed'); Popen raises what the agent reports."""
    with pytest.raises(FileNotFoundError):
        spawn.start_task(["no-such-program-here"], {"PATH": str(tmp_path)}, str(tmp_path), subprocess.DEVNULL, ())
    (tmp_path / "plain").write_text("#!/bin/sh\n")
    with pytest.raises(PermissionError):
        spawn.start_task(["./plain"], {"PATH": ""}, str(tmp_path), subprocess.DEVNULL, ())
    for name, text in [("empty", ""), ("noshebang", "print('py')\n")]:
        _executable(tmp_path / name, text)
        with pytest.raises(OSError) as caught:
            spawn.start_task([f"./{name}"], {"PATH": ""}, str(tmp_path), subprocess.DEVNULL, ())
        assert caught.value.errno == errno.ENOEXEC, name
    _executable(tmp_path / "badinterp", "#!/nonexistent/interp\n")
    with pytest.raises(FileNotFoundError):
        spawn.start_task(["./badinterp"], {"PATH": ""}, str(tmp_path), subprocess.DEVNULL, ())


def test_programs_are_found_as_execvp_finds_them(tmp_path: Path) -> None:
    folder = tmp_path / "bin"
    folder.mkdir()
    _executable(folder / "tool", "#!/bin/sh\n")
    (folder / "plain").write_text("")
    env = {"PATH": f"/nonexistent:{folder}"}
    assert spawn._startable("tool", env, None)
    assert not spawn._startable("plain", env, None)  # not executable
    assert not spawn._startable("bin", {"PATH": str(tmp_path)}, None)  # a directory
    assert spawn._startable("bin/tool", {"PATH": ""}, str(tmp_path))  # a path: from the working directory
    assert spawn._startable("tool", {"PATH": "bin"}, str(tmp_path))  # a relative PATH entry, too
    assert not spawn._startable("tool", {"PATH": "bin"}, str(folder))
    assert spawn._startable(sys.executable, {}, None)  # an ELF binary


def test_what_the_kernel_runs_itself_is_what_goes_through_setpriv(tmp_path: Path) -> None:
    assert spawn._runs_as_is(str(_executable(tmp_path / "sh", "#!/bin/sh -e\necho\n")))
    assert spawn._runs_as_is(str(_executable(tmp_path / "spaced", "#! /bin/sh\n")))
    assert not spawn._runs_as_is(str(_executable(tmp_path / "relative", "#!sh\n")))
    assert not spawn._runs_as_is(str(_executable(tmp_path / "nothing", "#!\n")))
    assert not spawn._runs_as_is(str(_executable(tmp_path / "text", "echo hi\n")))
    assert not spawn._runs_as_is(str(tmp_path / "absent"))
