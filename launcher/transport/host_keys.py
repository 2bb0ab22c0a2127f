"""Decide about the key a host presented: connect, record it and connect, or refuse with the fix.

The decision table, whatever the settings say:

    verdict     policy rejects unknown     policy accepts unknown
    TRUSTED     connect                    connect
    UNKNOWN     refuse                     record, then connect
    CHANGED     refuse                     refuse
    REVOKED     refuse                     refuse

The policy comes from the spec (`ssh.accept_unknown_host_keys: true` accepts) or else from
StrictHostKeyChecking in ~/.ssh/config: yes/ask/unset reject, accept-new accepts, and no/off are
taken as accept-new with a warning (never as "trust anything": a changed or revoked key is still
refused). Pure: no file, no connection.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from launcher.transport.known_hosts import (
    CERT_AUTHORITY,
    REVOKED,
    HostKeyStatus,
    HostKeyVerdict,
    KnownHostLine,
    fingerprint,
    host_matches,
)

__all__ = [
    "HostKeyAction",
    "HostKeyPolicy",
    "HostKeySubject",
    "decide",
    "host_key_policy",
    "preferred_key_types",
    "refusal",
]


class HostKeyAction(enum.Enum):
    CONNECT = "connect"
    RECORD = "record"  # a new key the policy accepts: write it to the known_hosts file, then connect
    REFUSE = "refuse"


@dataclass(frozen=True)
class HostKeyPolicy:
    """Whether a key no known_hosts file lists is accepted, and the setting that says so. Changed
    and revoked keys are refused whatever the policy."""

    accept_unknown: bool
    setting: str  # names the setting in messages
    warning: str | None = None  # a setting not honoured as written, said when connecting


_STRICT = {
    "yes": "yes",
    "true": "yes",
    "ask": "ask",
    "accept-new": "accept-new",
    "no": "no",
    "off": "no",
    "false": "no",
}


def host_key_policy(spec_accepts: bool, strict: str | None, config_path: str) -> HostKeyPolicy:
    """The policy from the spec's accept_unknown_host_keys (true wins) or StrictHostKeyChecking."""
    if spec_accepts:
        return HostKeyPolicy(True, "ssh.accept_unknown_host_keys: true in the spec")
    if strict is None:
        return HostKeyPolicy(False, "the default, StrictHostKeyChecking ask (nobody can be asked here)")
    value = _STRICT.get(strict.strip().lower())
    written = f"StrictHostKeyChecking {strict} in {config_path}"
    if value is None:
        raise ValueError(f"{written}: expected yes, ask, accept-new, no or off")
    if value in ("yes", "ask"):
        return HostKeyPolicy(False, written)
    if value == "accept-new":
        return HostKeyPolicy(True, written)
    return HostKeyPolicy(
        True,
        f"{written} (taken as accept-new)",
        warning=f"{written} is taken as accept-new: unknown host keys are accepted and recorded, "
        f"changed or revoked ones are still refused",
    )


def decide(verdict: HostKeyVerdict, policy: HostKeyPolicy) -> HostKeyAction:
    """The decision table of this module's docstring."""
    if verdict.status is HostKeyStatus.TRUSTED:
        return HostKeyAction.CONNECT
    if verdict.status is HostKeyStatus.UNKNOWN and policy.accept_unknown:
        return HostKeyAction.RECORD
    return HostKeyAction.REFUSE


_RSA_SIGNATURES = ("rsa-sha2-512", "rsa-sha2-256", "ssh-rsa")


def preferred_key_types(lines: Iterable[KnownHostLine], names: Sequence[str], offered: Sequence[str]) -> list[str]:
    """`offered` (the client's host key algorithms, best first) with the types known for this host
    moved to the front, so a host with several keys presents the one on record (as OpenSSH orders
    HostKeyAlgorithms). Revoked and @cert-authority lines do not count."""
    wanted: list[str] = []
    for line in lines:
        if line.marker is None and any(host_matches(line.patterns, name) for name in names):
            wanted += list(_RSA_SIGNATURES) if line.key_type == "ssh-rsa" else [line.key_type]
    first = [t for t in dict.fromkeys(wanted) if t in offered]
    return first + [t for t in offered if t not in first]


@dataclass(frozen=True)
class HostKeySubject:
    """The host whose key is judged, as messages name it and its fixes need it."""

    key_name: str  # how known_hosts names it: host, [host]:port or its HostKeyAlias
    hostname: str
    port: int
    key_type: str
    key_blob: bytes
    files: tuple[str, ...]  # every file read, in order
    record_file: str | None  # where a new key would be written
    policy: HostKeyPolicy
    in_spec: bool  # a spec host (ssh.accept_unknown_host_keys applies), not a ProxyJump hop

    @property
    def presented(self) -> str:
        return f"{self.key_type} {fingerprint(self.key_blob)}"

    @property
    def keyscan(self) -> str:
        """The command that records the key, its file's folder made first where it is missing (a new account)."""
        import os
        import shlex

        port = f"-p {self.port} " if self.port != 22 else ""
        record = self.record_file or "~/.ssh/known_hosts"
        folder = os.path.dirname(os.path.expanduser(record))
        made = "" if os.path.isdir(folder) else f"mkdir -p -m 700 {shlex.quote(folder)} && "
        return f"{made}ssh-keyscan {port}{self.hostname} >> {record}"


def _by_file(lines: Sequence[KnownHostLine]) -> dict[str, str]:
    """File -> its line numbers ("2, 5"), files in the order read."""
    numbers: dict[str, list[str]] = {}
    for line in lines:
        numbers.setdefault(line.path, []).append(str(line.line))
    return {path: ", ".join(found) for path, found in numbers.items()}


def _lines_of(lines: Sequence[KnownHostLine]) -> str:
    return "; ".join(f"{path} line {numbers}" for path, numbers in _by_file(lines).items())


def refusal(verdict: HostKeyVerdict, subject: HostKeySubject) -> str:
    """Why the key is refused and how to fix it, naming the files and lines that decided."""
    name = subject.key_name
    if verdict.status is HostKeyStatus.REVOKED and verdict.revoked_by is not None:
        revoked = verdict.revoked_by
        also = f", although {_lines_of(verdict.listed_by)} lists it" if verdict.listed_by else ""
        remove = ""
        if verdict.listed_by:
            remove = f"remove its old lines (ssh-keygen -f {verdict.listed_by[0].path} -R '{name}') and "
        return (
            f"the host key of {name} ({subject.presented}) is revoked by {revoked.where} "
            f"({REVOKED} {revoked.patterns}){also}; refusing to connect: a revoked key is never trusted. "
            f"If the host has a new key, {remove}add the new one ({subject.keyscan}); "
            f"if the revocation is a mistake, delete {revoked.where}"
        )
    if verdict.status is HostKeyStatus.CHANGED:
        old = next(line for line in verdict.other_keys if line.key_type == subject.key_type)
        return (
            f"the host key of {name} has CHANGED since it was recorded in {old.where} "
            f"(it now presents {subject.presented}). This can mean someone is intercepting the connection. "
            f"If the change is expected, remove the old key with: ssh-keygen -f {old.path} -R '{name}'"
        )
    files = ", ".join(subject.files) or "no known_hosts file (UserKnownHostsFile none)"
    parts = [f"unknown host key for {name} ({subject.presented}; not in {files})"]
    if verdict.other_keys:
        types = ", ".join(sorted({line.key_type for line in verdict.other_keys}))
        parts.append(f"the host is listed only with {types} keys ({_lines_of(verdict.other_keys)})")
    if verdict.authorities:
        for path, numbers in _by_file(verdict.authorities).items():
            parts.append(f"{path} trusts host certificates ({CERT_AUTHORITY}, line {numbers}), not supported here")
    if subject.in_spec:
        opt_in = "set ssh.accept_unknown_host_keys: true for this host"
    else:
        opt_in = f"set StrictHostKeyChecking accept-new for {name} in ~/.ssh/config"
    return (
        "; ".join(parts)
        + f". Unknown keys are refused by {subject.policy.setting}. Verify and add it ({subject.keyscan}), or {opt_in}"
    )
