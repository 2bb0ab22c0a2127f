"""docker/: the compose files against the Compose Specification's schema, the files agreeing with each
other and with pyproject.toml (the constraints file pins every dependency), which container mounts
which key, the hardening of every service and of sshd, and the entry point's key making run for real
(ssh-keygen)."""

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
from packaging.requirements import Requirement

from launcher.spec.load import load_spec

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


def _mounts(service: dict[str, Any]) -> dict[str, tuple[str, bool]]:
    """A service's named volumes: target -> (volume, read-only)."""
    found = {}
    for entry in service.get("volumes", []):
        source, target, *mode = entry.split(":")
        if not source.startswith((".", "/")):
            found[target] = (source, mode == ["ro"])
    return found


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
        assert host.ssh.identity_file == "/keys/client/id_ed25519"
    assert spec.checkpoint_dir is not None and spec.checkpoint_dir.startswith("/shared/")
    assert compose["x-podman"] == {"in_pod": False}, "podman-compose must give each container its own network"


def test_each_private_key_is_in_one_volume_that_only_its_owner_and_the_launcher_mount() -> None:
    services = _compose("compose.yaml")["services"]
    workers = sorted(name for name, s in services.items() if s.get("command") == ["sshd"])
    launcher = _mounts(services["launcher"])
    # the launcher: its own client key, the public key it publishes, each host's key read-only
    assert launcher["/keys"] == ("launcher-keys", False)
    assert launcher["/authorized-keys"] == ("authorized-keys", False)
    assert launcher["/shared"] == ("shared", False)
    own = {name: _mounts(services[name])["/keys"] for name in workers}
    for name in workers:
        assert own[name] == (f"{name}-keys", False), name
        assert launcher[f"/host-keys/{name}"] == (f"{name}-keys", True), f"the launcher pins {name}'s key read-only"
        # a worker: its own host key, the client's public key read-only, the checkpoints; nothing else
        assert _mounts(services[name]) == {
            "/keys": (f"{name}-keys", False),
            "/authorized-keys": ("authorized-keys", True),
            "/shared": ("shared", False),
        }, name
    private = {"launcher-keys"} | {volume for volume, _ in own.values()}
    assert len(private) == len(workers) + 1, "two containers share a keys volume"
    for name in workers:  # the finding this layout answers: no worker reaches another's key or the client's
        reached = {volume for volume, _ in _mounts(services[name]).values()} & private
        assert reached == {f"{name}-keys"}, f"{name} mounts {sorted(reached)}"
    assert not any(s.get("environment", {}).get("TFLAUNCH_KEYS_FOR") for n, s in services.items() if n in workers)


@pytest.mark.parametrize("files", [("compose.yaml",), ("compose.yaml", "compose.gpu.yaml")])
def test_every_service_runs_without_capabilities_on_a_read_only_root(files: tuple[str, ...]) -> None:
    for name, service in _compose(*files)["services"].items():
        assert service["cap_drop"] == ["ALL"] and "cap_add" not in service, name
        assert "no-new-privileges:true" in service["security_opt"], name
        assert service["read_only"] is True, name
        assert {"/tmp", "/run"} <= set(service["tmpfs"]), name
        assert not service.get("privileged") and "user" not in service, f"{name} must run as the image's trainer"


def test_sshd_serves_command_sessions_only() -> None:
    settings: dict[str, str] = {}
    for line in (DOCKER / "sshd_config").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            keyword, value = line.split(None, 1)
            assert keyword.lower() not in settings, f"{keyword} is set twice (sshd takes the first)"
            settings[keyword.lower()] = value.strip()
    for keyword, value in {
        "DisableForwarding": "yes",
        "AllowTcpForwarding": "no",
        "AllowStreamLocalForwarding": "no",
        "AllowAgentForwarding": "no",
        "X11Forwarding": "no",
        "PermitTunnel": "no",
        "GatewayPorts": "no",
        "PermitTTY": "no",
        "PermitUserRC": "no",
        "PermitRootLogin": "no",
        "PasswordAuthentication": "no",
        "KbdInteractiveAuthentication": "no",
        "PermitUserEnvironment": "no",
    }.items():
        assert settings.get(keyword.lower()) == value, keyword
    assert "subsystem" not in settings, "no sftp: the agent arrives on the session's stdin"


def test_sshd_accepts_the_compose_configuration(tmp_path: Path) -> None:
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    if not Path(sshd).exists() or shutil.which("ssh-keygen") is None:
        pytest.skip("openssh-server is not installed (scripts/test.sh installs it)")
    key = tmp_path / "host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    # sshd -t wants its privilege separation directory, which only a started service makes: on a
    # fresh machine nothing has made it before this test (tests/labs/sshd.py makes it the same way)
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)
    # as the entry point starts it (sshd -t checks the file and the command line, then exits)
    checked = subprocess.run(
        [sshd, "-t", "-f", str(DOCKER / "sshd_config"), "-h", str(key), "-o", "AuthorizedKeysFile=/authorized-keys/x"],
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stderr


def test_the_dockerfile_pins_the_project_version_and_copies_only_what_the_context_keeps() -> None:
    dockerfile = (DOCKER / "Dockerfile").read_text()
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert f"ARG TFLAUNCH_VERSION={version}\n" in dockerfile, "docker/Dockerfile pins another project version"
    # the base is pinned by digest, and the compose files build on that same base by default
    (base,) = re.findall(r"^ARG BASE_IMAGE=(\S+)$", dockerfile, re.M)
    assert re.fullmatch(r"python:3\.11-slim-bookworm@sha256:[0-9a-f]{64}", base), base
    for name in ("compose.yaml", "compose.gpu.yaml"):
        assert re.findall(r"BASE_IMAGE: \$\{BASE_IMAGE:-(\S+)\}", (DOCKER / name).read_text()) == [base], name
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


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (DOCKER / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name) and re.fullmatch(r"[\w.+!]+", version), (
                f"docker/constraints.txt: {line!r} is not NAME==VERSION"
            )
            key = re.sub(r"[-_.]+", "-", name).lower()
            assert key not in pins, f"docker/constraints.txt pins {name} twice"
            pins[key] = version
    return pins


def test_the_constraints_file_pins_every_dependency_the_image_installs() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    project = pyproject["project"]
    extras = project["optional-dependencies"]
    # what the Dockerfile installs: the base dependencies, the tf and fit extras, and what builds the project
    wanted = [*project["dependencies"], *extras["tf"], *extras["fit"], *pyproject["build-system"]["requires"]]
    pins = _pins()
    for text in wanted:
        requirement = Requirement(text)
        if requirement.name == project["name"]:
            continue
        key = re.sub(r"[-_.]+", "-", requirement.name).lower()
        assert key in pins, f"docker/constraints.txt has no pin for {requirement.name} (pyproject.toml: {text})"
        assert requirement.specifier.contains(pins[key], prereleases=True), (
            f"docker/constraints.txt pins {requirement.name}=={pins[key]}, outside {text} (pyproject.toml)"
        )
    assert "nvidia-cudnn-cu12" in pins, "the GPU image's tensorflow[and-cuda] wheels are pinned too"
    dockerfile = (DOCKER / "Dockerfile").read_text()
    assert "COPY docker/constraints.txt /tmp/constraints.txt" in dockerfile
    assert re.search(r"pip install -c /tmp/constraints\.txt -r /tmp/requirements\.txt", dockerfile)
    assert "--no-build-isolation" in dockerfile, "the project is built with the pinned setuptools"


def _entry(role: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", str(DOCKER / "entrypoint.sh"), role, *args], env=env, capture_output=True, text=True)


def test_the_entry_point_makes_each_key_where_it_is_used_and_pins_every_host_key(tmp_path: Path) -> None:
    if shutil.which("ssh-keygen") is None:
        pytest.skip("ssh-keygen is not installed (scripts/test.sh installs openssh-server)")
    subprocess.run(["sh", "-n", str(DOCKER / "entrypoint.sh")], check=True)
    base = {"PATH": "/usr/bin:/bin", "SSHD_PORT": "2222", "TFLAUNCH_WAIT_S": "1"}
    hosts, launcher, authorized = tmp_path / "hosts", tmp_path / "launcher", tmp_path / "authorized"
    launcher.mkdir()
    authorized.mkdir()

    def host_key(host: str) -> subprocess.CompletedProcess[str]:  # what a worker does first, in its own volume
        (hosts / host).mkdir(parents=True, exist_ok=True)
        return _entry("host-key", env={**base, "TFLAUNCH_KEYS": str(hosts / host), "TFLAUNCH_HOST": host})

    def keys(*names: str) -> subprocess.CompletedProcess[str]:  # the launcher's side
        env = {**base, "TFLAUNCH_KEYS": str(launcher), "TFLAUNCH_AUTHORIZED_KEYS": str(authorized)}
        return _entry("keys", *names, env={**env, "TFLAUNCH_HOST_KEYS": str(hosts)})

    for host in ("worker-0", "worker-1"):
        made = host_key(host)
        assert made.returncode == 0 and "made the host key of " + host in made.stdout, made.stdout + made.stderr
        assert (hosts / host / "ssh_host_ed25519_key").stat().st_mode & 0o077 == 0, "a host key readable by others"
    first = keys("worker-0", "worker-1")
    assert first.returncode == 0, first.stderr
    pinned = (launcher / "known_hosts").read_text().splitlines()
    for line, host in zip(pinned, ("worker-0", "worker-1"), strict=True):
        public = (hosts / host / "ssh_host_ed25519_key.pub").read_text().split()[:2]
        assert line.split() == [f"[{host}]:2222", *public]
    client = (launcher / "client" / "id_ed25519.pub").read_text().split()[:2]
    assert (authorized / "authorized_keys").read_text() == f"restrict {' '.join(client)} tflaunch-launcher\n"
    assert (authorized / "authorized_keys").stat().st_mode & 0o777 == 0o644
    assert (launcher / "client" / "id_ed25519").stat().st_mode & 0o077 == 0, "the client key is readable by others"
    assert sorted(p.name for p in authorized.iterdir()) == ["authorized_keys"], "only the public key is published"

    # a restart: every key kept, nothing rewritten
    assert host_key("worker-0").stdout == ""
    again = keys("worker-0", "worker-1")
    assert again.returncode == 0 and "kept" in again.stdout, again.stdout + again.stderr
    assert (launcher / "known_hosts").read_text().splitlines() == pinned, "a second run replaced the keys"
    # a host added later gets pinned beside the others
    host_key("worker-2")
    grown = keys("worker-0", "worker-1", "worker-2")
    assert grown.returncode == 0 and "pinned the host keys of worker-2" in grown.stdout, grown.stdout + grown.stderr
    now = (launcher / "known_hosts").read_text().splitlines()
    assert now[:2] == pinned and now[2].startswith("[worker-2]:2222 ssh-ed25519 "), "a new host changed old keys"
    # a host whose volume was made again has a new key: pinned from its volume, and said so
    for old in (hosts / "worker-1").iterdir():
        old.unlink()
    host_key("worker-1")
    changed = keys("worker-0", "worker-1", "worker-2")
    assert changed.returncode == 0 and "worker-1 (its key changed)" in changed.stdout, changed.stdout
    assert (launcher / "known_hosts").read_text().splitlines()[1] != pinned[1]

    missing = keys("worker-0", "worker-9")
    assert missing.returncode == 1 and "worker-9/ssh_host_ed25519_key.pub did not appear" in missing.stderr
    assert (launcher / "known_hosts").read_text().splitlines()[0] == pinned[0], "a failed run kept the old pins"
    nobody = keys()
    assert nobody.returncode == 2 and "name the worker hosts" in nobody.stderr


def test_the_image_gets_every_package_the_project_installs() -> None:
    """A package left out of the build context installs nothing and breaks the image at run time."""
    import tomllib

    found = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packages = sorted({pattern.split(".")[0].rstrip("*") for pattern in found["include"]})
    dockerfile = (REPO / "docker" / "Dockerfile").read_text()
    ignore = (REPO / ".dockerignore").read_text().splitlines()
    assert packages and all(f"COPY {name} /tmp/tflaunch-src/{name}" in dockerfile for name in packages), packages
    assert all(f"!{name}/" in ignore for name in packages), packages


def test_a_gpu_worker_gets_a_shared_memory_larger_than_the_default() -> None:
    services = _compose("compose.yaml", "compose.gpu.yaml")["services"]
    gpu_workers = [name for name, service in services.items() if service.get("deploy")]
    assert gpu_workers and all(services[name].get("shm_size") == "1gb" for name in gpu_workers), gpu_workers
