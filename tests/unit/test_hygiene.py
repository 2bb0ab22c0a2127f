"""What reaches the operator's screen and disk: no control sequences, bounded lines, no secrets, private files."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from launcher.common.masking import mask_env
from launcher.common.printable import printable
from launcher.common.private_files import make_private_dir, open_private
from launcher.common.secret_names import MASK
from launcher.transport.session import Lines
from worker.contract import CUT_MARKER, MAX_LINE_BYTES


def test_terminal_control_sequences_are_stripped_for_the_screen() -> None:
    raw = "\x1b[31mred\x1b[0m \x1b]0;pwned title\x07done\x1b[2J\x1b[H\rbell\x07 tab\tkept\x9b"
    assert printable(raw) == "red donebell tab\tkept"


def test_credentials_are_masked_by_name_and_inside_urls() -> None:
    env = {
        "HF_TOKEN": "hf_abc",
        "AWS_SECRET_ACCESS_KEY": "x",
        "DB_PASSWORD": "p",
        "SSH_KEY": "k",
        "DATA_URL": "https://alice:s3cret@data.example.com/path?q=1",
        "PLAIN_URL": "https://data.example.com/a:b@c",
        "EPOCHS": "3",
    }
    masked = mask_env(env)
    assert [masked[k] for k in ("HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "SSH_KEY")] == [MASK] * 4
    assert masked["DATA_URL"] == f"https://alice:{MASK}@data.example.com/path?q=1"
    assert masked["PLAIN_URL"] == env["PLAIN_URL"] and masked["EPOCHS"] == "3"


def test_an_endless_line_is_shown_once_cut_and_the_next_line_whole() -> None:
    shown: list[str] = []
    lines = Lines(shown.append)
    for _ in range(200):  # 3.2 MB of one line, arriving in 16 KiB chunks as an agent sends them
        lines.feed(b"x" * 16384)
    lines.feed(b"x\nnext\npartial")
    lines.flush()
    assert shown == ["x" * MAX_LINE_BYTES + CUT_MARKER, "next", "partial"]


def test_run_files_are_for_the_owner_only(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        make_private_dir(tmp_path / "runs" / "r" / "attempt-0")
        with open_private(tmp_path / "runs" / "r" / "attempt-0" / "w.log", "ab") as handle:
            handle.write(b"secret output\n")
    finally:
        os.umask(old)
    for directory in ("runs", "runs/r", "runs/r/attempt-0"):
        assert stat.S_IMODE((tmp_path / directory).stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "runs/r/attempt-0/w.log").stat().st_mode) == 0o600


def test_only_files_that_must_survive_a_crash_are_synced(tmp_path: Path, monkeypatch: object) -> None:
    from worker import files

    synced: list[int] = []
    monkeypatch.setattr(files.os, "fsync", synced.append)  # type: ignore[attr-defined]
    files.write_atomic(tmp_path / "status.json", "{}", durable=False)  # rewritten every second
    assert synced == [] and (tmp_path / "status.json").read_text() == "{}"
    files.write_atomic(tmp_path / "summary.json", '{"state": "succeeded"}')
    assert len(synced) == 1 and stat.S_IMODE((tmp_path / "summary.json").stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["status.json", "summary.json"]  # no temporary left
