"""A shared machine: a run directory nobody else can hijack, one launcher per run, private files."""

from __future__ import annotations

import os
import pwd
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest

from launcher.common.private_files import open_private
from tests.conftest import launch_cmd, run_launch, write_spec
from worker.files import write_atomic

NOBODY = pwd.getpwnam("nobody").pw_uid
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="handing a directory to another user needs root")


def spec(work: Path, name: str = "r") -> Path:
    data = {"name": name, "run_root": str(work / "runs"), "hosts": [{"address": "localhost", "workers": 1}]}
    return write_spec(work, data)


def test_an_atomic_write_replaces_a_planted_symlink_and_never_follows_it(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    target = tmp_path / "summary.json"
    target.symlink_to(victim)
    for stale in ("summary.json.tmp", ".summary.json.tmp"):  # the fixed names of old
        (tmp_path / stale).symlink_to(victim)
    write_atomic(target, "{}")
    assert victim.read_text() == "keep" and not target.is_symlink() and target.read_text() == "{}"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_a_log_is_never_opened_through_a_symlink(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "worker-0.log").symlink_to(victim)
    with pytest.raises(OSError):
        open_private(tmp_path / "worker-0.log", "ab")
    assert victim.read_text() == "keep"


@as_root
def test_a_run_directory_of_another_user_is_refused(work: Path) -> None:
    run_dir = work / "runs" / "r"
    run_dir.mkdir(parents=True)
    os.chown(run_dir, NOBODY, NOBODY)
    proc = run_launch(["--cluster", str(spec(work)), "--", "true"], work)
    assert proc.returncode == 2 and f"belongs to uid {NOBODY}" in proc.stderr, proc.stderr
    assert list(run_dir.iterdir()) == [], "something was written into another user's directory"


@as_root
def test_another_users_planted_checkpoints_are_not_read_before_the_refusal(work: Path) -> None:
    run_dir = work / "runs" / "r"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "checkpoint").write_text('model_checkpoint_path: "ckpt-1"\n')
    (run_dir / "spec.json").write_text('{"training": {"kind": "command", "argv": ["x", "\\u001b[2JFAKE"]}}')
    os.chown(run_dir, NOBODY, NOBODY)
    proc = run_launch(["--cluster", str(spec(work)), "--", "true"], work)
    assert proc.returncode == 2 and f"belongs to uid {NOBODY}" in proc.stderr, proc.stderr
    assert "FAKE" not in proc.stderr and "another training" not in proc.stderr


def test_a_run_directory_others_can_write_is_refused(work: Path) -> None:
    run_dir = work / "runs" / "r"
    run_dir.mkdir(parents=True)
    run_dir.chmod(0o777)
    proc = run_launch(["--cluster", str(spec(work)), "--", "true"], work)
    assert proc.returncode == 2 and "writable by others (mode 0777)" in proc.stderr, proc.stderr
    assert list(run_dir.iterdir()) == []


def test_a_second_launch_of_a_running_run_is_refused_naming_the_first(work: Path) -> None:
    path = spec(work)
    sleeper = ["python3", "-c", "import time; time.sleep(60)"]
    first = subprocess.Popen(
        launch_cmd("--cluster", str(path), "--plain", "--", *sleeper),
        cwd=work,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        lock = work / "runs" / "r" / "launch.lock"
        deadline = time.monotonic() + 30
        while not (lock.exists() and lock.read_text().strip()):
            assert time.monotonic() < deadline and first.poll() is None
            time.sleep(0.05)
        (work / "runs" / "r" / "checkpoints").mkdir(exist_ok=True)
        (work / "runs" / "r" / "checkpoints" / "ckpt-1.index").write_text("the first launch's")
        second = run_launch(["--cluster", str(path), "--", *sleeper], work)
        assert second.returncode == 2 and f"another launcher (pid {first.pid})" in second.stderr, second.stderr
        assert "resuming" not in second.stderr  # refused before any word of resuming
        checked = run_launch(["--cluster", str(path), "--check", "--", *sleeper], work)
        assert checked.returncode == 2 and f"another launcher (pid {first.pid})" in checked.stderr, checked.stderr
        fresh = run_launch(["--cluster", str(path), "--fresh", "--", "true"], work)
        assert fresh.returncode == 2 and f"pid {first.pid}" in fresh.stderr and (work / "runs" / "r").is_dir()
        assert not list((work / "runs" / "r").glob("attempt-1")), "the refused launch started an attempt"
    finally:
        first.send_signal(signal.SIGINT)
        assert first.wait(30) == 130
    again = run_launch(["--cluster", str(path), "--fresh", "--", "true"], work)
    assert again.returncode == 0, again.stderr  # the lock went with the first launcher


def test_tasks_write_files_only_their_user_can_read(work: Path) -> None:
    code = "open('made-by-task', 'w').write('x'); import os; os.mkdir('dir-by-task')"
    proc = run_launch(["--cluster", str(spec(work)), "--", "python3", "-c", code], work)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE((work / "made-by-task").stat().st_mode) == 0o600
    assert stat.S_IMODE((work / "dir-by-task").stat().st_mode) == 0o700
    checkpoints = work / "runs" / "r" / "checkpoints"  # made by the launcher for them: as private
    assert stat.S_IMODE(checkpoints.stat().st_mode) == 0o700


@pytest.mark.parametrize("owner_mode", [("nobody", 0o755), ("self", 0o777), ("self", 0o1777)])
def test_a_checkpoint_directory_others_control_fails_the_preflight(work: Path, owner_mode: tuple[str, int]) -> None:
    owner, mode = owner_mode
    if owner == "nobody" and os.geteuid() != 0:
        pytest.skip("handing a directory to another user needs root")
    shared = work / "shared"
    shared.mkdir()
    shared.chmod(mode)
    if owner == "nobody":
        os.chown(shared, NOBODY, NOBODY)
    data = {
        "name": "c",
        "run_root": str(work / "runs"),
        "checkpoint_dir": str(shared),
        "hosts": [{"address": "localhost", "workers": 1}],
    }
    proc = run_launch(["--cluster", str(write_spec(work, data)), "--check"], work)
    assert proc.returncode == 2 and f"checkpoint_dir {shared} " in proc.stderr, proc.stderr
    assert "a checkpoint planted there would be restored" in proc.stderr
    shared.chmod(0o700)
    os.chown(shared, os.geteuid(), os.getegid())
    ok = run_launch(["--cluster", str(write_spec(work, data)), "--check"], work)
    assert ok.returncode == 0, ok.stderr


@as_root
def test_a_run_directory_another_user_could_swap_is_refused(work: Path) -> None:
    """A symbolic link planted as the run directory, or a run root inside a directory of another user's
    (who could rename the run directory away at any time): refused, nothing written."""
    shared = work / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o1777)  # as /tmp: anybody may add entries, only their owners rename them
    victim = work / "victim"
    victim.mkdir()
    os.symlink(victim, shared / "r")
    os.lchown(shared / "r", NOBODY, NOBODY)
    data = {"name": "r", "run_root": str(shared), "hosts": [{"address": "localhost", "workers": 1}]}
    proc = run_launch(["--cluster", str(write_spec(work, data)), "--", "true"], work)
    assert proc.returncode == 2 and "symbolic link of uid" in proc.stderr, proc.stderr
    (shared / "r").unlink()
    os.symlink(victim, shared / "r")  # our own link: still not a directory of the run's own
    proc = run_launch(["--cluster", str(write_spec(work, data)), "--", "true"], work)
    assert proc.returncode == 2 and "is a symbolic link" in proc.stderr, proc.stderr
    theirs = shared / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    data["run_root"] = str(theirs / "runs")
    proc = run_launch(["--cluster", str(write_spec(work, data)), "--", "true"], work)
    assert proc.returncode == 2 and f"{theirs} belongs to uid {NOBODY}" in proc.stderr, proc.stderr
    assert list(victim.iterdir()) == [] and list(theirs.iterdir()) == []


def test_unsafe_ancestry_follows_links_and_accepts_sticky_shared_directories(tmp_path: Path) -> None:
    from launcher.agent.safe_paths import unsafe_ancestry

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    assert unsafe_ancestry(str(shared / "mine" / "run")) is None
    shared.chmod(0o777)
    assert "is writable by others (mode 0777) and not sticky" in str(unsafe_ancestry(str(shared / "mine" / "run")))
    (tmp_path / "link").symlink_to(shared)
    assert "writable by others" in str(unsafe_ancestry(str(tmp_path / "link" / "mine" / "run")))
    shared.chmod(0o755)
    assert unsafe_ancestry(str(tmp_path / "link" / "mine" / "run")) is None
