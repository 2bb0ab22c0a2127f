"""The agent's own PATH search (launcher/agent/processes.py: which), against shutil.which."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from launcher.agent.processes import which


def test_which_finds_what_shutil_finds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain, folder, runnable = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for made in (plain, folder, runnable):
        made.mkdir()
    (plain / "tool").write_text("not executable\n")
    (folder / "tool").mkdir(mode=0o755)  # a directory is never the program
    (runnable / "tool").write_text("#!/bin/sh\n")
    (runnable / "tool").chmod(0o755)
    monkeypatch.setenv("PATH", os.pathsep.join(str(p) for p in (plain, folder, runnable)))
    assert which("tool") == shutil.which("tool") == str(runnable / "tool")
    assert which("absent") is None and shutil.which("absent") is None
