"""The agent's scratch directory: held while its agent lives, removed by a later agent once it is not."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from launcher.agent import scratch


def test_a_held_scratch_is_kept_and_a_let_go_one_is_removed(tmp_path: Path) -> None:
    live, live_fd = scratch.make(str(tmp_path))
    dead, dead_fd = scratch.make(str(tmp_path))
    mine, _ = scratch.make(str(tmp_path))
    assert live_fd is not None and dead_fd is not None
    (Path(dead) / "tmp").mkdir()
    (Path(dead) / "tmp" / "half-written.ckpt").write_bytes(b"x" * 100)
    os.close(dead_fd)  # what the kernel does for an agent killed outright
    assert scratch.sweep(mine) == [dead]
    assert not Path(dead).exists() and Path(live).is_dir() and Path(mine).is_dir()
    os.close(live_fd)


def test_only_plain_directories_of_the_users_own_with_a_lock_file_are_swept(tmp_path: Path) -> None:
    mine, _ = scratch.make(str(tmp_path))
    other_version = tmp_path / f"{scratch.PREFIX}old"  # no lock file: cannot tell whether it lives
    other_version.mkdir()
    target = tmp_path / "precious"
    target.mkdir()
    (target / scratch.HELD).write_text("")
    (tmp_path / f"{scratch.PREFIX}link").symlink_to(target)  # a planted link is not followed
    planted = tmp_path / f"{scratch.PREFIX}planted"
    planted.mkdir()
    (planted / scratch.HELD).symlink_to(target / scratch.HELD)
    plain = tmp_path / f"{scratch.PREFIX}file"
    plain.write_text("")
    assert scratch.sweep(mine) == []
    assert other_version.is_dir() and target.is_dir() and planted.is_dir() and plain.exists()


def test_a_scratch_another_host_made_is_left_to_that_host(tmp_path: Path) -> None:
    """A temporary directory shared over NFS, where a lock may hold on one host only."""
    mine, _ = scratch.make(str(tmp_path))
    elsewhere = _dead_scratch(tmp_path)
    (elsewhere / scratch.HELD).write_bytes(b"another-host")
    assert scratch.sweep(mine) == []
    assert elsewhere.is_dir()


def test_the_lock_file_is_named_only_once_held(tmp_path: Path) -> None:
    made, fd = scratch.make(str(tmp_path))
    assert fd is not None
    assert sorted(os.listdir(made)) == [scratch.HELD]
    assert oct(os.stat(made).st_mode & 0o777) == "0o700"
    os.close(fd)


def _dead_scratch(parent: Path) -> Path:
    made, fd = scratch.make(str(parent))
    assert fd is not None
    os.close(fd)
    return Path(made)


def _read_only_scene(parent: Path) -> int:
    """In a child process: a killed agent's scratch holding read-only directories, then a sweep."""
    mine, _ = scratch.make(str(parent))
    dead = _dead_scratch(parent)
    cache = dead / "tmp" / "gomod" / "pkg"
    cache.mkdir(parents=True)
    (cache / "mod.go").write_text("package x\n")
    cache.chmod(0o500)
    cache.parent.chmod(0o500)
    return 0 if scratch.sweep(mine) == [str(dead)] and not dead.exists() else 1


def test_what_a_task_made_read_only_is_removed_too() -> None:
    """As an ordinary user (root removes read-only directories anyway): `nobody`, when run as root."""
    parent = Path(tempfile.mkdtemp(prefix="tflaunch-test-scratch-"))
    nobody = pwd.getpwnam("nobody") if os.geteuid() == 0 else None
    if nobody is not None:
        os.chown(parent, nobody.pw_uid, nobody.pw_gid)
    try:
        child = os.fork()
        if child == 0:  # pragma: no cover - the child's outcome is its exit code
            code = 2
            try:
                if nobody is not None:
                    os.setgroups([])
                    os.setgid(nobody.pw_gid)
                    os.setuid(nobody.pw_uid)
                code = _read_only_scene(parent)
            finally:
                os._exit(code)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        for folder, _, _ in os.walk(parent):
            os.chmod(folder, 0o700)
        shutil.rmtree(parent)


def test_the_mount_table_is_read(tmp_path: Path) -> None:
    assert scratch._mounts_under("/")  # /proc is mounted under /
    assert not scratch._mounts_under(str(tmp_path))


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("mount") is None, reason="a bind mount needs root")
def test_a_scratch_with_something_mounted_inside_is_left_alone(tmp_path: Path) -> None:
    """A task's FUSE or bind mount outlives a killed agent: emptying the scratch would empty the mount."""
    mine, _ = scratch.make(str(tmp_path))
    dead = _dead_scratch(tmp_path)
    source = tmp_path / "bucket"
    source.mkdir()
    (source / "data").write_text("precious")
    point = dead / "tmp" / "mnt"
    point.mkdir(parents=True)
    subprocess.run(["mount", "--bind", str(source), str(point)], check=True)
    try:
        assert scratch.sweep(mine) == []
        assert (source / "data").read_text() == "precious" and (dead / scratch.HELD).exists()
    finally:
        subprocess.run(["umount", str(point)], check=True)
    assert scratch.sweep(mine) == [str(dead)]  # once unmounted, it goes
    assert (source / "data").read_text() == "precious"


def test_remove_tree_removes_everything_and_follows_no_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "kept").mkdir(parents=True)
    (outside / "kept" / "file").write_text("theirs")
    tree = tmp_path / "tree"
    (tree / "a" / "b").mkdir(parents=True)
    (tree / "a" / "b" / "deep").write_text("x")
    (tree / "top").write_text("y")
    (tree / "a" / "to-dir").symlink_to(outside / "kept")
    (tree / "to-file").symlink_to(outside / "kept" / "file")
    (tree / "dangling").symlink_to(tmp_path / "nowhere")
    assert scratch.remove_tree(str(tree)) and not tree.exists()
    assert (outside / "kept" / "file").read_text() == "theirs"
    assert not scratch.remove_tree(str(tmp_path / "missing"))


def test_an_agent_leaving_removes_a_tasks_read_only_directories_too(tmp_path: Path) -> None:
    """As a sweep does (its lock file last): a read-only directory a task left (a Go module cache) is made
    writable and removed with the rest."""
    own, fd = scratch.make(str(tmp_path))
    assert fd is not None
    cache = Path(own) / "tmp" / "gomodcache"
    cache.mkdir(parents=True)
    (cache / "mod.go").write_text("x")
    cache.chmod(0o555)
    scratch.remove(own)
    assert not Path(own).exists()
    os.close(fd)


def test_an_empty_scratch_without_a_lock_file_is_removed_once_ten_minutes_old(tmp_path: Path) -> None:
    """An agent killed between making its directory and naming its lock file leaves it empty (or holding the
    unnamed lock file): nothing will use it."""
    mine, _ = scratch.make(str(tmp_path))
    empty_old, empty_new, full_old, unnamed_old = (tmp_path / f"{scratch.PREFIX}{name}" for name in "abcd")
    for folder in (empty_old, empty_new, full_old, unnamed_old):
        folder.mkdir()
    (full_old / "data").write_text("cannot tell whose")
    (unnamed_old / (scratch.HELD + ".new")).write_text("")
    an_hour_ago = time.time() - 3600
    for folder in (empty_old, full_old, unnamed_old):
        os.utime(folder, (an_hour_ago, an_hour_ago))
    assert sorted(scratch.sweep(mine)) == [str(empty_old), str(unnamed_old)]
    assert empty_new.is_dir() and full_old.is_dir()
