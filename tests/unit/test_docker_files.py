"""docker/: the compose files against the Compose Specification's schema, the files agreeing with each
other and with pyproject.toml, and the entry point's key making run for real (ssh-keygen)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import tomllib
import yaml

from launcher.spec import load_spec

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"


def _compose(*names: str) -> dict[str, Any]:
    """The compose files merged the way compose merges overrides (maps deep, the rest replaced)."""

    def merge(base: Any, over: Any) -> Any:
        if isinstance(base, dict) and isinstance(over, dict):
            return {**base, **{k: merge(base.get(k), v) for k, v in over.items()}}
        return over

    merged: dict[str, Any] = {}
    for name in names:
        merged = merge(merged, yaml.safe_load((DOCKER / name).read_text()))
    return merged


@pytest.mark.parametrize("files", [("compose.yaml",), ("compose.yaml", "compose.gpu.yaml")])
def test_compose_files_follow_the_compose_specification(files: tuple[str, ...]) -> None:
    schema = json.loads((REPO / "tests" / "data" / "compose" / "compose-spec.json").read_text())
    jsonschema.Draft7Validator(schema).validate(_compose(*files))


def test_the_launcher_makes_keys_for_exactly_the_hosts_of_the_compose_spec() -> None:
    compose = _compose("compose.yaml")
    services = compose["services"]
    sshd_hosts = sorted(s["hostname"] for s in services.values() if s.get("command") == ["sshd"])
    assert services["launcher"]["environment"]["TFLAUNCH_KEYS_FOR"].split() == sshd_hosts
    assert sorted(services) == ["launcher", *sshd_hosts], "only the launcher may exit (--abort-on-container-exit)"
    spec_path = REPO / services["launcher"]["command"][2].replace("/opt/tflaunch/", "")
    spec = load_spec(spec_path)  # the spec the launcher service runs is valid
    assert sorted(h.address for h in spec.hosts) == sshd_hosts
    for host in spec.hosts:
        assert host.ssh is not None and not host.ssh.accept_unknown_host_keys, "host keys must be pinned"
        assert host.ssh.port == 2222 and host.ssh.known_hosts == "/keys/known_hosts"
    assert spec.checkpoint_dir is not None and spec.checkpoint_dir.startswith("/shared/")
    for name in sshd_hosts:
        assert "shared:/shared" in services[name]["volumes"] and "keys:/keys:ro" in services[name]["volumes"]
    assert compose["x-podman"] == {"in_pod": False}, "podman-compose must give each container its own network"


def test_the_dockerfile_pins_the_project_version_and_copies_only_what_the_context_keeps() -> None:
    dockerfile = (DOCKER / "Dockerfile").read_text()
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert f"ARG TFLAUNCH_VERSION={version}\n" in dockerfile, "docker/Dockerfile pins another project version"
    assert "ARG BASE_IMAGE=python:3.11-slim-bookworm\n" in dockerfile
    assert re.search(r"^USER 1000:1000$", dockerfile, re.M)
    ignored = (REPO / ".dockerignore").read_text().splitlines()
    kept = {line[1:].rstrip("/") for line in ignored if line.startswith("!")}
    for sources in re.findall(r"^COPY (?!--from)(.+) \S+$", dockerfile, re.M):
        for source in sources.split():
            assert source.split("/")[0] in kept, f"{source} is copied but .dockerignore leaves it out"
            assert (REPO / source).exists(), source
    for name in ("compose.yaml", "compose.gpu.yaml"):
        for image in re.findall(r"image: \$\{\w+:-(\S+)\}", (DOCKER / name).read_text()):
            assert image.split(":")[1].startswith(version), f"{name} tags {image}, not version {version}"


def test_the_entry_point_makes_keys_once_and_pins_every_host_key(tmp_path: Path) -> None:
    if shutil.which("ssh-keygen") is None:
        pytest.skip("ssh-keygen is not installed (scripts/test.sh installs openssh-server)")
    subprocess.run(["sh", "-n", str(DOCKER / "entrypoint.sh")], check=True)
    env = {"PATH": "/usr/bin:/bin", "TFLAUNCH_KEYS": str(tmp_path), "SSHD_PORT": "2222"}
    first = subprocess.run(
        ["sh", str(DOCKER / "entrypoint.sh"), "keys", "worker-0", "worker-1"], env=env, capture_output=True, text=True
    )
    assert first.returncode == 0, first.stderr
    pinned = (tmp_path / "known_hosts").read_text().splitlines()
    for line, host in zip(pinned, ("worker-0", "worker-1"), strict=True):
        public = (tmp_path / "hosts" / host / "ssh_host_ed25519_key.pub").read_text().split()[:2]
        assert line.split() == [f"[{host}]:2222", *public]
    assert (tmp_path / "authorized_keys").read_text() == (tmp_path / "client" / "id_ed25519.pub").read_text()
    assert (tmp_path / "client" / "id_ed25519").stat().st_mode & 0o077 == 0, "the client key is readable by others"

    again = subprocess.run(
        ["sh", str(DOCKER / "entrypoint.sh"), "keys", "worker-0", "worker-1"], env=env, capture_output=True, text=True
    )
    assert again.returncode == 0 and "kept" in again.stdout
    assert (tmp_path / "known_hosts").read_text().splitlines() == pinned, "a second run replaced the keys"
    grown = subprocess.run(
        ["sh", str(DOCKER / "entrypoint.sh"), "keys", "worker-0", "worker-1", "worker-2"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert grown.returncode == 0 and "a host key for worker-2" in grown.stdout, grown.stdout + grown.stderr
    now = (tmp_path / "known_hosts").read_text().splitlines()
    assert now[:2] == pinned and now[2].startswith("[worker-2]:2222 ssh-ed25519 "), "a new host changed old keys"
    missing = subprocess.run(["sh", str(DOCKER / "entrypoint.sh"), "keys"], env=env, capture_output=True, text=True)
    assert missing.returncode == 2 and "name the worker hosts" in missing.stderr
