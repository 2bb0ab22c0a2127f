"""The project's image, built here with podman, and a cluster of containers from docker/compose.yaml.

Builds docker/Dockerfile on a Debian-made python base referenced by its digest (no registry is
reachable), brings up the compose project with podman-compose (two sshd worker hosts, the launcher;
no capabilities, read-only roots), checks what each container can reach (a worker finds neither the
client's private key nor the other worker's host key in anything it mounts; an SSH session gets no
pty and no forwarding), kills a worker container mid-run and brings it back as an orchestrator
would; the gang restarts, resumes from the shared volume and finishes with agreeing replicas. Every
container, volume and network of the project is removed at the end, and that is checked.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import tomllib

from tests.integration.test_train_local import assert_agree, results
from tests.labs.containers import (
    PROJECT_IMAGE,
    ComposeProject,
    Podman,
    build_project_image,
    compose_project,
    ensure_base_images,
)
from tests.labs.waiting import wait_for

# the first run on a fresh machine makes the base images and downloads TensorFlow into the image
pytestmark = [pytest.mark.slow, pytest.mark.tf, pytest.mark.timeout(2400)]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def podman(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Podman]:
    scratch = tmp_path_factory.mktemp("podman")
    podman = Podman(scratch)
    reason = podman.why_not()
    if reason is not None:
        pytest.skip(reason)
    log = scratch / "build.log"
    ensure_base_images(podman, log)
    base = build_project_image(podman, log)
    # pinned as the Dockerfile pins its default: NAME:TAG@sha256:DIGEST, and the digest is what counts
    assert re.fullmatch(r"\S+:\S+@sha256:[0-9a-f]{64}", base), base
    yield podman


def _last_step(run_dir: Path) -> int:
    try:
        lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    except OSError:  # not written yet
        return 0
    return max((json.loads(line).get("step", 0) for line in lines if line.strip()), default=0)


def _in_image(podman: Podman, script: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """A shell script in a throwaway container of the image, with no network."""
    return podman.run("run", "--rm", "--network=none", PROJECT_IMAGE, "sh", "-c", script, check=check)


def test_the_image_runs_training_as_a_non_root_user_at_the_pinned_version(podman: Podman) -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    out = _in_image(
        podman,
        "id -u; python -c 'import importlib.metadata as m; print(m.version(\"tflaunch\"))'; "
        "launch --cluster /opt/tflaunch/cluster.example.json --dry-run | head -1",
    ).stdout.split("\n")
    assert out[0] == "1000", out
    assert out[1] == version, out
    assert out[2].startswith("run example: 3 task(s)"), out
    (image,) = json.loads(podman.run("image", "inspect", PROJECT_IMAGE).stdout)
    config = image["Config"]
    assert config["User"] == "1000:1000"
    health = image.get("Healthcheck") or config.get("Healthcheck") or {}
    assert health.get("Test") == ["CMD", "/opt/tflaunch/docker/healthcheck.sh"], "built without --format docker?"
    assert config["Labels"]["org.opencontainers.image.version"] == version
    # the health check fails for an sshd container whose sshd does not answer (and passes below for live ones)
    dead = _in_image(podman, "touch /tmp/tflaunch-role-sshd && /opt/tflaunch/docker/healthcheck.sh", check=False)
    assert dead.returncode != 0, dead.stdout + dead.stderr


def test_two_worker_containers_train_survive_a_killed_container_and_leave_nothing(podman: Podman) -> None:
    spec = json.loads((REPO / "docker" / "cluster.compose.json").read_text())
    steps = spec["training"]["steps"]
    assert not any(h["ssh"].get("accept_unknown_host_keys") for h in spec["hosts"]), "host keys must be pinned"
    with compose_project(podman) as project:
        project.compose_cmd("up", "-d", "--no-build")
        launcher = project.container("launcher")
        run_dir = project.volume_path("shared") / "runs" / spec["name"]

        def launcher_logs() -> str:
            return podman.run("logs", launcher, check=False).stdout

        wait_for(lambda: "worker-1:2222 accepts SSH connections" in launcher_logs(), 180, launcher_logs, 0.5)
        _assert_sessions_are_plain_commands(podman, launcher)
        wait_for(
            lambda: _last_step(run_dir) >= 100,
            420,
            lambda: f"step 100 of the compose run\n{launcher_logs()[-6000:]}",
            0.5,
        )
        for service in ("worker-0", "worker-1", "launcher"):  # podman runs health checks only when asked here
            assert podman.run("healthcheck", "run", project.container(service), check=False).returncode == 0, service
        victim = project.container("worker-1")
        podman.run("kill", victim)
        podman.run("start", victim)  # the host comes back, as a restart policy or an orchestrator would bring it
        code = podman.run("wait", launcher, timeout=600).stdout.strip()
        logs = launcher_logs()
        assert code == "0", logs[-6000:]
        assert "worker-0:2222 accepts SSH connections" in logs, logs[:3000]
        _assert_workers_reach_no_other_key(podman, project)

        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["state"] == "succeeded" and summary["final_step"] == steps, summary
        assert summary["restarts"] >= 1, "killing a worker container did not restart the gang"
        last = len(summary["attempts"]) - 1
        assert_agree(results(run_dir, last), 2, steps)
        resumed_at = {r["start_step"] for r in results(run_dir, last).values()}
        checkpoint_every = spec["training"]["checkpoint_every"]
        assert len(resumed_at) == 1 and resumed_at.pop() >= checkpoint_every, "the restart did not resume"
        checkpoints = project.volume_path("shared") / "checkpoints"
        assert (checkpoints / f"ckpt-{steps}.index").exists(), sorted(p.name for p in checkpoints.iterdir())


# the launcher's ssh, with the keys the compose project made (known_hosts pins the workers' keys)
_SSH = (
    "ssh -i /keys/client/id_ed25519 -o UserKnownHostsFile=/keys/known_hosts -o StrictHostKeyChecking=yes "
    "-o BatchMode=yes -o ConnectTimeout=10 -p 2222"
)


def _assert_sessions_are_plain_commands(podman: Podman, launcher: str) -> None:
    """sshd (`restrict`, no forwarding, no pty) runs a command with stdin and stdout, and nothing else."""

    def ssh(args: str, stdin: str = "", wrapper: str = "") -> subprocess.CompletedProcess[str]:
        script = f"{wrapper} {_SSH} {args}"
        return podman.run("exec", "-i", launcher, "sh", "-c", script, check=False, stdin=stdin, timeout=60)

    plain = ssh("trainer@worker-0 'cat; id -un'", stdin="over stdin\n")
    assert plain.returncode == 0 and plain.stdout.split() == ["over", "stdin", "trainer"], plain.stdout + plain.stderr
    pty = ssh("-tt trainer@worker-0 tty")  # a forced pty: refused, and ssh gives up rather than run without
    assert "PTY allocation request failed" in pty.stderr and "/dev/" not in pty.stdout, pty.stdout + pty.stderr
    # a tunnel through worker-0 to worker-1's sshd: refused by worker-0
    tunnel = ssh("-W worker-1:2222 trainer@worker-0")
    assert tunnel.returncode != 0 and "administratively prohibited" in tunnel.stderr, tunnel.stdout + tunnel.stderr
    # an agent the client offers to forward: the session never gets it
    agent = ssh("-A trainer@worker-0 'echo ${SSH_AUTH_SOCK:-none}'", wrapper="ssh-agent")
    assert agent.returncode == 0 and agent.stdout.strip() == "none", agent.stdout + agent.stderr


def _private_lines(path: Path) -> list[str]:
    """The lines of an OpenSSH private key that belong to this key alone (the first base64 line is a
    header every ed25519 key shares)."""
    lines = path.read_text().splitlines()
    assert lines[0] == "-----BEGIN OPENSSH PRIVATE KEY-----", path
    return [line for line in lines[2:-1] if len(line) >= 40]


def _grep_mounts(podman: Podman, container: str, patterns: list[str]) -> list[str]:
    """Every file under the container's mounts (all but its image's read-only root and the kernel's
    file systems) that contains one of `patterns`, as the container's own user finds them."""
    mounts = 'awk \'$5 != "/" && $5 !~ "^/(proc|sys|dev)(/|$)" {print $5}\' /proc/self/mountinfo | sort -u'
    script = f"grep -rlsF -f /dev/stdin $({mounts}) || true"  # (under xargs, grep would get no stdin)
    found = podman.run("exec", "-i", container, "sh", "-c", script, stdin="\n".join(patterns) + "\n", timeout=120)
    return found.stdout.split()


def _assert_workers_reach_no_other_key(podman: Podman, project: ComposeProject) -> None:
    """The finding this layout answers: no worker reads the client key (which every worker accepts)
    or another worker's host key, neither through its mounts nor through anything it can open."""
    keys = {name: project.volume_path(f"{name}-keys") / "ssh_host_ed25519_key" for name in ("worker-0", "worker-1")}
    client = project.volume_path("launcher-keys") / "client" / "id_ed25519"
    for name, own in keys.items():
        assert project.volumes_of(name) == {
            "/keys": (f"{name}-keys", False),
            "/authorized-keys": ("authorized-keys", True),
            "/shared": ("shared", False),
        }, name
        foreign = [client, *(key for other, key in keys.items() if other != name)]
        found = _grep_mounts(podman, project.container(name), [line for k in foreign for line in _private_lines(k)])
        assert found == [], f"{name} can read {found}"
        # the search does find a private key where there is one: its own
        assert _grep_mounts(podman, project.container(name), _private_lines(own)) == ["/keys/ssh_host_ed25519_key"]
        authorized = podman.run("exec", project.container(name), "cat", "/authorized-keys/authorized_keys").stdout
        assert authorized.startswith("restrict ssh-ed25519 "), authorized
        ro = podman.run("exec", project.container(name), "touch", "/authorized-keys/x", check=False)
        assert ro.returncode != 0, f"{name} can write the key every worker accepts"
