"""The agent takes a task's stacks from real processes: by py-spy, by the task's registered faulthandler, and
never by a signal a process did not register (it would die of it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.agent import stacks
from tests.conftest import REPO

STUCK = """
import os, signal, sys, threading, time
sys.path.insert(0, {repo!r})
if {register}:
    from tflaunch.stacks import STACK_SIGNAL, allow_stack_dumps
    allow_stack_dumps()
    if os.environ.get("RESET"):
        signal.signal(STACK_SIGNAL, signal.SIG_DFL)  # as a program that re-executes itself would be
def stuck_here():
    print("ready", flush=True)
    time.sleep(600)
threading.Thread(target=time.sleep, args=(600,), name="helper", daemon=True).start()
stuck_here()
"""


@pytest.fixture
def start(tmp_path: Path) -> Iterator[object]:
    started: list[subprocess.Popen[bytes]] = []

    def run(register: bool, prefix: tuple[str, ...] = (), **env_more: str) -> tuple[subprocess.Popen[bytes], str]:
        script = tmp_path / "stuck.py"
        script.write_text(STUCK.format(repo=str(REPO), register=register))
        stack_file = str(tmp_path / f"{len(started)}.stack")
        env = {**os.environ, "TFLAUNCH_STACK_FILE": stack_file, **env_more}
        argv = [*prefix, sys.executable, str(script)]
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, process_group=0)
        started.append(proc)
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        return proc, stack_file

    yield run
    for proc in started:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    assert all(proc.poll() is not None for proc in started)


def test_the_registered_faulthandler_writes_every_thread(start, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(stacks, "py_spy", lambda: None)
    proc, stack_file = start(True)
    taken = stacks.capture(proc.pid, stack_file, stopped=False)
    assert taken["via"] == "faulthandler", taken
    assert "in stuck_here" in taken["text"] and "threading.py" in taken["text"]
    again = stacks.capture(proc.pid, stack_file, stopped=False)  # a second time: only what it wrote now
    assert again["text"].count("in stuck_here") == 1 and proc.poll() is None


def test_a_process_that_registered_nothing_is_never_signalled(start, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(stacks, "py_spy", lambda: None)
    proc, stack_file = start(False)
    taken = stacks.capture(proc.pid, stack_file, stopped=False)
    assert taken["via"] is None and "registered no stack signal" in taken["why"]
    assert "py-spy is not installed" in taken["why"]
    assert proc.poll() is None, "a SIGUSR2 it did not register would have killed it"


def test_a_stopped_task_is_said_so_at_once(start) -> None:  # type: ignore[no-untyped-def]
    proc, stack_file = start(True)
    os.kill(proc.pid, signal.SIGSTOP)
    taken = stacks.capture(proc.pid, stack_file, stopped=True)
    assert taken == {"via": None, "why": "its process is held stopped (SIGSTOP): no stack can be taken"}
    os.kill(proc.pid, signal.SIGCONT)


@pytest.mark.skipif(stacks.py_spy() is None, reason="py-spy is not installed here (it is in the test extras)")
def test_py_spy_reads_the_python_child_of_a_shell_leader(start) -> None:  # type: ignore[no-untyped-def]
    proc, stack_file = start(False, ("sh", "-c", 'exec 3>&1; "$@"; :', "sh"))  # the shell leads; python is its child
    taken = stacks.capture_all([(7, proc.pid, stack_file, False)])["7"]
    assert taken["via"] == "py-spy", taken
    (process,) = taken["processes"]
    assert process["pid"] != proc.pid
    main = next(t for t in process["threads"] if t["name"] == "MainThread")
    assert [f[0] for f in main["frames"] if not f[3]][:2] == ["stuck_here", "<module>"]


def test_the_python_trampoline_registers_the_stack_signal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A python command whose arguments hold a secret runs through the trampoline: its stacks come too."""
    import json

    from worker.contract import ARGV_TRAMPOLINE

    monkeypatch.setattr(stacks, "py_spy", lambda: None)
    script = tmp_path / "stuck.py"
    script.write_text(STUCK.format(repo=str(REPO), register=False))
    stack_file = str(tmp_path / "t.stack")
    env = {**os.environ, "TFLAUNCH_STACK_FILE": stack_file, "TFLAUNCH_ARGV": json.dumps([str(script), "--token=x"])}
    proc = subprocess.Popen([sys.executable, "-c", ARGV_TRAMPOLINE], env=env, stdout=subprocess.PIPE, process_group=0)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        taken = stacks.capture(proc.pid, stack_file, stopped=False)
        assert taken["via"] == "faulthandler" and "in stuck_here" in taken["text"], taken
    finally:
        proc.kill()
        proc.wait()


def test_a_task_that_no_longer_catches_its_stack_signal_is_never_sent_it(
    start, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(stacks, "py_spy", lambda: None)
    proc, stack_file = start(True, RESET="1")
    taken = stacks.capture(proc.pid, stack_file, stopped=False)
    assert taken["via"] is None and "no longer catches its stack signal" in taken["why"], taken
    assert proc.poll() is None, "the signal it no longer catches would have killed it"


def test_a_program_s_own_handler_on_the_signal_is_left_in_place(tmp_path: Path) -> None:
    from tflaunch.stacks import STACK_SIGNAL

    code = (
        f"import os, signal, sys; sys.path.insert(0, {str(REPO)!r}); signal.signal({STACK_SIGNAL}, lambda *a: None);"
        "from tflaunch.stacks import allow_stack_dumps; allow_stack_dumps();"
        f"print(callable(signal.getsignal({STACK_SIGNAL})))"
    )
    stack_file = tmp_path / "own.stack"
    env = {**os.environ, "TFLAUNCH_STACK_FILE": str(stack_file)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, process_group=0)
    assert done.stdout.strip() == "True" and not stack_file.exists(), done
