"""Values of ~/.ssh/config options read the way OpenSSH reads them: ProxyJump hops, known_hosts
file lists with their %-tokens, yes/no switches.

Pure functions over strings; a value that cannot be used raises ValueError with a message that
says what was expected. Nothing here reads a file or opens a connection.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["JumpHop", "expand_path", "parse_proxy_jump", "path_list", "yes_no"]


@dataclass(frozen=True)
class JumpHop:
    """One host of a ProxyJump list: a name looked up in ~/.ssh/config, with the user and port the
    list gives it (None: the config's or the default)."""

    host: str
    user: str | None = None
    port: int | None = None

    def __str__(self) -> str:
        user = f"{self.user}@" if self.user else ""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{user}{host}:{self.port}" if self.port else f"{user}{host}"


def _hop(text: str) -> JumpHop:
    spec = text[len("ssh://") :] if text.startswith("ssh://") else text
    user, _, host = spec.rpartition("@")
    port: str | None = None
    if host.startswith("["):  # [v6-or-name]:port
        inner, bracket, rest = host[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError(f"cannot read the jump host {text!r}")
        host, port = inner, rest[1:] or None
    elif host.count(":") == 1:
        host, port = host.split(":")
    if not host or (user == "" and "@" in spec) or any(c.isspace() for c in host):
        raise ValueError(f"cannot read the jump host {text!r}")
    if port is not None and not (port.isdigit() and 1 <= int(port) <= 65535):
        raise ValueError(f"the port of the jump host {text!r} must be 1..65535")
    return JumpHop(host, user or None, int(port) if port is not None else None)


def parse_proxy_jump(value: str | None) -> tuple[JumpHop, ...]:
    """The hops of a ProxyJump value (`[user@]host[:port]` or `ssh://...`, comma separated), first
    hop first; `none` or no value means a direct connection."""
    if value is None or value.strip().lower() == "none":
        return ()
    return tuple(_hop(part.strip()) for part in value.split(","))


_TOKEN = re.compile(r"%.")


def expand_path(value: str, tokens: Mapping[str, str]) -> str:
    """A file name with `~` and OpenSSH's %-tokens expanded (`tokens` maps "%d" to the home directory
    and so on; "%%" is always a percent sign). An unknown token raises ValueError."""

    def one(match: re.Match[str]) -> str:
        token = match.group(0)
        if token == "%%":
            return "%"
        if token not in tokens:
            raise ValueError(f"the token {token} in {value!r} is not supported (use {', '.join(sorted(tokens))})")
        return tokens[token]

    if value == "~" or value.startswith("~/"):
        value = tokens.get("%d", "~") + value[1:]
    return _TOKEN.sub(one, value)


def path_list(value: str | None, default: tuple[str, ...], tokens: Mapping[str, str]) -> tuple[str, ...]:
    """The files of a UserKnownHostsFile/GlobalKnownHostsFile value (space separated, quotes
    allowed), expanded; `none` means no file; no value means `default`."""
    if value is None:
        names = list(default)
    else:
        try:
            names = shlex.split(value)
        except ValueError as error:
            raise ValueError(f"cannot read the file list {value!r} ({error})") from None
    if [n.lower() for n in names] == ["none"]:
        return ()
    return tuple(expand_path(name, tokens) for name in names)


def yes_no(value: str | None, option: str) -> bool | None:
    """A yes/no option (None when unset)."""
    if value is None:
        return None
    word = value.strip().lower()
    if word in ("yes", "true"):
        return True
    if word in ("no", "false"):
        return False
    raise ValueError(f"{option} {value!r}: expected yes or no")
