"""`launch stop RUN`: a stand-in launcher (a real process) is asked to stop, and is gone after."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from launcher.common import exit_codes
from launcher.common.errors import UsageError
from launcher.rundir.status import describe_run
from launcher.rundir.stop import stop_launcher, stop_run
from tests.conftest import HELPERS
from worker.contract import RunLayout

STAND_IN = str(HELPERS / "stand_in_launcher.py")


@pytest.fixture
def layout(work: Path) -> RunLayout:
    layout = RunLayout(str(work / "runs" / "r"))
    Path(layout.run_dir).mkdir(parents=True)
    return layout


def _start(layout: RunLayout, *flags: str) -> subprocess.Popen[str]:
    """The stand-in, once it has written status.json naming itself."""
    proc = subprocess.Popen(
        [sys.executable, STAND_IN, layout.status_file, layout.summary_file, *flags],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    return proc


@pytest.fixture
def stand_ins() -> Iterator[list[subprocess.Popen[str]]]:
    """Every stand-in a test starts is killed and reaped however the test ends."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        assert proc.stdout is not None
        proc.stdout.close()


def test_stop_interrupts_the_launcher_and_waits_until_it_is_gone(
    layout: RunLayout, stand_ins: list[subprocess.Popen[str]]
) -> None:
    proc = _start(layout)
    stand_ins.append(proc)
    assert describe_run(layout.run_dir).exit_code == exit_codes.RUNNING
    said: list[str] = []
    assert stop_run(layout.run_dir, timeout_s=30, say=said.append) == exit_codes.SUCCEEDED
    assert said == [
        f"{layout.run_dir}: asked the launcher (pid {proc.pid}) to stop; waiting up to 30s for it",
        f"{layout.run_dir}: the launcher (pid {proc.pid}) has stopped: interrupted at step 7 after 1 attempt(s) "
        "(0 restart(s), 0 preemption(s))",
    ]
    assert not psutil.pid_exists(proc.pid), "stop returns only once the launcher is gone"
    assert describe_run(layout.run_dir).exit_code == exit_codes.INTERRUPTED


def test_a_launcher_that_does_not_stop_in_time_is_reported_and_left_alone(
    layout: RunLayout, stand_ins: list[subprocess.Popen[str]]
) -> None:
    proc = _start(layout, "--ignore-int")
    stand_ins.append(proc)
    result = stop_launcher(layout.run_dir, timeout_s=0.3)
    assert result.exit_code == exit_codes.RUNNING  # not "the run failed": it has not ended
    assert f"the launcher (pid {proc.pid}) is still running 0.3s after SIGINT" in result.text
    assert f"`launch stop {layout.run_dir}` again (or kill -TERM {proc.pid}) kills its tasks at once" in result.text
    assert proc.poll() is None, "only SIGINT is sent; nothing stronger"
    proc.kill()
    proc.wait(timeout=10)


def test_stopping_a_run_that_has_stopped_is_a_usage_error(
    layout: RunLayout, stand_ins: list[subprocess.Popen[str]]
) -> None:
    stand_ins.append(_start(layout))
    assert stop_launcher(layout.run_dir, timeout_s=30).exit_code == exit_codes.SUCCEEDED
    with pytest.raises(UsageError, match=r"already ended: interrupted at step 7") as caught:
        stop_launcher(layout.run_dir, timeout_s=30)
    assert caught.value.exit_code == exit_codes.USAGE


def test_a_status_file_naming_a_process_that_is_not_the_runs_launcher_signals_nothing(
    layout: RunLayout, stand_ins: list[subprocess.Popen[str]]
) -> None:
    """Anyone can read a process's start time in /proc: status.json is trusted only for the process
    that holds the run's lock, in a run directory of ours alone."""
    import json
    import os

    bystander = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE, text=True
    )
    try:
        forged = {"launcher_pid": bystander.pid, "launcher_started": psutil.Process(bystander.pid).create_time()}
        Path(layout.status_file).write_text(
            json.dumps({**forged, "updated": 0, "attempt": 0, "restarts": 0, "tasks": []})
        )
        with pytest.raises(UsageError, match=f"pid {bystander.pid} does not hold the run's lock"):
            stop_launcher(layout.run_dir, timeout_s=5)
        os.chmod(layout.run_dir, 0o777)
        with pytest.raises(UsageError, match="writable by others.*Nothing was signalled"):
            stop_launcher(layout.run_dir, timeout_s=5)
        assert bystander.poll() is None, "the bystander was signalled"
    finally:
        assert bystander.stdin is not None
        bystander.stdin.close()
        bystander.wait(timeout=10)


@pytest.mark.parametrize("how", ["stop", "sigint", "sigint then stop"])
def test_a_real_launcher_says_who_stopped_it(work: Path, how: str) -> None:
    """After `launch stop` the launcher says that it was `launch stop` (its own log would otherwise
    name only SIGINT, which reads as a Ctrl-C nobody pressed); a plain SIGINT is named as before. A
    `launch stop` while the launcher is already stopping (a second interrupt) leaves no request behind."""
    import signal
    import time

    from tests.conftest import launch_cmd, run_launch

    run_dir = work / "runs" / "local"
    stubborn = "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); " if how == "sigint then stop" else ""
    sleeper = ["python3", "-c", f"{stubborn}import time; print('up', flush=True); time.sleep(60)"]
    proc = subprocess.Popen(
        launch_cmd("--local", "1", "--run-root", str(work / "runs"), "--plain", "--", *sleeper),
        cwd=work,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        while "up" not in proc.stdout.readline():  # the task runs: the launcher supervises it
            assert proc.poll() is None
        deadline = time.monotonic() + 30
        while not (run_dir / "status.json").exists() or describe_run(str(run_dir)).exit_code != exit_codes.RUNNING:
            assert time.monotonic() < deadline, "status.json never said running"
            time.sleep(0.05)
        if how.startswith("sigint"):
            proc.send_signal(signal.SIGINT)
        if how == "sigint then stop":  # the task ignores SIGTERM: the launcher waits out its grace period
            assert proc.stderr is not None
            while "waiting up to" not in proc.stderr.readline():
                assert proc.poll() is None
        if how.endswith("stop"):  # as the user runs it: another process (in this one, psutil would reap it)
            stopped = run_launch(["stop", str(run_dir)], work)
            assert stopped.returncode == exit_codes.SUCCEEDED, stopped.stdout + stopped.stderr
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    expected = "stopped by `launch stop` (pid " if how == "stop" else "stopped by SIGINT; every task was stopped."
    assert expected in err, err
    assert not (run_dir / "stop-request.json").exists()


def test_a_launcher_held_stopped_is_said_to_be_so_and_stops_once_continued(
    layout: RunLayout, stand_ins: list[subprocess.Popen[str]]
) -> None:
    import signal

    proc = _start(layout)
    stand_ins.append(proc)
    proc.send_signal(signal.SIGSTOP)
    while psutil.Process(proc.pid).status() != psutil.STATUS_STOPPED:  # the kernel says so at once, or nearly
        pass
    result = stop_launcher(layout.run_dir, timeout_s=0.3)
    assert result.exit_code == exit_codes.RUNNING
    assert f"the launcher (pid {proc.pid}) is itself stopped (Ctrl-Z or SIGSTOP)" in result.text
    assert f"`kill -CONT {proc.pid}`" in result.text
    proc.send_signal(signal.SIGCONT)  # the SIGINT it was sent waits for it: it now stops
    assert proc.wait(timeout=30) != 0
