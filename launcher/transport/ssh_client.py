"""Open SSH connections with paramiko: host keys checked as OpenSSH checks them, ~/.ssh/config,
ProxyJump, the agent, timeouts.

Host keys: every known_hosts file OpenSSH would read (the user's files: the spec's ssh.known_hosts,
else UserKnownHostsFile, else ~/.ssh/known_hosts and known_hosts2; and the system's: the
GlobalKnownHostsFile, else /etc/ssh/ssh_known_hosts and ssh_known_hosts2) is parsed by
known_hosts.py and the key the server presented is judged against all of them: a key an `@revoked`
line names for the host is refused whatever else lists it; host_keys.py decides the rest. paramiko's
own host key stores stay empty, so every key reaches that check.

Options of ~/.ssh/config that change whom we trust or how we get there are honoured (HostName, User,
Port, IdentityFile, UserKnownHostsFile, GlobalKnownHostsFile, StrictHostKeyChecking,
HashKnownHosts, HostKeyAlias, RevokedHostKeys as a file of public keys, ProxyJump) or refused with a
message (ProxyCommand, KnownHostsCommand): never ignored. Every failure becomes a HostError that
names the host, the cause and the fix. Nothing here starts a task.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.common.errors import HostError
from launcher.transport.deferred_invoke import defer_invoke
from launcher.transport.host_keys import (
    HostKeyAction,
    HostKeyPolicy,
    HostKeySubject,
    decide,
    host_key_policy,
    preferred_key_types,
    refusal,
)
from launcher.transport.known_hosts import (
    KnownHostLine,
    KnownHostsUnusable,
    append_known_host,
    check_host_key,
    known_host_line,
    read_known_hosts,
    read_revoked_keys,
)
from launcher.transport.ssh_options import JumpHop, expand_path, parse_proxy_jump, path_list, yes_no

if TYPE_CHECKING:
    from launcher.spec.hosts import HostSpec

__all__ = ["DEFAULT_SSH_CONFIG", "HostKeyRefused", "SshHost", "SshSettings", "SshTarget", "connect", "resolve_target"]

log = logging.getLogger(__name__)


defer_invoke()  # before anything here imports paramiko

DEFAULT_SSH_CONFIG = "~/.ssh/config"
DEFAULT_USER_KNOWN_HOSTS = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")
DEFAULT_GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")
_MAX_HOPS = 8  # ProxyJump chains longer than this are a loop in all but name
_KEEPALIVE_S = 5
_REFUSED_OPTIONS = {
    "proxycommand": "ProxyCommand is not supported (it would run a local command); use ProxyJump",
    "knownhostscommand": "KnownHostsCommand is not supported; list the keys in a known_hosts file",
}


@dataclass(frozen=True)
class SshSettings:
    """A spec host's ssh settings as plain values (launcher/spec/hosts.py SshSpec), which a relay process
    reads without the spec's models."""

    user: str | None = None
    port: int | None = None
    identity_file: str | None = None
    known_hosts: str | None = None
    connect_timeout_s: float = 10.0
    accept_unknown_host_keys: bool = False


@dataclass(frozen=True)
class SshHost:
    """What connecting to a spec host needs of it: its address, and its ssh settings if it has any."""

    address: str
    ssh: SshSettings | None = None

    @classmethod
    def of(cls, host: HostSpec) -> SshHost:
        ssh = host.ssh
        if ssh is None:
            return cls(host.address)
        return cls(
            host.address,
            SshSettings(
                ssh.user,
                ssh.port,
                ssh.identity_file,
                ssh.known_hosts,
                ssh.connect_timeout_s,
                ssh.accept_unknown_host_keys,
            ),
        )


@dataclass(frozen=True)
class SshTarget:
    """Where and how to connect, after merging the spec with ~/.ssh/config. A ProxyJump host is an
    SshTarget too (`jump`: the hop this one is reached through), checked the same way."""

    address: str  # as written in the spec, or the ProxyJump name (names the host in every message)
    hostname: str
    port: int
    user: str
    identity_files: tuple[str, ...]
    user_known_hosts: tuple[str, ...]  # the first is where newly accepted keys are written
    global_known_hosts: tuple[str, ...]
    timeout_s: float
    policy: HostKeyPolicy
    hash_known_hosts: bool | None = None  # HashKnownHosts (None: unset, then as the file does)
    revoked_host_keys: str | None = None
    host_key_alias: str | None = None
    jump: SshTarget | None = None
    in_spec: bool = True  # False for a ProxyJump hop: the spec's ssh settings do not apply to it

    @property
    def key_name(self) -> str:
        """How known_hosts names this host (OpenSSH writes [host]:port for non-22 ports)."""
        if self.host_key_alias:
            return self.host_key_alias
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"

    @property
    def known_hosts(self) -> str:
        """The file newly accepted keys are written to ("" with UserKnownHostsFile none)."""
        return self.user_known_hosts[0] if self.user_known_hosts else ""

    @property
    def accept_unknown(self) -> bool:
        return self.policy.accept_unknown

    @property
    def known_hosts_files(self) -> tuple[str, ...]:
        """Every file read for this host's key, in order."""
        extra = (self.revoked_host_keys,) if self.revoked_host_keys else ()
        return (*self.user_known_hosts, *self.global_known_hosts, *extra)


def _local_user() -> str:
    import getpass

    return getpass.getuser()


def _read_config(address: str, ssh_config_path: str) -> tuple[Any, str]:
    """The parsed ~/.ssh/config (None when there is none) and its path as messages name it. Parsed once per
    version of the file (its size and times), not once per host: a fleet's hosts all read the same one."""
    import paramiko

    path = Path(os.path.expanduser(ssh_config_path))
    try:
        info = path.stat()
    except OSError:
        return None, str(path)
    if not path.is_file():
        return None, str(path)
    version = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    with _CONFIG_LOCK:
        known = _configs.get(str(path))
    if known is not None and known[0] == version:
        return known[1], str(path)
    try:
        parsed = paramiko.SSHConfig.from_path(str(path))
    except (paramiko.ConfigParseError, OSError) as error:
        raise HostError(address, f"cannot read {path}: {error}") from None
    with _CONFIG_LOCK:
        _configs[str(path)] = (version, parsed)
    return parsed, str(path)


_CONFIG_LOCK = threading.Lock()
_configs: dict[str, tuple[tuple[int, ...], Any]] = {}  # path -> (the version read, its parse)


def resolve_target(host: SshHost, ssh_config_path: str = DEFAULT_SSH_CONFIG) -> SshTarget:
    """The spec's ssh settings, then ~/.ssh/config, then OpenSSH's defaults; HostError when the
    config asks for something this launcher refuses or cannot read."""
    config, config_path = _read_config(host.address, ssh_config_path)
    timeout_s = host.ssh.connect_timeout_s if host.ssh else 10.0
    try:
        return _resolve(host.address, config, config_path, timeout_s, settings=host.ssh, chain=())
    except ValueError as error:
        raise HostError(host.address, f"{error}; fix {config_path} (or the spec's ssh settings)") from None


def _resolve(
    name: str,
    config: Any,
    config_path: str,
    timeout_s: float,
    *,
    settings: SshSettings | None = None,
    hop: JumpHop | None = None,
    chain: tuple[str, ...],
    follow_jumps: bool = True,
) -> SshTarget:
    """One host as ~/.ssh/config describes it under `name`, the spec's `settings` (a spec host) or a
    ProxyJump `hop`'s user and port winning; `chain` is the hosts that lead to it, to stop loops."""
    if name in chain or len(chain) > _MAX_HOPS:
        raise ValueError(f"ProxyJump loops or goes deeper than {_MAX_HOPS} hops: {' -> '.join((*chain, name))}")
    found: dict[str, Any] = dict(config.lookup(name)) if config is not None else {}
    for option, why in _REFUSED_OPTIONS.items():
        if found.get(option) is not None:
            raise ValueError(f"{name}: {why}")
    hostname = str(found.get("hostname", name))
    user = (settings.user if settings else None) or (hop.user if hop else None) or found.get("user") or _local_user()
    port = int((settings.port if settings else None) or (hop.port if hop else None) or found.get("port", 22))
    if settings and settings.identity_file:
        identity = [settings.identity_file]
    else:
        identity = list(found.get("identityfile", []))
    tokens = {
        "%d": os.path.expanduser("~"),
        "%u": _local_user(),
        "%h": hostname,
        "%n": name,
        "%p": str(port),
        "%r": str(user),
        "%i": str(os.getuid()),
    }
    if settings and settings.known_hosts:
        user_files: tuple[str, ...] = (os.path.expanduser(settings.known_hosts),)
    else:
        user_files = path_list(found.get("userknownhostsfile"), DEFAULT_USER_KNOWN_HOSTS, tokens)
    revoked = found.get("revokedhostkeys")
    target = SshTarget(
        address=name,
        hostname=hostname,
        port=port,
        user=str(user),
        identity_files=tuple(os.path.expanduser(p) for p in identity),
        user_known_hosts=user_files,
        global_known_hosts=path_list(found.get("globalknownhostsfile"), DEFAULT_GLOBAL_KNOWN_HOSTS, tokens),
        timeout_s=timeout_s,
        policy=host_key_policy(
            bool(settings and settings.accept_unknown_host_keys), found.get("stricthostkeychecking"), config_path
        ),
        hash_known_hosts=yes_no(found.get("hashknownhosts"), "HashKnownHosts"),
        revoked_host_keys=expand_path(revoked, tokens) if revoked and revoked.lower() != "none" else None,
        host_key_alias=found.get("hostkeyalias"),
        in_spec=hop is None,
    )
    if not follow_jumps:
        return target
    return replace(target, jump=_jumps(found.get("proxyjump"), config, config_path, timeout_s, (*chain, name)))


def _jumps(
    proxy_jump: str | None, config: Any, config_path: str, timeout_s: float, chain: tuple[str, ...]
) -> SshTarget | None:
    """`ProxyJump a,b`: a as its own config says (its own ProxyJump included), b through a, this host
    through b; as `ssh -J a,b` does. None without one."""
    jump: SshTarget | None = None
    for index, each in enumerate(parse_proxy_jump(proxy_jump)):
        reached = _resolve(each.host, config, config_path, timeout_s, hop=each, chain=chain, follow_jumps=index == 0)
        jump = reached if index == 0 else replace(reached, jump=jump)
    return jump


class HostKeyRefused(Exception):
    """The key a host presented is refused; the message says why and how to fix it."""


def _read_lines(target: SshTarget) -> tuple[KnownHostLine, ...]:
    try:
        lines = read_known_hosts((*target.user_known_hosts, *target.global_known_hosts))
        if target.revoked_host_keys:
            lines += read_revoked_keys(target.revoked_host_keys)
    except KnownHostsUnusable as error:
        raise HostError(
            target.address,
            f"cannot read {error.path} ({error.reason}); a host key revoked there would be missed. "
            f"Fix the file or its permissions, or leave it out of UserKnownHostsFile/GlobalKnownHostsFile/"
            f"RevokedHostKeys",
        ) from None
    return lines


def _record(target: SshTarget, lines: Sequence[KnownHostLine], key_blob: bytes) -> None:
    """Write a newly accepted key, hashed when HashKnownHosts says so or (unset) the file already
    hides its host names."""
    path, name = target.known_hosts, target.key_name
    if not path:
        log.info("%s: accepted the host key of %s; UserKnownHostsFile none, so not recorded", target.address, name)
        return
    hashed = target.hash_known_hosts
    if hashed is None:
        hashed = any(line.hashed for line in lines if line.path == path and line.marker is None)
    try:
        written = append_known_host(path, known_host_line(name, key_blob, hashed))
    except OSError as error:  # the key is still good for this connection, as with OpenSSH's accept-new
        log.warning("%s: accepted the host key of %s but cannot record it in %s: %s", target.address, name, path, error)
        return
    if written:
        log.info("%s: recorded the host key of %s in %s", target.address, name, path)


def _host_key_check(target: SshTarget, lines: Sequence[KnownHostLine]) -> Any:
    """A paramiko policy called with every key (paramiko's own stores are empty): our check decides."""
    import paramiko

    class Check(paramiko.MissingHostKeyPolicy):
        def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
            blob = key.asbytes()
            verdict = check_host_key(lines, (target.key_name,), blob)
            action = decide(verdict, target.policy)
            if action is HostKeyAction.REFUSE:
                subject = HostKeySubject(
                    key_name=target.key_name,
                    hostname=target.hostname,
                    port=target.port,
                    key_type=key.get_name(),
                    key_blob=blob,
                    files=target.known_hosts_files,
                    record_file=target.known_hosts or None,
                    policy=target.policy,
                    in_spec=target.in_spec,
                )
                raise HostKeyRefused(refusal(verdict, subject))
            if action is HostKeyAction.RECORD:
                _record(target, lines, blob)

    return Check()


def _transport_factory(target: SshTarget, lines: Sequence[KnownHostLine]) -> Callable[..., Any]:
    """paramiko Transports that ask first for the key types on record for this host."""
    import paramiko

    def make(sock: Any, **kwargs: Any) -> Any:
        transport = paramiko.Transport(sock, **kwargs)
        options = transport.get_security_options()
        options.key_types = preferred_key_types(lines, (target.key_name,), tuple(options.key_types))
        return transport

    return make


@functools.cache
def _client_class() -> type[Any]:
    import paramiko

    class TunnelledClient(paramiko.SSHClient):
        """An SSHClient that closes the ProxyJump connection it runs through when it closes."""

        def __init__(self, through: Any) -> None:
            super().__init__()
            self.through = through

        def close(self) -> None:
            try:
                super().close()
            finally:
                if self.through is not None:
                    self.through.close()

    return TunnelledClient


def _where(target: SshTarget) -> str:
    via = f" through ProxyJump {target.jump.address}" if target.jump else ""
    return f"{target.user}@{target.hostname}:{target.port}{via}"


def _host_error(target: SshTarget, error: BaseException) -> HostError:
    """The fix-it message for an exception raised while connecting (a pure table)."""
    import paramiko

    where = _where(target)
    if isinstance(error, HostKeyRefused):
        return HostError(target.address, str(error))
    if isinstance(error, paramiko.AuthenticationException):
        keys = ", ".join(target.identity_files) or "the SSH agent and ~/.ssh/id_*"
        fix = "ssh.user, ssh.identity_file" if target.in_spec else "User and IdentityFile in ~/.ssh/config"
        return HostError(
            target.address,
            f"authentication as {target.user} failed ({error}); tried {keys}. "
            f"Check {fix} and the host's authorized_keys",
        )
    if isinstance(error, paramiko.ChannelException):
        jump = target.jump.address if target.jump else "the jump host"
        return HostError(
            target.address,
            f"{jump} did not open a connection to {target.hostname}:{target.port} ({error.text}); "
            f"a ProxyJump host must allow TCP forwarding (AllowTcpForwarding) and reach the host",
        )
    if isinstance(error, paramiko.SSHException) and (
        str(error) == "No existing session" or str(error).startswith("Error reading SSH protocol banner")
    ):  # paramiko's words for it: which of the two depends on which of its timeouts ends first
        return HostError(
            target.address,
            f"{where} accepted the connection but said nothing SSH within ssh.connect_timeout_s: is that port an "
            "SSH server's (a firewall or proxy holding the connection open)?",
        )
    if isinstance(error, (paramiko.SSHException, EOFError)):
        return HostError(target.address, f"SSH handshake with {where} failed: {str(error) or type(error).__name__}")
    if isinstance(error, socket.gaierror):
        return HostError(
            target.address,
            f"cannot resolve host name {target.hostname!r}; check hosts[].address or HostName in ~/.ssh/config",
        )
    if isinstance(error, TimeoutError):
        return HostError(
            target.address,
            f"no answer from {where} within {target.timeout_s:g}s (ssh.connect_timeout_s); is the host up and the "
            f"port right?",
        )
    if isinstance(error, OSError):
        reason = error.strerror or (errno.errorcode.get(error.errno, "") if error.errno else "") or str(error)
        return HostError(
            target.address, f"cannot connect to {where}: {reason}; is sshd running there and the port right?"
        )
    return HostError(target.address, f"SSH connection to {where} failed: {type(error).__name__}: {error}")


def _connect_errors() -> tuple[type[BaseException], ...]:
    import paramiko

    return (HostKeyRefused, paramiko.SSHException, OSError, EOFError)


def _through(target: SshTarget) -> tuple[Any, Any]:
    """The ProxyJump connection (None without one) and a direct-tcpip channel on it to `target`."""
    if target.jump is None:
        return None, None
    try:
        jump = connect(target.jump)
    except HostError as error:
        raise HostError(target.address, f"through ProxyJump {target.jump.address}: {error.cause}") from None
    try:
        channel = jump.get_transport().open_channel(
            "direct-tcpip", (target.hostname, target.port), ("127.0.0.1", 0), timeout=target.timeout_s
        )
    except _connect_errors() as error:
        jump.close()
        raise _host_error(target, error) from None
    return jump, channel


def connect(target: SshTarget) -> Any:
    """A connected, authenticated paramiko.SSHClient, or HostError saying what to fix."""
    for path in target.identity_files:
        if not os.path.isfile(path):
            where = "ssh.identity_file or IdentityFile" if target.in_spec else "IdentityFile"
            raise HostError(target.address, f"identity file {path} does not exist; fix {where} in ~/.ssh/config")
    lines = _read_lines(target)
    if target.policy.warning:
        log.warning("%s: %s", target.address, target.policy.warning)
    jump, channel = _through(target)
    client = _client_class()(jump)
    client.set_missing_host_key_policy(_host_key_check(target, lines))
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
            sock=channel,
            transport_factory=_transport_factory(target, lines),
        )
    except _connect_errors() as error:
        client.close()  # the ProxyJump connection too
        raise _host_error(target, error) from None
    transport = client.get_transport()
    if transport is not None:
        transport.set_keepalive(_KEEPALIVE_S)
    return client
