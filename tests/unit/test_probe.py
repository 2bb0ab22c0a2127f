"""The preflight probe finds TensorFlow and the worker runtime without running site first, and
falls back to site where only a .pth file knows the way (an editable install)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from launcher.agent import probe
from launcher.agent.bootstrap import agent_line
from launcher.transport.local import open_local
from launcher.transport.session import AgentSession


def _install(site_dir: Path, distribution: str, version: str) -> None:
    (site_dir / "tensorflow").mkdir(parents=True)
    (site_dir / f"{distribution}-{version}.dist-info").mkdir()


def test_tensorflow_version_comes_from_its_dist_info(tmp_path: Path) -> None:
    _install(tmp_path / "a", "tensorflow_cpu", "2.21.0")
    (tmp_path / "b").mkdir()
    assert probe._tensorflow_in([str(tmp_path / "b"), str(tmp_path / "a")]) == "2.21.0"
    assert probe._tensorflow_in([str(tmp_path / "b")]) is None


def test_a_dist_info_without_the_package_is_not_tensorflow(tmp_path: Path) -> None:
    (tmp_path / "tensorflow-2.21.0.dist-info").mkdir()  # left behind by an uninstall
    assert probe._tensorflow_in([str(tmp_path)]) is None


def test_the_worker_runtime_is_found_in_a_site_directory(tmp_path: Path) -> None:
    (tmp_path / "worker").mkdir()
    (tmp_path / "worker" / "runtime.py").write_text("")
    assert probe._worker_in([str(tmp_path)]) and not probe._worker_in([str(tmp_path / "worker")])


def _ask(python: str, request: dict[str, object], cwd: Path) -> dict[str, object]:
    """Start an agent as a host would (isolated, no site at start-up) and ask its probe one question."""
    old = os.getcwd()
    os.chdir(cwd)
    try:
        session = AgentSession("localhost", python, open_local("localhost", python, agent_line(15.0, False)), 15.0)
    finally:
        os.chdir(old)
    try:
        session.wait_ready(30)
        return session.probe(request)
    finally:
        session.close()


def test_the_probe_sees_what_the_task_will_import(tmp_path: Path) -> None:
    import importlib.metadata

    answer = _ask(sys.executable, {"op": "info", "workdir": ".", "need_worker": True}, tmp_path)
    assert answer["tensorflow"] == importlib.metadata.version("tensorflow")
    # the suite runs from an editable install: outside the checkout only site's .pth processing
    # finds `worker`, so this passes only if the probe falls back to running site
    assert answer["worker_ok"] is True


def test_host_facts_are_looked_up_once_and_shared_by_every_info(monkeypatch: object, tmp_path: Path) -> None:
    calls: list[str] = []
    monkeypatch.setattr(probe, "_facts", {})  # type: ignore[attr-defined]
    monkeypatch.setattr(probe, "_tensorflow_version", lambda: calls.append("tf") or "2.21.0")  # type: ignore[attr-defined]
    monkeypatch.setattr(probe, "_worker_importable", lambda: calls.append("worker") or True)  # type: ignore[attr-defined]
    probe.host_facts()  # what the agent does as soon as it has said it is ready
    first = probe.handle({"op": "info", "workdir": str(tmp_path), "need_worker": True})
    second = probe.handle({"op": "info", "workdir": str(tmp_path / "missing")})
    assert calls == ["tf", "worker"]
    assert first["tensorflow"] == second["tensorflow"] == "2.21.0" and first["worker_ok"] is True
    assert first["workdir_ok"] is True and second["workdir_ok"] is False and "worker_ok" not in second


def test_the_mesh_check_skips_only_pairs_of_local_hosts_on_loopback_addresses() -> None:
    from launcher.preflight import _apart, _Host

    def host(address: str, local: bool) -> _Host:
        return _Host(0, address, local, "python3", ".", [])

    a, b, named = host("127.0.0.2", True), host("127.0.0.3", True), host("localhost", True)
    typo, remote = host("10.0.0.5", True), host("127.0.0.4", False)  # a local host's peers dial its address
    resolved = host("train.localhost", True)  # resolved by every peer: it may not resolve at all
    assert not _apart(a, a) and not _apart(a, b) and not _apart(b, named)
    assert _apart(a, typo) and _apart(typo, a) and _apart(a, remote) and _apart(remote, a)
    assert _apart(a, resolved) and _apart(resolved, named)
