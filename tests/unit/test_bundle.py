"""`launch bundle`: which files of a run directory go into the archive, secrets masked, and the refusals."""

from __future__ import annotations

import json
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from launcher.preflight.check import PreflightReport
from launcher.rundir.bundle import BundleError, make_bundle, write_launch_record
from launcher.spec.load import parse_spec
from launcher.spec.masked import masked_spec


def test_masked_spec_hides_secret_env_values_everywhere_and_url_passwords() -> None:
    data = {
        "name": "r",
        "env": {"HF_TOKEN": "hf-123", "NCCL_DEBUG": "INFO"},
        "checkpoint_dir": "https://me:pw-456@store.example/run",
        "hosts": [{"address": "a", "env": {"DB_PASSWORD": "pw-789", "AWS_ACCESS_KEY_ID": "AKIA"}}],
        "training": {"kind": "command", "argv": ["python", "train.py"]},
    }
    text = json.dumps(masked_spec(data))
    for secret in ("hf-123", "pw-456", "pw-789", "AKIA"):
        assert secret not in text
    masked = masked_spec(data)
    assert masked["env"] == {"HF_TOKEN": "****", "NCCL_DEBUG": "INFO"}
    assert masked["checkpoint_dir"] == "https://me:****@store.example/run"
    assert masked["training"] == data["training"]


def make_run(root: Path) -> Path:
    run = root / "runs" / "r"
    (run / "attempt-0").mkdir(parents=True)
    (run / "attempt-1").mkdir()
    for name in ("worker-0.log", "worker-1.log", "worker-1.error.json", "worker-1.stack.txt", "srun.log"):
        (run / "attempt-0" / name).write_text(f"{name}\n")
    (run / "attempt-1" / "worker-0.result.json").write_text("{}")
    for name in ("summary.json", "status.json", "metrics.jsonl", "slurm-41.out", "submit.sbatch"):
        (run / name).write_text("{}\n")
    (run / "submitted-spec.json").write_text(json.dumps({"name": "r", "env": {"API_TOKEN": "tok-secret"}}))
    for folder in ("checkpoints", "model", "tensorboard"):
        (run / folder).mkdir()
        (run / folder / "big.bin").write_bytes(b"\0" * 1024)
    os.symlink("/etc/passwd", run / "attempt-0" / "link.log")
    return run


def members(path: str) -> dict[str, bytes]:
    with tarfile.open(path) as archive:
        return {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}  # type: ignore[union-attr]


def test_a_bundle_holds_the_post_mortem_files_and_never_checkpoints(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    spec = parse_spec({"name": "r", "env": {"API_TOKEN": "tok-secret"}, "hosts": [{"address": "localhost"}]})
    report = PreflightReport(lines=["localhost: python 3.11"], hosts=[{"address": "localhost", "tensorflow": "2.21.0"}])
    write_launch_record(spec, report, str(run))
    result = make_bundle(str(run), str(tmp_path / "out.tar.gz"))
    files = members(result.path)
    assert sorted(files) == [
        f"r-bundle/{name}"
        for name in (
            "attempt-0/srun.log",
            "attempt-0/worker-0.log",
            "attempt-0/worker-1.error.json",
            "attempt-0/worker-1.log",
            "attempt-0/worker-1.stack.txt",
            "attempt-1/worker-0.result.json",
            "bundle.json",
            "metrics.jsonl",
            "preflight.json",
            "slurm-41.out",
            "spec.json",
            "status.json",
            "submit.sbatch",
            "submitted-spec.json",
            "summary.json",
        )
    ]
    assert result.members == len(files) and result.size == os.path.getsize(result.path)
    assert sorted(result.left_out) == [
        "attempt-0/link.log (not a regular file)",
        "checkpoints/",
        "model/",
        "tensorboard/",
    ]
    assert not any(b"tok-secret" in data for data in files.values())
    assert json.loads(files["r-bundle/spec.json"])["env"] == {"API_TOKEN": "****"}
    manifest = json.loads(files["r-bundle/bundle.json"])
    assert manifest["versions"]["launcher"] and manifest["versions"]["python"]
    assert manifest["versions"]["hosts"] == [{"address": "localhost", "python": None, "tensorflow": "2.21.0"}]
    assert json.loads(files["r-bundle/preflight.json"])["lines"] == ["localhost: python 3.11"]
    assert oct(os.stat(result.path).st_mode & 0o777) == "0o600"


def test_files_that_vanish_while_listed_are_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = make_run(tmp_path)
    listdir, walk = os.listdir, os.walk

    # A live run renames its *.tmp files into place: listed, then gone before they are looked at.
    def listdir_with_gone(path: Any) -> list[str]:
        return [*listdir(path), "status.json.tmp"]

    def walk_with_gone(top: Any, *args: Any, **kwargs: Any) -> Iterator[tuple[str, list[str], list[str]]]:
        for root, dirs, files in walk(top, *args, **kwargs):
            yield root, dirs, [*files, "worker-0.result.json.tmp"]

    monkeypatch.setattr(os, "listdir", listdir_with_gone)
    monkeypatch.setattr(os, "walk", walk_with_gone)
    result = make_bundle(str(run), str(tmp_path / "out.tar.gz"))
    files = members(result.path)
    assert "r-bundle/status.json" in files and not any(name.endswith(".tmp") for name in files)
    assert not any(".tmp" in entry for entry in result.left_out)


def test_a_spec_copy_that_is_not_json_is_left_out_rather_than_leaked(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    (run / "submitted-spec.json").write_text('{"env": {"API_TOKEN": "tok-secret"')
    result = make_bundle(str(run), str(tmp_path / "out.tar.gz"))
    assert "r-bundle/submitted-spec.json" not in members(result.path)
    assert any(entry.startswith("submitted-spec.json (not valid JSON") for entry in result.left_out)


@pytest.mark.parametrize(
    "case, needle",
    [
        ("missing", "no such directory"),
        ("not a run", "has no summary.json, status.json or attempt directory"),
        ("output exists", "already exists; remove it or give another file with -o"),
        ("output is a directory", "is a directory; give -o the archive's file name"),
        ("output dir missing", "its directory does not exist"),
    ],
)
def test_refusals(case: str, needle: str, tmp_path: Path) -> None:
    run = make_run(tmp_path)
    output = tmp_path / "out.tar.gz"
    if case == "missing":
        run = tmp_path / "absent"
    elif case == "not a run":
        run = tmp_path / "plain"
        run.mkdir()
        (run / "notes.txt").write_text("x")
    elif case == "output exists":
        output.write_text("evidence")
    elif case == "output is a directory":
        output = tmp_path / "runs-dir"
        output.mkdir()
    else:
        output = tmp_path / "nowhere" / "out.tar.gz"
    with pytest.raises(BundleError, match=needle) as caught:
        make_bundle(str(run), str(output))
    assert caught.value.exit_code == 2
    if case == "output exists":
        assert output.read_text() == "evidence"


def test_a_fifo_or_a_link_planted_as_preflight_json_neither_hangs_nor_leaks(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    private = tmp_path / "private.json"
    private.write_text(json.dumps({"hosts": [{"address": "ROOT-PRIVATE-ADDR"}]}))
    os.mkfifo(run / "preflight.json")  # nothing ever writes it: an open() would wait for ever
    result = make_bundle(str(run), str(tmp_path / "fifo.tar.gz"))
    assert result.path.endswith("fifo.tar.gz")
    (run / "preflight.json").unlink()
    (run / "preflight.json").symlink_to(private)
    result = make_bundle(str(run), str(tmp_path / "link.tar.gz"))
    with tarfile.open(result.path) as archive:
        packed = b"".join(archive.extractfile(m).read() for m in archive.getmembers() if m.isfile())  # type: ignore[union-attr]
    assert b"ROOT-PRIVATE-ADDR" not in packed
