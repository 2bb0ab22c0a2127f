"""Open SSH connections with paramiko: strict host keys, ~/.ssh/config, the agent, timeouts.

Unknown or changed host keys are rejected unless the spec opts in to accepting unknown ones
(never changed ones). Every failure becomes a HostError that names the host, the cause and the
fix. Nothing here starts a task.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.errors import HostError
from launcher.spec import HostSpec

DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
DEFAULT_SSH_CONFIG = "~/.ssh/config"


@dataclass(frozen=True)
class SshTarget:
    """Where and how to connect, after merging the spec with ~/.ssh/config."""

    address: str  # as written in the spec (names the host in every message)
    hostname: str
    port: int
    user: str
    identity_files: tuple[str, ...]
    known_hosts: str
    timeout_s: float
    accept_unknown: bool

    @property
    def key_name(self) -> str:
        """How known_hosts names this host (OpenSSH writes [host]:port for non-22 ports)."""
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"


def resolve_target(host: HostSpec, ssh_config_path: str = DEFAULT_SSH_CONFIG) -> SshTarget:
    import paramiko

    settings = host.ssh
    looked_up: dict[str, Any] = {}
    config_path = Path(os.path.expanduser(ssh_config_path))
    if config_path.is_file():
        looked_up = paramiko.SSHConfig.from_path(str(config_path)).lookup(host.address)
    user = (settings.user if settings and settings.user else None) or looked_up.get("user") or _local_user()
    port = (settings.port if settings and settings.port else None) or int(looked_up.get("port", 22))
    identity = (
        [settings.identity_file] if settings and settings.identity_file else list(looked_up.get("identityfile", []))
    )
    known = (settings.known_hosts if settings and settings.known_hosts else None) or DEFAULT_KNOWN_HOSTS
    return SshTarget(
        address=host.address,
        hostname=looked_up.get("hostname", host.address),
        port=int(port),
        user=user,
        identity_files=tuple(os.path.expanduser(p) for p in identity),
        known_hosts=os.path.expanduser(known),
        timeout_s=settings.connect_timeout_s if settings else 10.0,
        accept_unknown=bool(settings and settings.accept_unknown_host_keys),
    )


def _local_user() -> str:
    import getpass

    return getpass.getuser()


@dataclass
class KnownHosts:
    """What a known_hosts file says, read line by line (paramiko refuses the whole file on a marker line)."""

    path: str
    revoked: dict[str, int]  # base64 key -> line number of its @revoked line
    authorities: list[int]  # line numbers of @cert-authority lines (not supported)
    unreadable: list[int]  # line numbers paramiko cannot parse (skipped)


def load_known_hosts(path: str, into: Any) -> KnownHosts:
    """Add the plain entries of `path` to `into` (a paramiko HostKeys); note markers and bad lines."""
    from paramiko.hostkeys import HostKeyEntry, InvalidHostKey

    known = KnownHosts(path, {}, [], [])
    if not os.path.exists(path):
        return known
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, raw in enumerate(handle, start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            fields = line.split()
            if fields[0] == "@revoked" and len(fields) >= 4:
                known.revoked[fields[3]] = number
                continue
            if fields[0].startswith("@"):
                known.authorities.append(number)
                continue
            try:
                entry = HostKeyEntry.from_line(line, number)
            except (InvalidHostKey, ValueError):
                entry = None
            if entry is None or entry.key is None:
                known.unreadable.append(number)
                continue
            for name in entry.hostnames:
                into.add(name, entry.key.get_name(), entry.key)
    return known


def _record_key(target: SshTarget, key: Any) -> None:
    """Append one line for a newly accepted key; the rest of the file (comments too) stays as it is."""
    path = Path(target.known_hosts)
    if not path.parent.exists():
        path.parent.mkdir(parents=True, mode=0o700)
    line = f"{target.key_name} {key.get_name()} {key.get_base64()}\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as handle:
        if path.stat().st_size and not path.read_bytes().endswith(b"\n"):
            handle.write("\n")
        handle.write(line)


def _host_key_policy(target: SshTarget, known: KnownHosts) -> Any:
    """Decides about a key not in known_hosts: revoked ones never, others only with accept_unknown."""
    import paramiko

    class Policy(paramiko.MissingHostKeyPolicy):
        def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
            revoked_at = known.revoked.get(key.get_base64())
            if revoked_at is not None:
                raise paramiko.SSHException(f"revoked at line {revoked_at}")
            if not target.accept_unknown:
                raise paramiko.SSHException(f"Server {hostname!r} not found in known_hosts")
            client.get_host_keys().add(target.key_name, key.get_name(), key)
            _record_key(target, key)

    return Policy()


def connect(target: SshTarget) -> Any:
    """A connected, authenticated paramiko.SSHClient, or HostError saying what to fix."""
    import paramiko

    client = paramiko.SSHClient()
    known = load_known_hosts(target.known_hosts, client.get_host_keys())
    for key_data in known.revoked:  # a revoked key is never trusted, even if listed as well
        for name in list(client.get_host_keys().keys()):
            for key_type, key in list(client.get_host_keys()[name].items()):
                if key.get_base64() == key_data:
                    del client.get_host_keys()[name][key_type]
    client.set_missing_host_key_policy(_host_key_policy(target, known))
    where = f"{target.user}@{target.hostname}:{target.port}"
    for path in target.identity_files:
        if not os.path.isfile(path):
            raise HostError(
                target.address,
                f"identity file {path} does not exist; fix ssh.identity_file or IdentityFile in ~/.ssh/config",
            )
    try:
        client.connect(
            target.hostname,
            port=target.port,
            username=target.user,
            key_filename=list(target.identity_files) or None,
            timeout=target.timeout_s,
            banner_timeout=target.timeout_s,
            auth_timeout=target.timeout_s,
            allow_agent=True,
            look_for_keys=not target.identity_files,
        )
    except paramiko.BadHostKeyException:
        client.close()
        raise HostError(
            target.address,
            f"the host key of {target.key_name} has CHANGED since it was recorded in {target.known_hosts}. "
            f"This can mean someone is intercepting the connection. If the change is expected, remove the old key "
            f"with: ssh-keygen -f {target.known_hosts} -R '{target.key_name}'",
        ) from None
    except paramiko.AuthenticationException as error:
        client.close()
        keys = ", ".join(target.identity_files) or "the SSH agent and ~/.ssh/id_*"
        raise HostError(
            target.address,
            f"authentication as {target.user} failed ({error}); tried {keys}. "
            f"Check ssh.user, ssh.identity_file and the host's authorized_keys",
        ) from None
    except paramiko.SSHException as error:
        client.close()
        if str(error).startswith("revoked at line"):
            raise HostError(
                target.address,
                f"the host key of {target.key_name} is marked @revoked in {target.known_hosts} "
                f"({error}); refusing to connect. Replace the key on the host or fix known_hosts",
            ) from None
        if "not found in known_hosts" in str(error):
            if known.authorities:
                lines = ", ".join(str(n) for n in known.authorities)
                raise HostError(
                    target.address,
                    f"unknown host key for {target.key_name}; {target.known_hosts} trusts host certificates "
                    f"(@cert-authority, line {lines}), which this launcher does not support. Add the host's own key "
                    f"(ssh-keyscan -p {target.port} {target.hostname} >> {target.known_hosts})",
                ) from None
            raise HostError(
                target.address,
                f"unknown host key for {target.key_name} (not in {target.known_hosts}). "
                f"Verify and add it (ssh-keyscan -p {target.port} {target.hostname} >> {target.known_hosts}), "
                f"or set ssh.accept_unknown_host_keys: true for this host",
            ) from None
        raise HostError(target.address, f"SSH handshake with {where} failed: {error}") from None
    except socket.gaierror:
        client.close()
        raise HostError(
            target.address,
            f"cannot resolve host name {target.hostname!r}; check hosts[].address or HostName in ~/.ssh/config",
        ) from None
    except TimeoutError:
        client.close()
        raise HostError(
            target.address,
            f"no answer from {where} within {target.timeout_s:g}s (ssh.connect_timeout_s); is the host up and the "
            f"port right?",
        ) from None
    except OSError as error:
        client.close()
        reason = error.strerror or str(error)
        raise HostError(
            target.address, f"cannot connect to {where}: {reason}; is sshd running there and the port right?"
        ) from None
    transport = client.get_transport()
    if transport is not None:
        transport.set_keepalive(5)
    return client
