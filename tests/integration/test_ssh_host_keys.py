"""Host keys against a real OpenSSH sshd on loopback aliases: @revoked wins over any listing, the
system-wide file and UserKnownHostsFile are read, new keys are written hashed when asked, and
ProxyJump goes through a second real sshd acting as a bastion.

Each launch runs with HOME in the test's directory, so ~/.ssh/config and the "system" file
(GlobalKnownHostsFile there) are the test's own; /etc/ssh is never written.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.conftest import launch_cmd, processes_mentioning, run_launch, write_spec
from tests.integration.test_ssh import ssh_spec
from tests.labs.ports import free_port
from tests.labs.sshd import SshServer, start_sshd

pytestmark = pytest.mark.tf


def home_with_config(work: Path, config: str) -> dict[str, str]:
    """An environment whose HOME is in the test's directory, with this ~/.ssh/config."""
    home = work / "home"
    (home / ".ssh").mkdir(parents=True, exist_ok=True, mode=0o700)
    (home / ".ssh" / "config").write_text(config)
    return {"HOME": str(home)}


def host_entry(server: SshServer, address: str, pinned: Path | None = None, **ssh: Any) -> dict[str, Any]:
    """A spec host on `server`; its known_hosts comes from ~/.ssh/config unless `pinned`."""
    settings = server.ssh_settings(**ssh)
    if pinned is None:
        del settings["known_hosts"]
    else:
        settings["known_hosts"] = str(pinned)
    return {"address": address, "ports": [free_port()], "ssh": settings}


def check(work: Path, name: str, hosts: list[dict[str, Any]], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run_launch(["--cluster", str(write_spec(work, ssh_spec(work, name, hosts))), "--check"], work, env=env)


def key_of(server: SshServer) -> tuple[str, str]:
    key_type, key_data = server.host_public_key.split()[:2]
    return key_type, key_data


def test_a_revoked_key_is_refused_though_the_host_lists_it_and_nothing_starts(work: Path, sshd: SshServer) -> None:
    key_type, key_data = key_of(sshd)
    known = work / "known_hosts"
    known.write_text(f"[127.0.0.2]:{sshd.port} {key_type} {key_data}\n@revoked * {key_type} {key_data}\n")
    env = home_with_config(work, "")
    spec = ssh_spec(work, "revoked", [host_entry(sshd, "127.0.0.2", pinned=known)])
    logins = sshd.accepted_connections()

    checked = run_launch(["--cluster", str(write_spec(work, spec)), "--check"], work, env=env)
    assert checked.returncode == 2, checked.stdout + checked.stderr
    assert "preflight passed" not in checked.stdout
    assert f"127.0.0.2: the host key of [127.0.0.2]:{sshd.port} ({key_type} SHA256:" in checked.stderr
    assert f"is revoked by {known} line 2 (@revoked *), although {known} line 1 lists it" in checked.stderr
    assert "ssh-keygen -f" in checked.stderr and "Traceback" not in checked.stderr

    started = run_launch(["--cluster", str(write_spec(work, spec))], work, env=env)
    assert started.returncode == 2 and "is revoked by" in started.stderr, started.stderr
    assert not (work / "runs" / "revoked" / "attempt-0").exists(), "nothing may start"
    assert sshd.accepted_connections() == logins, "refused before logging in"
    assert known.read_text().count(key_data) == 2, "known_hosts is left as it was"

    # the same revocation from the system-wide file, hashed for this host only; the user file lists the key
    system = work / "etc" / "ssh_known_hosts"
    system.parent.mkdir()
    system.write_text(f"[127.0.0.3]:{sshd.port} {key_type} {key_data}\n")
    subprocess.run(["ssh-keygen", "-q", "-H", "-f", str(system)], check=True, capture_output=True)
    hashed = system.read_text().split()[0]
    assert hashed.startswith("|1|")
    system.write_text(f"# revoked fleet-wide\n@revoked {hashed} {key_type} {key_data}\n")
    user = work / "home" / ".ssh" / "known_hosts"
    user.write_text("".join(f"[127.0.0.{i}]:{sshd.port} {key_type} {key_data}\n" for i in (2, 3)))
    env = home_with_config(work, f"Host *\n  GlobalKnownHostsFile {system}\n")
    hosts = [host_entry(sshd, "127.0.0.2"), host_entry(sshd, "127.0.0.3")]
    fleet = check(work, "fleet", hosts, env)
    assert fleet.returncode == 2, fleet.stdout + fleet.stderr
    assert f"127.0.0.3: the host key of [127.0.0.3]:{sshd.port}" in fleet.stderr
    assert f"revoked by {system} line 2" in fleet.stderr and f"although {user} line 2 lists it" in fleet.stderr
    assert "127.0.0.2:" not in fleet.stderr, "the revocation names 127.0.0.3 alone"


def test_the_system_wide_file_and_user_known_hosts_files_are_read(work: Path, sshd: SshServer) -> None:
    key_type, key_data = key_of(sshd)
    system = work / "etc" / "ssh_known_hosts"
    system.parent.mkdir()
    system.write_text(f"[127.0.0.2]:{sshd.port} {key_type} {key_data}\n")
    env = home_with_config(work, f"Host *\n  GlobalKnownHostsFile {system}\n")
    hosts = [host_entry(sshd, "127.0.0.2")]
    listed = check(work, "system", hosts, env)
    assert listed.returncode == 0 and "preflight passed" in listed.stdout, listed.stderr

    system.write_text("")
    unknown = check(work, "system", hosts, env)
    assert unknown.returncode == 2 and "127.0.0.2: unknown host key" in unknown.stderr, unknown.stderr
    assert f"{work}/home/.ssh/known_hosts, {work}/home/.ssh/known_hosts2, {system}" in unknown.stderr

    # UserKnownHostsFile with several files and ~: the key in the second one is enough
    fleet = work / "home" / "fleet"
    fleet.mkdir()
    (fleet / "second").write_text(f"[127.0.0.2]:{sshd.port} {key_type} {key_data}\n")
    env = home_with_config(work, "Host 127.0.0.*\n  UserKnownHostsFile ~/fleet/first ~/fleet/second\n")
    assert check(work, "user", hosts, env).returncode == 0
    # the spec's own file replaces UserKnownHostsFile
    pinned = check(work, "user", [host_entry(sshd, "127.0.0.2", pinned=work / "empty")], env)
    assert pinned.returncode == 2 and f"not in {work}/empty, /etc/ssh/ssh_known_hosts" in pinned.stderr


def test_new_keys_are_written_hashed_when_the_config_or_the_file_hashes(work: Path, sshd: SshServer) -> None:
    key_type, key_data = key_of(sshd)
    first = work / "home" / "fleet" / "first"
    first.parent.mkdir(parents=True)
    first.write_text("# fleet keys")  # no newline at the end
    first.chmod(0o640)
    config = "Host 127.0.0.*\n  UserKnownHostsFile ~/fleet/first\n  StrictHostKeyChecking accept-new\n"
    env = home_with_config(work, config + "  HashKnownHosts yes\n")
    accepted = check(work, "hashed", [host_entry(sshd, "127.0.0.2")], env)
    assert accepted.returncode == 0, accepted.stderr
    lines = first.read_text().splitlines()
    assert lines[0] == "# fleet keys" and len(lines) == 2 and lines[1].startswith("|1|")
    assert "127.0.0.2" not in first.read_text() and lines[1].endswith(f" {key_type} {key_data}")
    assert first.stat().st_mode & 0o777 == 0o640, "the file keeps its mode"
    found = subprocess.run(["ssh-keygen", "-F", f"[127.0.0.2]:{sshd.port}", "-f", str(first)], capture_output=True)
    assert found.returncode == 0, "OpenSSH finds the hashed entry"
    again = check(work, "hashed", [host_entry(sshd, "127.0.0.2")], env)
    assert again.returncode == 0 and len(first.read_text().splitlines()) == 2, "a recorded key is not written twice"

    # HashKnownHosts unset, but the spec's file is hashed already: the new line is hashed too
    pinned = work / "pinned"
    pinned.write_text(f"[127.0.0.3]:{sshd.port} {key_type} {key_data}\n")
    subprocess.run(["ssh-keygen", "-q", "-H", "-f", str(pinned)], check=True, capture_output=True)
    env = home_with_config(work, "")
    opted_in = check(work, "spec", [host_entry(sshd, "127.0.0.2", pinned, accept_unknown_host_keys=True)], env)
    assert opted_in.returncode == 0, opted_in.stderr
    assert all(line.startswith("|1|") for line in pinned.read_text().splitlines())
    assert len(pinned.read_text().splitlines()) == 2 and "127.0.0." not in pinned.read_text()
    found = subprocess.run(["ssh-keygen", "-F", f"[127.0.0.2]:{sshd.port}", "-f", str(pinned)], capture_output=True)
    assert found.returncode == 0


def test_strict_host_key_checking_no_is_accept_new_and_says_so(work: Path, sshd: SshServer) -> None:
    key_type, _ = key_of(sshd)
    known = work / "home" / ".ssh" / "known_hosts"
    env = home_with_config(work, "Host *\n  StrictHostKeyChecking no\n")
    accepted = check(work, "no", [host_entry(sshd, "127.0.0.2")], env)
    assert accepted.returncode == 0, accepted.stderr
    assert "127.0.0.2: StrictHostKeyChecking no in" in accepted.stderr and "taken as accept-new" in accepted.stderr
    assert f"[127.0.0.2]:{sshd.port} {key_type} " in known.read_text()

    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(work / "other")], check=True)
    known.write_text(f"[127.0.0.2]:{sshd.port} {key_type} {(work / 'other.pub').read_text().split()[1]}\n")
    changed = check(work, "no", [host_entry(sshd, "127.0.0.2")], env)
    assert changed.returncode == 2 and "has CHANGED" in changed.stderr, changed.stderr


@pytest.fixture(scope="module")
def bastion(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    """A second sshd (its own host key and user key) that the tests reach first, as a bastion."""
    server = start_sshd(tmp_path_factory.mktemp("bastion"))
    yield server
    server.stop()
    assert server.process.poll() is not None


def jump_config(bastion: SshServer, known: str) -> str:
    return (
        "Host 127.0.0.3\n  ProxyJump bastion\n"
        f"Host bastion\n  HostName 127.0.0.4\n  Port {bastion.port}\n  IdentityFile {bastion.identity_file}\n"
        f"  UserKnownHostsFile {known}\n"
    )


def connections_to(process: psutil.Process, address: str, port: int) -> list[Any]:
    return [c for c in process.net_connections(kind="tcp") if c.raddr and (c.raddr.ip, c.raddr.port) == (address, port)]


def launch_side_connections(launcher: psutil.Process, address: str, port: int) -> list[Any]:
    """The connections the launcher holds, itself or through its SSH relays (its children that carry them)."""
    relays = [p for p in launcher.children() if "ssh_relay" in " ".join(p.cmdline())]
    return [c for process in (launcher, *relays) for c in connections_to(process, address, port)]


def test_proxy_jump_goes_through_the_bastion_whose_key_is_checked(
    work: Path, sshd: SshServer, bastion: SshServer
) -> None:
    env = home_with_config(work, jump_config(bastion, bastion.known_hosts))
    release = work / "release"
    spec = ssh_spec(work, "jump", [host_entry(sshd, "127.0.0.3", pinned=Path(sshd.known_hosts))])
    gate = f"pathlib.Path({str(release)!r}).exists"
    wait = f"import pathlib, time; [time.sleep(0.1) for _ in iter({gate}, True)]; print('through')"
    spec["training"] = {"kind": "command", "argv": ["python", "-c", wait]}
    bastion_logins, target_logins = bastion.accepted_connections(), sshd.accepted_connections()
    log = work / "launch.out"
    with open(log, "w") as handle:
        proc = subprocess.Popen(
            launch_cmd("--cluster", str(write_spec(work, spec))),
            cwd=work,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
        )
        try:
            deadline = time.monotonic() + 120
            task = None
            while task is None:
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
                task = next((p for p in processes_mentioning(str(release)) if p.pid != proc.pid), None)
                time.sleep(0.1)
            launcher = psutil.Process(proc.pid)
            assert not launch_side_connections(launcher, "127.0.0.3", sshd.port), "the launcher connected directly"
            held = launch_side_connections(launcher, "127.0.0.4", bastion.port)
            assert held, "the launcher holds no bastion connection"
            sessions = psutil.Process(bastion.process.pid).children(recursive=True)
            relays = [s for s in sessions if connections_to(s, "127.0.0.3", sshd.port)]
            assert relays, "no bastion session relays to the host"
        finally:
            release.touch()
        assert proc.wait(timeout=120) == 0, log.read_text()[-3000:]
    assert "[worker:0@127.0.0.3] through" in log.read_text()
    assert bastion.accepted_connections() - bastion_logins == 1
    assert sshd.accepted_connections() - target_logins == 1


def test_proxy_jump_refuses_a_revoked_or_unknown_bastion_key(work: Path, sshd: SshServer, bastion: SshServer) -> None:
    key_type, key_data = key_of(bastion)
    known = work / "bastion_hosts"
    known.write_text(
        f"[127.0.0.4]:{bastion.port} {key_type} {key_data}\n@revoked [127.0.0.4]:* {key_type} {key_data}\n"
    )
    env = home_with_config(work, jump_config(bastion, str(known)))
    hosts = [host_entry(sshd, "127.0.0.3", pinned=Path(sshd.known_hosts))]
    target_logins = sshd.accepted_connections()
    revoked = check(work, "jumprev", hosts, env)
    assert revoked.returncode == 2, revoked.stdout + revoked.stderr
    assert f"127.0.0.3: through ProxyJump bastion: the host key of [127.0.0.4]:{bastion.port}" in revoked.stderr
    assert f"revoked by {known} line 2" in revoked.stderr

    known.write_text("")
    unknown = check(work, "jumpnew", [{**hosts[0], "ssh": {**hosts[0]["ssh"], "accept_unknown_host_keys": True}}], env)
    assert unknown.returncode == 2, unknown.stdout + unknown.stderr
    assert "127.0.0.3: through ProxyJump bastion: unknown host key" in unknown.stderr
    assert "StrictHostKeyChecking accept-new for [127.0.0.4]" in unknown.stderr, (
        "the spec's opt-in is not the bastion's"
    )
    assert known.read_text() == ""
    assert sshd.accepted_connections() == target_logins, "the host was never reached"
