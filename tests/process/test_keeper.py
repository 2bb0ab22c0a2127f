"""The agent's keeper: it kills the groups of a killed agent's tasks, and only those."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from launcher.agent import keeper, spawn

SLEEP = [sys.executable, "-c", "import time; time.sleep(120)"]
# leads a group, leaves a member in it (in our session, or in a session of its own: a daemon), exits
LEAVES_A_MEMBER = (
    "import os, subprocess, sys, time; sys.argv[1] == 'daemon' and os.setsid(); subprocess.Popen(sys.argv[2:])"
)


def _group(argv: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, process_group=0)


def _program(proc: subprocess.Popen[bytes]) -> str:
    assert isinstance(proc.args, list)
    return str(proc.args[0])


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _in_groups(*pgids: int) -> list[psutil.Process]:
    return [p for p in psutil.process_iter() if _pgid(p.pid) in pgids]


def test_only_a_group_still_led_or_held_by_what_was_started_is_doomed() -> None:
    led, reused = _group(SLEEP), _group(SLEEP)
    left = _group([sys.executable, "-c", LEAVES_A_MEMBER, "task", *SLEEP])
    daemon = subprocess.Popen([sys.executable, "-c", LEAVES_A_MEMBER, "daemon", *SLEEP])  # setsid: not a leader yet
    started = {p.pid: keeper.start_time(p.pid) or 0 for p in (led, reused, left, daemon)}
    try:
        left.wait(timeout=10)
        daemon.wait(timeout=10)  # both reaped: their numbers name no process now
        assert _in_groups(left.pid) and [os.getsid(p.pid) for p in _in_groups(daemon.pid)] == [daemon.pid]
        listed = {**started, reused.pid: started[reused.pid] - 1, 2**22 + 7: 1}
        # led: the same process; reused: another process under the number; left: leader gone, a
        # member in our session; daemon: its member in a session of its own; the last names nothing
        assert sorted(keeper.doomed(listed, os.getsid(0))) == sorted([led.pid, left.pid])
    finally:
        for proc in (led, reused):
            proc.kill()
            proc.wait(timeout=10)
        members = _in_groups(left.pid, daemon.pid)
        for member in members:
            member.kill()
        psutil.wait_procs(members, timeout=10)


def test_a_leaving_agents_keeper_kills_what_is_still_listed_and_is_reaped() -> None:
    """The agent killed (and forgot) its tasks; one started while it was leaving is still listed."""
    kept = keeper.start()
    assert kept is not None and kept.lives()
    late = spawn.start_task(SLEEP, dict(os.environ), None, subprocess.DEVNULL, (), kept)
    forgotten = spawn.start_task(SLEEP, dict(os.environ), None, subprocess.DEVNULL, (), kept)
    try:
        assert _program(late) == sys.executable  # as it is: no setpriv in front
        kept.forget(forgotten.pid)  # (the agent would have killed it; here it lives on, to see it is spared)
        kept.release()
        assert not psutil.pid_exists(kept.pid)
        assert late.wait(timeout=10) == -signal.SIGKILL
        assert forgotten.poll() is None
    finally:
        for task in (late, forgotten):
            task.kill()
            task.wait(timeout=10)


def test_a_dead_keeper_makes_tasks_start_the_kernels_way() -> None:
    kept = keeper.start()
    assert kept is not None
    os.kill(kept.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while kept.lives():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    task = spawn.start_task(SLEEP, dict(os.environ), None, subprocess.DEVNULL, (), kept)
    try:
        if spawn.setpriv() is not None:
            assert _program(task) == spawn.setpriv()  # the kernel's death signal instead
    finally:
        task.kill()
        task.wait(timeout=10)
        kept.release()


def test_a_task_a_stopped_keeper_does_not_take_is_started_again_the_kernels_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(keeper, "WRITE_WAIT_S", 0.2)
    kept = keeper.start()
    assert kept is not None
    os.kill(kept.pid, signal.SIGSTOP)
    started = time.monotonic()
    while kept.watch(os.getpid()):  # fills its pipe
        assert time.monotonic() - started < 30
    assert not kept.lives() and not psutil.pid_exists(kept.pid)  # killed: it would keep a stale list
    kept.release()
    kept = keeper.start()
    assert kept is not None
    os.kill(kept.pid, signal.SIGSTOP)
    while kept.watch(os.getpid()):
        pass  # its pipe is full again, but the keeper lives until a line times out
    monkeypatch.setattr(keeper.Keeper, "lives", lambda self: True)  # it looked alive when the task started
    task = spawn.start_task(SLEEP, dict(os.environ), None, subprocess.DEVNULL, (), kept)
    try:
        if spawn.setpriv() is not None:
            assert _program(task) == spawn.setpriv()
        mine = [p for p in psutil.Process().children() if p.cmdline()[-3:] == SLEEP[-3:]]
        assert [p.pid for p in mine] == [task.pid]  # the first one was killed
    finally:
        task.kill()
        task.wait(timeout=10)
        kept.release()
