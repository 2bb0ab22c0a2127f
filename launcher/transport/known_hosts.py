"""What known_hosts files say about a host's key, read the way OpenSSH reads them.

A known_hosts line is `[@marker] patterns key-type base64 [comment]`. `patterns` is a comma list of
host names with `*`/`?` wildcards and `!` negations, or one hashed name (`|1|salt|hmac`); a host is
written `[name]:port` when its port is not 22. `@revoked` marks a key never to trust for the hosts
its patterns match, whatever other lines say; `@cert-authority` trusts host certificates (not
supported here, only reported).

The parser, the matching and the verdict are pure functions over text. Two small functions touch
files: `read_known_hosts` and `append_known_host`. Nothing here opens a connection or decides
what to do with a verdict (see host_keys.py).
"""

from __future__ import annotations

import base64
import binascii
import enum
import fcntl
import functools
import hashlib
import hmac
import os
import re
import stat
import struct
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CERT_AUTHORITY",
    "HASH_MAGIC",
    "REVOKED",
    "HostKeyStatus",
    "HostKeyVerdict",
    "KnownHostLine",
    "KnownHostsText",
    "KnownHostsUnusable",
    "append_known_host",
    "check_host_key",
    "fingerprint",
    "hash_host_name",
    "host_matches",
    "known_host_line",
    "parse_known_hosts",
    "parse_revoked_keys",
    "read_known_hosts",
    "read_revoked_keys",
]

REVOKED = "@revoked"
CERT_AUTHORITY = "@cert-authority"
HASH_MAGIC = "|1|"
_KRL_MAGIC = b"SSHKRL\n\0"  # OpenSSH's binary key revocation list


@dataclass(frozen=True)
class KnownHostLine:
    """One usable line of a known_hosts file: where it is, its marker, host patterns and key."""

    path: str
    line: int
    marker: str | None  # REVOKED, CERT_AUTHORITY or None for a plain entry
    patterns: str  # the host field as written (a hashed name stays hashed)
    key_type: str  # the type inside the key blob ("ssh-ed25519", "ssh-rsa", ...)
    key_blob: bytes

    @property
    def where(self) -> str:
        return f"{self.path} line {self.line}"

    @property
    def hashed(self) -> bool:
        return self.patterns.startswith(HASH_MAGIC)


@dataclass(frozen=True)
class KnownHostsText:
    """A parsed file: its usable lines and the numbers of lines that could not be read."""

    lines: tuple[KnownHostLine, ...]
    unreadable: tuple[int, ...] = ()


class KnownHostsUnusable(Exception):
    """A known_hosts (or revoked keys) file exists but cannot be used; revocations in it would be missed."""

    def __init__(self, path: str, reason: str) -> None:
        self.path, self.reason = path, reason
        super().__init__(f"{path}: {reason}")


def _blob_type(blob: bytes) -> str | None:
    """The key type a public key blob starts with (an SSH string), or None when malformed."""
    if len(blob) < 4:
        return None
    (length,) = struct.unpack(">I", blob[:4])
    if length == 0 or len(blob) < 4 + length:
        return None
    try:
        return blob[4 : 4 + length].decode("ascii")
    except UnicodeDecodeError:
        return None


def _key(key_type: str, data: str) -> bytes | None:
    """The blob of `key_type data` when it decodes and its inner type agrees with the written one."""
    try:
        blob = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None
    return blob if _blob_type(blob) == key_type else None


def parse_known_hosts(text: str, path: str) -> KnownHostsText:
    """Every usable line of a known_hosts file's text; comments and blank lines are skipped, lines
    that do not parse (an unknown marker, a bad key) are listed by number."""
    lines: list[KnownHostLine] = []
    unreadable: list[int] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        fields = raw.split()
        if not fields or fields[0].startswith("#"):
            continue
        marker = None
        if fields[0].startswith("@"):
            marker = fields.pop(0)
            if marker not in (REVOKED, CERT_AUTHORITY):
                unreadable.append(number)
                continue
        blob = _key(fields[1], fields[2]) if len(fields) >= 3 else None
        if blob is None:
            unreadable.append(number)
            continue
        lines.append(KnownHostLine(path, number, marker, fields[0], fields[1], blob))
    return KnownHostsText(tuple(lines), tuple(unreadable))


def parse_revoked_keys(text: str, path: str) -> KnownHostsText:
    """A RevokedHostKeys file of public keys (`type base64 [comment]` per line): each key revoked for
    every host, as an `@revoked *` line would be."""
    lines: list[KnownHostLine] = []
    unreadable: list[int] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        fields = raw.split()
        if not fields or fields[0].startswith("#"):
            continue
        blob = _key(fields[0], fields[1]) if len(fields) >= 2 else None
        if blob is None:
            unreadable.append(number)
            continue
        lines.append(KnownHostLine(path, number, REVOKED, "*", fields[0], blob))
    return KnownHostsText(tuple(lines), tuple(unreadable))


def _pattern_matches(pattern: str, name: str) -> bool:
    """OpenSSH's match_pattern: only `*` and `?` are wildcards; `[` is literal (as in `[host]:2222`).
    A pattern without them (a fleet's known_hosts is one such line per host) is compared as it is:
    a regular expression per line per host made checking N hosts cost N^2 compilations."""
    if "*" not in pattern and "?" not in pattern:
        return pattern == name
    return _pattern_regex(pattern).fullmatch(name) is not None


@functools.lru_cache(maxsize=1024)
def _pattern_regex(pattern: str) -> re.Pattern[str]:
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern), re.DOTALL)


def _hashed_matches(hashed: str, name: str) -> bool:
    parts = hashed[len(HASH_MAGIC) :].split("|")
    if len(parts) != 2:
        return False
    try:
        salt, digest = base64.b64decode(parts[0], validate=True), base64.b64decode(parts[1], validate=True)
    except (binascii.Error, ValueError):
        return False
    return hmac.compare_digest(hmac.new(salt, name.encode(), hashlib.sha1).digest(), digest)


def host_matches(patterns: str, name: str) -> bool:
    """Whether a host field matches `name` (as OpenSSH's match_hostname: case-insensitive, any
    matching `!pattern` excludes the host whatever else matches)."""
    if patterns.startswith(HASH_MAGIC):
        return _hashed_matches(patterns, name)
    name = name.lower()
    matched = False
    for pattern in patterns.lower().split(","):
        negated = pattern.startswith("!")
        if negated:
            pattern = pattern[1:]
        if pattern and _pattern_matches(pattern, name):
            if negated:
                return False
            matched = True
    return matched


class HostKeyStatus(enum.Enum):
    """What the files say about the key a host presented."""

    TRUSTED = "trusted"  # listed for the host, revoked nowhere
    REVOKED = "revoked"  # an @revoked line matching the host names this key
    CHANGED = "changed"  # the host is listed with another key of the same type, never with this one
    UNKNOWN = "unknown"  # the host is not listed with a key of this type


@dataclass(frozen=True)
class HostKeyVerdict:
    """The status, with the lines that led to it (for a message that names file and line)."""

    status: HostKeyStatus
    revoked_by: KnownHostLine | None = None
    listed_by: tuple[KnownHostLine, ...] = ()  # lines listing the presented key for the host
    other_keys: tuple[KnownHostLine, ...] = ()  # lines listing other keys for the host
    # every @cert-authority line read, whatever its patterns: host certificates are not supported,
    # so a host its user reaches through one is unknown here, and the message should say why
    authorities: tuple[KnownHostLine, ...] = ()


def check_host_key(lines: Iterable[KnownHostLine], names: Sequence[str], key_blob: bytes) -> HostKeyVerdict:
    """Judge the key a host presented against every line read. `names` are the names the host goes
    by in known_hosts (`host` or `[host]:port`, or its HostKeyAlias). Revocation wins over any
    listing; a listing anywhere wins over another key of the same type elsewhere (as OpenSSH)."""
    key_type = _blob_type(key_blob)
    revoked_by: KnownHostLine | None = None
    listed: list[KnownHostLine] = []
    others: list[KnownHostLine] = []
    authorities: list[KnownHostLine] = []
    for line in lines:
        if line.marker == CERT_AUTHORITY:
            authorities.append(line)
            continue
        if not any(host_matches(line.patterns, name) for name in names):
            continue
        if line.marker == REVOKED:
            if line.key_blob == key_blob and revoked_by is None:
                revoked_by = line
        elif line.key_blob == key_blob:
            listed.append(line)
        else:
            others.append(line)
    if revoked_by is not None:
        status = HostKeyStatus.REVOKED
    elif listed:
        status = HostKeyStatus.TRUSTED
    elif any(line.key_type == key_type for line in others):
        status = HostKeyStatus.CHANGED
    else:
        status = HostKeyStatus.UNKNOWN
    return HostKeyVerdict(status, revoked_by, tuple(listed), tuple(others), tuple(authorities))


def fingerprint(key_blob: bytes) -> str:
    """The SHA256 fingerprint OpenSSH prints (`SHA256:...`, unpadded base64)."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(key_blob).digest()).decode().rstrip("=")


def hash_host_name(name: str, salt: bytes | None = None) -> str:
    """`|1|salt|hmac` as `ssh-keygen -H` and HashKnownHosts write it (HMAC-SHA1, 20-byte salt)."""
    salt = os.urandom(20) if salt is None else salt
    digest = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"{HASH_MAGIC}{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def known_host_line(name: str, key_blob: bytes, hashed: bool) -> str:
    """One known_hosts line (with its newline) for a newly accepted key."""
    host = hash_host_name(name) if hashed else name
    key_type = _blob_type(key_blob) or "unknown"
    return f"{host} {key_type} {base64.b64encode(key_blob).decode()}\n"


MAX_FILE_BYTES = 64 << 20  # a known_hosts of a million hosts is about 100 MB of RSA keys; 64 MiB is plenty


def _open_regular(path: str) -> int | None:
    """A descriptor of `path` when it is a regular file of at most MAX_FILE_BYTES; None for /dev/null
    (UserKnownHostsFile /dev/null: no keys). Opened without waiting (a FIFO would hold the launch)
    and never read when it is anything else: KnownHostsUnusable says what it is."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    info = os.fstat(fd)
    if stat.S_ISREG(info.st_mode) and info.st_size <= MAX_FILE_BYTES:
        return fd
    os.close(fd)
    if stat.S_ISCHR(info.st_mode) and os.path.realpath(path) == os.devnull:
        return None
    why = f"larger than {MAX_FILE_BYTES >> 20} MiB" if stat.S_ISREG(info.st_mode) else "not a regular file"
    raise KnownHostsUnusable(path, why)


def _read_whole(fd: int) -> bytes:
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:  # it grew meanwhile
        raise OSError(f"larger than {MAX_FILE_BYTES >> 20} MiB")
    return data


def read_known_hosts(paths: Iterable[str]) -> tuple[KnownHostLine, ...]:
    """The lines of every file that exists. A file that exists but cannot be read (or is no regular file,
    or is huge) raises KnownHostsUnusable: a revocation in it must not be skipped without a word."""
    lines: list[KnownHostLine] = []
    for path in paths:
        try:
            fd = _open_regular(path)
            if fd is None:
                continue
            info = os.fstat(fd)
            version = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
            with _PARSED_LOCK:
                parsed = _parsed.get(path)
            if parsed is None or parsed[0] != version:
                text = _read_whole(fd).decode("utf-8", errors="replace")
                parsed = (version, parse_known_hosts(text, path).lines)
                with _PARSED_LOCK:
                    _parsed[path] = parsed
            else:
                os.close(fd)
        except FileNotFoundError:  # absent files are normal (OpenSSH lists files that rarely exist)
            continue
        except OSError as error:
            raise KnownHostsUnusable(path, error.strerror or str(error)) from None
        lines.extend(parsed[1])
    return tuple(lines)


# A file read once per version, not once per host: every host of a fleet reads the same known_hosts
# (a line per host), which made N hosts parse N^2 lines. A file changed since (a key recorded, an
# edit) has another size or time, and is read again: its change time too, which no user can set back.
_PARSED_LOCK = threading.Lock()
_parsed: dict[str, tuple[tuple[int, ...], tuple[KnownHostLine, ...]]] = {}


def read_revoked_keys(path: str) -> tuple[KnownHostLine, ...]:
    """The keys of a RevokedHostKeys file of public keys. A binary KRL is refused (not supported);
    a missing file too, since OpenSSH then refuses every host key."""
    try:
        fd = _open_regular(path)
        data = b"" if fd is None else _read_whole(fd)
    except OSError as error:
        raise KnownHostsUnusable(path, error.strerror or str(error)) from None
    if data.startswith(_KRL_MAGIC):
        raise KnownHostsUnusable(path, "it is a binary key revocation list (KRL), which is not supported")
    return parse_revoked_keys(data.decode("utf-8", errors="replace"), path).lines


_APPEND_LOCK = threading.Lock()  # hosts connect side by side and may record into one file


def append_known_host(path: str, line: str) -> bool:
    """Append one line to `path` in a single write under an exclusive flock, so concurrent writers
    never interleave or lose lines; the file is never replaced, so its mode, owner and any symlink
    to it stay as they are. A new file is 0600 in a 0700 directory. Returns False, writing nothing,
    when `path` is not a regular file (UserKnownHostsFile /dev/null)."""
    target = Path(path)
    if not target.parent.exists():
        target.parent.mkdir(parents=True, mode=0o700)
    with _APPEND_LOCK:
        fd = os.open(target, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return False
            fcntl.flock(fd, fcntl.LOCK_EX)
            size = os.fstat(fd).st_size
            data = line.encode()
            if size and os.pread(fd, 1, size - 1) != b"\n":
                data = b"\n" + data
            written = 0
            while written < len(data):
                written += os.write(fd, data[written:])
            os.fsync(fd)
            return True
        finally:
            os.close(fd)  # releases the flock too
