"""The agent's scratch directory: held while its agent lives, removed by a later agent once it is not."""

from __future__ import annotations

import os
from pathlib import Path

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


def test_the_lock_file_is_named_only_once_held(tmp_path: Path) -> None:
    made, fd = scratch.make(str(tmp_path))
    assert fd is not None
    assert sorted(os.listdir(made)) == [scratch.HELD]
    assert oct(os.stat(made).st_mode & 0o777) == "0o700"
    os.close(fd)
