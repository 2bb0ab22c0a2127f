"""Shared fixtures: run `launch`, and prove every process a test started is gone at the end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

REPO = Path(__file__).resolve().parent.parent
HELPERS = REPO / "tests" / "helpers"


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def pytest_configure(config: pytest.Config) -> None:
    """A suite stopped by SIGTERM or SIGINT still tears its fixtures down (pytest does so for
    KeyboardInterrupt): daemons, namespaces and containers are removed however a run ends, save
    SIGKILL. SIGINT is handled even when the suite inherited it ignored (a shell's `&` does that)."""
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session", autouse=True)
def _no_agent_scratch_left() -> Iterator[None]:
    """A test that SIGKILLs an agent leaves its scratch directory for the next agent to remove, as a
    user's next launch would; the last such directory of the session is removed here, by the agents'
    own rule (never one whose agent still holds its lock). An agent of the last test may still be on its
    way out (its launcher ended, its own exit follows): its directory is waited for, 30 s at most."""
    import tempfile

    from launcher.agent.scratch import PREFIX, remove_if_left

    started = time.time()
    yield
    with os.scandir(tempfile.gettempdir()) as entries:
        left = [
            e.path for e in entries if e.name.startswith(PREFIX) and e.stat(follow_symlinks=False).st_mtime >= started
        ]
    deadline = time.monotonic() + 30
    while left and time.monotonic() < deadline:
        left = [path for path in left if os.path.exists(path) and not remove_if_left(path)]
        if left:
            time.sleep(0.2)


def processes_mentioning(marker: str) -> list[psutil.Process]:
    """Live processes whose environment or command line contains `marker` (a test's tmp dir)."""
    found = []
    for proc in psutil.process_iter(["pid", "status"]):
        if proc.pid == os.getpid() or proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            env = proc.environ()
            cmdline = " ".join(proc.cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):  # gone or not ours
            continue
        if marker in cmdline or any(marker in value for value in env.values()):
            found.append(proc)
    return found


def tasks_of(agent: psutil.Process) -> list[psutil.Process]:
    """An agent's children but its keeper (forked from it: the same command line, a session of its own)."""
    return [child for child in agent.children() if child.cmdline() != agent.cmdline()]


def wait_until_gone(marker: str, timeout: float) -> list[psutil.Process]:
    """Wait for every process mentioning `marker` to exit; return the ones still alive."""
    deadline = time.monotonic() + timeout
    while True:
        alive = processes_mentioning(marker)
        if not alive:
            return []
        _, still = psutil.wait_procs(alive, timeout=max(0.0, min(0.5, deadline - time.monotonic())))
        if time.monotonic() >= deadline:
            return still


@pytest.fixture
def work(tmp_path: Path) -> Iterator[Path]:
    """A per-test directory; after the test, no process that mentions it may be left."""
    yield tmp_path
    leftovers = wait_until_gone(str(tmp_path), timeout=15)
    for proc in leftovers:  # clean up what we started, then fail the test
        try:
            proc.kill()
        except psutil.NoSuchProcess:  # exited meanwhile
            pass
    assert not leftovers, f"processes left behind: {[(p.pid, p.info) for p in leftovers]}"


def launcher_traceback(output: str) -> bool:
    """Whether the launcher itself printed a traceback (task output is prefixed with the task's name)."""
    return any(line.startswith("Traceback") for line in output.splitlines())


def write_spec(directory: Path, spec: dict[str, Any], name: str = "cluster.json") -> Path:
    path = directory / name
    path.write_text(json.dumps(spec), encoding="utf-8")
    return path


def launch_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "launcher", *args]


def run_launch(
    args: list[str], cwd: Path, timeout: float = 240, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})}
    return subprocess.run(launch_cmd(*args), cwd=cwd, capture_output=True, text=True, timeout=timeout, env=full_env)


def local_spec(name: str, workers: int, run_root: Path, **training: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": name,
        "run_root": str(run_root),
        "hosts": [{"address": "localhost", "workers": workers}],
        "env": {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(HELPERS)},
        "restart": {"max_restarts": 0, "grace_period_s": 5},
    }
    if training:
        spec["training"] = training
    return spec


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from tests.labs.sshd import sshd_binary, start_sshd

    if sshd_binary() is None:
        pytest.fail("sshd is missing: run the tests through scripts/test.sh, which installs openssh-server")
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()
    assert server.process.poll() is not None


@pytest.fixture(scope="module")
def netns_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Two namespace hosts with their own addresses and sshd; every rule healed after each test."""
    from tests.labs.netns import make_lab, unavailable_reason

    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    lab = make_lab(tmp_path_factory.mktemp("netns"), 2)
    try:
        yield lab
    finally:
        lab.close()


@pytest.fixture
def lab(netns_lab: Any) -> Iterator[Any]:
    """The module's namespace hosts, with no partition left over from a test (pass or fail)."""
    yield netns_lab
    netns_lab.heal()
    for host in netns_lab.hosts:
        assert not host.tasks_alive(), f"processes left in {host.namespace}: {host.tasks_alive()}"
