"""A run directory that cannot be written: refused before any task starts, the transport closed."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from launcher import run
from launcher.console import Console
from launcher.errors import RunDirError
from launcher.preflight import PreflightReport
from launcher.spec import parse_spec
from tests.unit.fakes import FakeTransport


def test_an_unwritable_run_dir_closes_the_transport_and_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # run_root below a file: every mkdir there fails (ENOTDIR), even as root
    spec = parse_spec(
        {
            "name": "r",
            "run_root": str(blocker),
            "hosts": [{"address": "localhost", "ports": [0]}],
            "training": {"kind": "command", "argv": ["python", "-c", "pass"]},
        }
    )
    transport = FakeTransport()
    monkeypatch.setattr(run, "make_transport", lambda spec, allocation=None: transport)
    monkeypatch.setattr(run, "preflight", lambda spec, plan, transport: PreflightReport())
    with pytest.raises(RunDirError) as caught:
        run.launch(spec, Console(out=io.StringIO(), err=io.StringIO()))
    message = str(caught.value)
    assert caught.value.exit_code == 2 and str(blocker) in message and "Nothing was started" in message
    assert transport.closed and transport.start_calls == 0
