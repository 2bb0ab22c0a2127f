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


def connect(target: SshTarget) -> Any:
    """A connected, authenticated paramiko.SSHClient, or HostError saying what to fix."""
    import paramiko

    client = paramiko.SSHClient()
    if os.path.exists(target.known_hosts):
        client.load_host_keys(target.known_hosts)
    elif target.accept_unknown:
        Path(target.known_hosts).parent.mkdir(parents=True, exist_ok=True)
        Path(target.known_hosts).touch(mode=0o600)
        client.load_host_keys(target.known_hosts)
    client.set_missing_host_key_policy(paramiko.AutoAddPolicy() if target.accept_unknown else paramiko.RejectPolicy())
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
        if "not found in known_hosts" in str(error):
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
