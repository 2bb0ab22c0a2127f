"""The agent's keeper: it kills the groups of a killed agent's tasks, and only those."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import psutil
import pytest

from launcher.agent import keeper, spawn

SLEEP = [sys.executable, "-c", "import time; time.sleep(120)"]


def _group(argv: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, process_group=0)


def _program(proc: subprocess.Popen[bytes]) -> str:
    assert isinstance(proc.args, list)
    return str(proc.args[0])


def _end(*procs: subprocess.Popen[bytes]) -> None:
    for proc in procs:
        proc.kill()
        proc.wait(timeout=10)


def test_only_a_group_still_led_or_held_by_what_was_started_is_doomed() -> None:
    led, reused = _group(SLEEP), _group(SLEEP)
    # a group whose leader is gone but whose member lives on, under the leader's number
    parent = _group(
        [sys.executable, "-c", "import subprocess, sys, time; subprocess.Popen(sys.argv[1:]); time.sleep(0.2)", *SLEEP]
    )
    try:
        started = keeper._start_time(led.pid)
        assert started is not None
        parent.wait(timeout=10)
        assert any(p.pid != parent.pid and _pgid(p.pid) == parent.pid for p in psutil.process_iter())
        listed = {led.pid: started, reused.pid: "1", parent.pid: "1", 2**22 + 7: "1"}
        # led: the same process; reused: another process under the number; parent: leader reaped,
        # member holds the group; the last names nothing at all
        assert sorted(keeper.doomed(listed)) == sorted([led.pid, parent.pid])
    finally:
        _end(led, reused)
        os.killpg(parent.pid, signal.SIGKILL)  # the member
        member_gone = [p for p in psutil.process_iter() if _pgid(p.pid) == parent.pid]
        psutil.wait_procs(member_gone, timeout=10)
    assert not [p for p in psutil.process_iter() if _pgid(p.pid) in (led.pid, reused.pid, parent.pid)]


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def test_a_released_keeper_leaves_and_kills_nothing_a_killed_one_makes_tasks_start_the_kernels_way() -> None:
    kept = keeper.start()
    assert kept is not None
    task = spawn.start_task(SLEEP, dict(os.environ), None, subprocess.DEVNULL, (), kept)
    try:
        assert _program(task) == sys.executable
        kept.release()  # the agent killed its tasks itself (here: it did not, to see that nothing is killed)
        with pytest.raises(ChildProcessError):
            os.waitpid(kept.pid, os.WNOHANG)  # reaped by release
        assert task.poll() is None
    finally:
        _end(task)
    second = keeper.start()
    assert second is not None
    os.kill(second.pid, signal.SIGKILL)
    os.waitpid(second.pid, 0)
    task = spawn.start_task(SLEEP, dict(os.environ), None, subprocess.DEVNULL, (), second)
    try:
        assert not second.lives()
        if spawn.setpriv() is not None:
            assert _program(task) == spawn.setpriv()  # the keeper is gone: the kernel's death signal instead
    finally:
        _end(task)
        second.release()
