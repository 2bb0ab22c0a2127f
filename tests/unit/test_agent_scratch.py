"""An agent removes the scratch directories of agents that died before they could (SIGKILL, power
loss), and nothing else: not a live agent's, not another boot's or pid namespace's, not one without
an owner file, not a symbolic link."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.agent import scratch


@pytest.fixture
def here() -> dict[str, object]:
    owner = scratch.owner_of_this_process()
    if owner is None:
        pytest.skip("needs /proc with boot_id and pid namespaces")
    return owner


def _scratch(root: Path, name: str, owner: dict[str, object] | None) -> Path:
    path = root / f"{scratch.PREFIX}{name}"
    (path / "tmp").mkdir(parents=True)
    if owner is not None:
        (path / scratch.OWNER).write_text(json.dumps(owner))
    return path


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_only_the_scratch_of_a_gone_agent_is_removed(tmp_path: Path, here: dict[str, object]) -> None:
    tmp_path.chmod(0o700)
    dead = _scratch(tmp_path, "dead", {**here, "pid": _dead_pid(), "start": 1})
    reused = _scratch(tmp_path, "reused", {**here, "pid": os.getppid(), "start": -1})  # pid given to another
    parent = scratch.start_time(os.getppid())
    alive = _scratch(tmp_path, "alive", {**here, "pid": os.getppid(), "start": parent})
    other_boot = _scratch(tmp_path, "boot", {**here, "pid": _dead_pid(), "boot": "another-boot"})
    other_ns = _scratch(tmp_path, "ns", {**here, "pid": _dead_pid(), "pidns": "pid:[1]"})
    unowned = _scratch(tmp_path, "unowned", None)
    garbage = _scratch(tmp_path, "garbage", None)
    (garbage / scratch.OWNER).write_text("{not json")
    target = _scratch(tmp_path, "target-of-link", None)
    (tmp_path / f"{scratch.PREFIX}link").symlink_to(target)
    unrelated = tmp_path / "unrelated"
    unrelated.mkdir()

    removed = scratch.sweep(str(tmp_path))

    assert sorted(removed) == sorted([str(dead), str(reused)])
    assert not dead.exists() and not reused.exists()
    for kept in (alive, other_boot, other_ns, unowned, garbage, target, unrelated):
        assert kept.exists(), kept


def test_a_directory_others_could_swap_entries_in_is_not_swept(tmp_path: Path, here: dict[str, object]) -> None:
    tmp_path.chmod(0o777)  # world-writable without the sticky bit
    dead = _scratch(tmp_path, "dead", {**here, "pid": _dead_pid(), "start": 1})
    assert scratch.sweep(str(tmp_path)) == []
    assert dead.exists()


def test_a_new_scratch_names_this_process(
    tmp_path: Path, here: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    made = Path(scratch.make_scratch())
    assert made.parent == tmp_path and made.name.startswith(scratch.PREFIX)
    assert json.loads((made / scratch.OWNER).read_text()) == here
    assert (made / scratch.OWNER).stat().st_mode & 0o077 == 0
    assert scratch.sweep(str(tmp_path)) == []  # its owner (this process) lives
