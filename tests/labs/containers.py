"""A container lab: the project's image built with podman here, and compose projects that always go away.

No image registry is reachable from this machine, so `python:3.11-slim-bookworm` cannot be pulled.
The lab makes a stand-in from Debian packages instead: a minimal bookworm root file system
(debootstrap) imported as an image, then Debian's python3 on top (tests/data/containers). Both are
kept between runs as a build cache (`localhost/tflaunch-test/...`; set TFLAUNCH_TEST_REBUILD_BASE=1
to make them again). Everything a compose project makes (containers, volumes, network) is removed
at the end, pass or fail, and the removal is checked.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEBIAN_IMAGE = "localhost/tflaunch-test/debian:bookworm-min"
PYTHON_IMAGE = "localhost/tflaunch-test/python:3.11-bookworm"
PROJECT_IMAGE = "localhost/tflaunch-test/tflaunch:ci"
# podman's defaults fail on this kind of machine (crun on a hybrid cgroup layout, rlimits); runc works.
_CONTAINERS_CONF = """[containers]
default_ulimits = []
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
"""
_PROJECT_LABEL = "io.podman.compose.project"


class Podman:
    """podman with the settings that work here; every call is bounded in time."""

    def __init__(self, scratch: Path) -> None:
        conf = scratch / "containers.conf"
        conf.write_text(_CONTAINERS_CONF, encoding="utf-8")
        self.env = {**os.environ, "CONTAINERS_CONF": str(conf)}

    def run(
        self, *args: str, timeout: float = 120, check: bool = True, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            ["podman", *args], env=self.env, input=stdin, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and proc.returncode != 0:
            raise RuntimeError(f"podman {' '.join(args)} exited {proc.returncode}: {proc.stderr[-2000:]}")
        return proc

    def image_exists(self, name: str) -> bool:
        return self.run("image", "exists", name, check=False).returncode == 0

    def why_not(self) -> str | None:
        """Why containers cannot run here, or None when they can."""
        if os.geteuid() != 0:
            return "podman containers with their own networks need root here"
        if shutil.which("podman") is None or shutil.which("debootstrap") is None:
            return "podman and debootstrap are not installed (scripts/test.sh installs them)"
        probe = self.run("info", "--format", "{{.Host.OCIRuntime.Name}}", check=False, timeout=60)
        if probe.returncode != 0:
            return f"podman cannot run here: {probe.stderr.strip()[-300:]}"
        return None


def ensure_base_images(podman: Podman, log: Path) -> None:
    """The Debian base and the python base, made from Debian packages when missing."""
    rebuild = os.environ.get("TFLAUNCH_TEST_REBUILD_BASE") == "1"
    if rebuild or not podman.image_exists(DEBIAN_IMAGE):
        with tempfile.TemporaryDirectory(prefix="tflaunch-rootfs-") as rootfs:
            with log.open("a", encoding="utf-8") as out:
                subprocess.run(
                    ["debootstrap", "--variant=minbase", "bookworm", rootfs, "http://deb.debian.org/debian"],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    check=True,
                    timeout=900,
                )
            tar = subprocess.Popen(["tar", "-C", rootfs, "-c", "."], stdout=subprocess.PIPE)
            assert tar.stdout is not None
            try:
                subprocess.run(
                    ["podman", "import", "-", DEBIAN_IMAGE], stdin=tar.stdout, env=podman.env, check=True, timeout=600
                )
            finally:  # a failed import must not leave tar writing into a pipe nobody reads
                tar.stdout.close()
                if tar.poll() is None:
                    tar.kill()
                tar.wait(timeout=60)
    if rebuild or not podman.image_exists(PYTHON_IMAGE):
        with tempfile.TemporaryDirectory(prefix="tflaunch-pybase-") as context:
            source = REPO / "tests" / "data" / "containers" / "python-base.Containerfile"
            shutil.copy(source, Path(context) / "Containerfile")
            shutil.copy(
                os.environ.get("PIP_CERT", "/etc/ssl/certs/ca-certificates.crt"), Path(context) / "ca-bundle.crt"
            )
            build = podman.run(
                "build",
                "--network=host",
                "--build-arg",
                f"DEBIAN_IMAGE={DEBIAN_IMAGE}",
                "-t",
                PYTHON_IMAGE,
                context,
                timeout=900,
            )
            _append(log, build.stdout)


def image_digest(podman: Podman, name: str) -> str:
    """The digest of a local image (its manifest's, as a registry would report it)."""
    digest = podman.run("image", "inspect", "--format", "{{.Digest}}", name).stdout.strip()
    assert digest.startswith("sha256:"), f"{name} has no digest: {digest!r}"
    return digest


def build_project_image(podman: Podman, log: Path) -> str:
    """docker/Dockerfile as users build it, on the python base pinned by its digest (as the Dockerfile
    pins its default base); docker format keeps HEALTHCHECK. Returns the base reference it was built on."""
    base = f"{PYTHON_IMAGE}@{image_digest(podman, PYTHON_IMAGE)}"
    build = podman.run(
        "build",
        "--format",
        "docker",
        "--network=host",
        "-f",
        "docker/Dockerfile",
        "--build-arg",
        f"BASE_IMAGE={base}",
        "-t",
        PROJECT_IMAGE,
        str(REPO),
        timeout=1800,
    )
    _append(log, build.stdout[-20000:])
    return base


def _append(log: Path, text: str) -> None:
    with log.open("a", encoding="utf-8") as out:
        out.write(text)


class ComposeProject:
    """One `podman-compose` project from docker/compose.yaml, with its own name and subnet."""

    def __init__(self, podman: Podman, compose: str) -> None:
        self.podman = podman
        self.name = f"tfl{secrets.token_hex(4)}"
        self.compose = compose
        # a subnet in the benchmarking range, inside namespaces this test makes: never a real network
        self.env = {
            **podman.env,
            "TFLAUNCH_IMAGE": PROJECT_IMAGE,
            "TFLAUNCH_SUBNET": f"198.19.{secrets.randbelow(200) + 20}.0/24",
        }
        self._volumes_before = set(self._volumes())

    def _volumes(self, *filters: str) -> list[str]:
        return self.podman.run("volume", "ls", *filters, "--format", "{{.Name}}").stdout.split()

    def compose_cmd(self, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess[str]:
        argv = [self.compose, "-p", self.name, "-f", str(REPO / "docker" / "compose.yaml"), *args]
        proc = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} exited {proc.returncode}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        return proc

    def container(self, service: str) -> str:
        """The container of a service (podman-compose names them PROJECT_SERVICE_1)."""
        names = self.podman.run(
            "ps",
            "-a",
            "--filter",
            f"label={_PROJECT_LABEL}={self.name}",
            "--filter",
            f"label=io.podman.compose.service={service}",
            "--format",
            "{{.Names}}",
        ).stdout.split()
        assert len(names) == 1, f"service {service}: containers {names}"
        return names[0]

    def volumes_of(self, service: str) -> dict[str, tuple[str, bool]]:
        """The named volumes a service's container mounts: destination -> (volume, read-only)."""
        mounts = json.loads(self.podman.run("inspect", "--format", "{{json .Mounts}}", self.container(service)).stdout)
        prefix = f"{self.name}_"
        return {
            m["Destination"]: (m["Name"].removeprefix(prefix), not m["RW"]) for m in mounts if m["Type"] == "volume"
        }

    def volume_path(self, volume: str) -> Path:
        found = self.podman.run("volume", "inspect", f"{self.name}_{volume}", "--format", "{{.Mountpoint}}")
        return Path(found.stdout.strip())

    def leftovers(self) -> dict[str, list[str]]:
        label = f"label={_PROJECT_LABEL}={self.name}"
        found = {
            "containers": self.podman.run("ps", "-a", "--filter", label, "--format", "{{.Names}}").stdout.split(),
            # its named volumes, and anonymous ones its containers made (they carry no label)
            "volumes": sorted(set(self._volumes("--filter", label)) | (set(self._volumes()) - self._volumes_before)),
            "networks": [
                n
                for n in self.podman.run("network", "ls", "--format", "{{.Name}}").stdout.split()
                if n.startswith(f"{self.name}_")
            ],
        }
        return {kind: names for kind, names in found.items() if names}

    def remove(self) -> None:
        """Everything the project made, whatever state it is in."""
        self.compose_cmd("down", "-v", "-t", "2", timeout=180, check=False)
        leftovers = self.leftovers()
        for name in leftovers.get("containers", []):
            self.podman.run("rm", "-f", "-t", "0", name, check=False)
        for name in leftovers.get("volumes", []):
            self.podman.run("volume", "rm", "-f", name, check=False)
        for name in leftovers.get("networks", []):
            self.podman.run("network", "rm", "-f", name, check=False)


@contextmanager
def compose_project(podman: Podman) -> Iterator[ComposeProject]:
    compose = shutil.which("podman-compose") or str(Path(os.sys.executable).parent / "podman-compose")
    project = ComposeProject(podman, compose)
    try:
        yield project
    finally:
        project.remove()
        left = project.leftovers()
        assert not left, f"compose project {project.name} left {json.dumps(left)}"
