"""known_hosts read as OpenSSH reads it: markers, host patterns, hashed names, and the verdict on a
presented key (a revoked key loses whatever else lists it)."""

from __future__ import annotations

import base64
import os
import struct
from pathlib import Path

import pytest

from launcher.transport.known_hosts import (
    CERT_AUTHORITY,
    REVOKED,
    HostKeyStatus,
    KnownHostLine,
    KnownHostsUnusable,
    append_known_host,
    check_host_key,
    fingerprint,
    hash_host_name,
    host_matches,
    known_host_line,
    parse_known_hosts,
    parse_revoked_keys,
    read_known_hosts,
    read_revoked_keys,
)


def blob(key_type: str, seed: int) -> bytes:
    """A public key blob as OpenSSH encodes one: the type, then the key material."""
    body = bytes([seed]) * 32
    return struct.pack(">I", len(key_type)) + key_type.encode() + struct.pack(">I", len(body)) + body


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


A = blob("ssh-ed25519", 1)
B = blob("ssh-ed25519", 2)
R = blob("ssh-rsa", 3)
NAME = "[10.0.0.5]:2222"


def lines_of(text: str, path: str = "/kh") -> tuple[KnownHostLine, ...]:
    return parse_known_hosts(text, path).lines


def test_parser_reads_markers_patterns_and_keys_and_lists_bad_lines() -> None:
    text = (
        "# fleet\n"
        "\n"
        f"{NAME},other ssh-ed25519 {b64(A)} a comment\n"
        f"  @revoked * ssh-ed25519 {b64(B)}\n"
        f"@cert-authority *.example.com ssh-rsa {b64(R)}\n"
        f"@bogus * ssh-ed25519 {b64(A)}\n"
        "host ssh-ed25519 not-base64!!\n"
        f"host ssh-rsa {b64(A)}\n"  # the blob says ed25519: refused
        "host-only\n"
    )
    parsed = parse_known_hosts(text, "/etc/kh")
    assert [(x.line, x.marker, x.patterns, x.key_type) for x in parsed.lines] == [
        (3, None, f"{NAME},other", "ssh-ed25519"),
        (4, REVOKED, "*", "ssh-ed25519"),
        (5, CERT_AUTHORITY, "*.example.com", "ssh-rsa"),
    ]
    assert parsed.lines[0].key_blob == A and parsed.lines[1].where == "/etc/kh line 4"
    assert parsed.unreadable == (6, 7, 8, 9)


@pytest.mark.parametrize(
    ("patterns", "name", "expected"),
    [
        ("*", NAME, True),
        (NAME, NAME, True),
        ("[10.0.0.5]:22", NAME, False),
        ("10.0.0.5", NAME, False),  # a non-22 port is part of the name
        ("[10.0.0.?]:2222", NAME, True),
        ("[10.0.0.*]:*", NAME, True),
        ("GPU-A.internal", "gpu-a.internal", True),
        ("*.internal,!gpu-b.internal", "gpu-b.internal", False),
        ("!gpu-b.internal,*.internal", "gpu-b.internal", False),
        ("*.internal,!gpu-b.internal", "gpu-a.internal", True),
        ("!gpu-b.internal", "gpu-a.internal", False),  # a negation alone matches nothing
        ("gpu-a", "gpu-ab", False),
    ],
)
def test_host_patterns_match_as_openssh(patterns: str, name: str, expected: bool) -> None:
    assert host_matches(patterns, name) is expected


def test_hashed_names_match_only_their_host() -> None:
    hashed = hash_host_name(NAME)
    assert hashed.startswith("|1|") and NAME not in hashed
    assert host_matches(hashed, NAME)
    assert not host_matches(hashed, "[10.0.0.5]:2223")
    assert hash_host_name(NAME) != hashed, "a fresh salt each time"
    # what `ssh-keygen -H` (OpenSSH 9.2) wrote for [example.com]:2222
    written = "|1|cGVQB1jsKGysrlOlAbGw89Vw0gA=|zN/1NWdHSK3f042lAezeKkOkDtA="
    assert hash_host_name("[example.com]:2222", base64.b64decode(written.split("|")[2])) == written
    assert host_matches(written, "[example.com]:2222") and not host_matches(written, "example.com")
    assert host_matches("|1|broken", NAME) is False and host_matches("|1|!!|!!", NAME) is False


def test_a_revoked_key_is_refused_even_when_listed_for_the_host() -> None:
    lines = lines_of(f"{NAME} ssh-ed25519 {b64(A)}\n@revoked * ssh-ed25519 {b64(A)}\n")
    verdict = check_host_key(lines, [NAME], A)
    assert verdict.status is HostKeyStatus.REVOKED
    assert verdict.revoked_by is not None and verdict.revoked_by.line == 2
    assert [x.line for x in verdict.listed_by] == [1]


def test_revocations_count_from_every_file_and_only_for_hosts_they_match() -> None:
    user = lines_of(f"{NAME} ssh-ed25519 {b64(A)}\n", "/home/u/.ssh/known_hosts")
    other_host = lines_of(f"@revoked gpu-b ssh-ed25519 {b64(A)}\n", "/etc/ssh/ssh_known_hosts")
    assert check_host_key((*user, *other_host), [NAME], A).status is HostKeyStatus.TRUSTED
    negated = lines_of(f"@revoked *,!{NAME} ssh-ed25519 {b64(A)}\n", "/etc/ssh/ssh_known_hosts")
    assert check_host_key((*user, *negated), [NAME], A).status is HostKeyStatus.TRUSTED
    hashed = lines_of(f"@revoked {hash_host_name(NAME)} ssh-ed25519 {b64(A)}\n", "/etc/ssh/ssh_known_hosts")
    verdict = check_host_key((*user, *hashed), [NAME], A)
    assert verdict.status is HostKeyStatus.REVOKED
    assert verdict.revoked_by is not None and verdict.revoked_by.path == "/etc/ssh/ssh_known_hosts"
    # revoking another key changes nothing for this one
    revoked_b = lines_of(f"@revoked * ssh-ed25519 {b64(B)}\n")
    assert check_host_key((*user, *revoked_b), [NAME], A).status is HostKeyStatus.TRUSTED


def test_changed_unknown_and_trusted() -> None:
    listed_b = lines_of(f"{NAME} ssh-ed25519 {b64(B)}\n")
    changed = check_host_key(listed_b, [NAME], A)
    assert changed.status is HostKeyStatus.CHANGED and changed.other_keys == listed_b
    # listed anywhere wins over another key of the same type elsewhere (as OpenSSH)
    both = (*listed_b, *lines_of(f"*.x,{NAME} ssh-ed25519 {b64(A)}\n", "/etc/kh"))
    assert check_host_key(both, [NAME], A).status is HostKeyStatus.TRUSTED
    # known with another type only: new, not changed
    rsa_only = lines_of(f"{NAME} ssh-rsa {b64(R)}\n@cert-authority * ssh-rsa {b64(R)}\n")
    unknown = check_host_key(rsa_only, [NAME], A)
    assert unknown.status is HostKeyStatus.UNKNOWN
    assert [x.key_type for x in unknown.other_keys] == ["ssh-rsa"] and len(unknown.authorities) == 1
    assert check_host_key(listed_b, ["elsewhere"], A).status is HostKeyStatus.UNKNOWN
    # @cert-authority lines are all reported (not supported), whatever host they name
    other_authority = lines_of(f"@cert-authority *.example.com ssh-rsa {b64(R)}\n")
    assert check_host_key(other_authority, [NAME], A).authorities == other_authority


def test_revoked_keys_file_revokes_for_every_host_and_a_krl_is_refused(tmp_path: Path) -> None:
    parsed = parse_revoked_keys(f"# old keys\nssh-ed25519 {b64(A)} old\nnonsense\n", "/rk")
    assert [(x.marker, x.patterns, x.line) for x in parsed.lines] == [(REVOKED, "*", 2)]
    assert parsed.unreadable == (3,)
    assert check_host_key(parsed.lines, [NAME], A).status is HostKeyStatus.REVOKED
    krl = tmp_path / "krl"
    krl.write_bytes(b"SSHKRL\n\0" + b"\x00" * 16)
    with pytest.raises(KnownHostsUnusable, match="binary key revocation list"):
        read_revoked_keys(str(krl))
    with pytest.raises(KnownHostsUnusable):
        read_revoked_keys(str(tmp_path / "missing"))


def test_reading_skips_missing_files_and_refuses_unreadable_ones(tmp_path: Path) -> None:
    first = tmp_path / "a"
    first.write_text(f"{NAME} ssh-ed25519 {b64(A)}\n")
    lines = read_known_hosts([str(tmp_path / "missing"), str(first)])
    assert [(x.path, x.line) for x in lines] == [(str(first), 1)]
    with pytest.raises(KnownHostsUnusable) as caught:
        read_known_hosts([str(tmp_path)])  # a directory: exists but cannot be read as a file
    assert caught.value.path == str(tmp_path)


def test_a_file_is_parsed_once_for_every_host_until_it_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every host of a fleet reads the same known_hosts (a line per host): parsed once per version,
    not once per host (N hosts had parsed N^2 lines); a key recorded since is read."""
    from launcher.transport import known_hosts

    parsed: list[str] = []
    real = known_hosts.parse_known_hosts
    monkeypatch.setattr(known_hosts, "parse_known_hosts", lambda text, path: parsed.append(path) or real(text, path))
    path = tmp_path / "known_hosts"
    path.write_text("".join(f"[10.0.0.{i}]:22 ssh-ed25519 {b64(A)}\n" for i in range(64)))
    for _ in range(64):
        assert len(read_known_hosts([str(path)])) == 64
    assert parsed == [str(path)]
    append_known_host(str(path), f"{NAME} ssh-ed25519 {b64(B)}\n")
    assert check_host_key(read_known_hosts([str(path)]), [NAME], B).status is HostKeyStatus.TRUSTED
    assert parsed == [str(path)] * 2
    # an edit in place that keeps the size and sets the time back is still seen (its change time moved)
    before = path.stat()
    text = path.read_text()
    path.write_text(text.replace(f"{NAME} ssh-ed25519", f"{NAME} ssh-ed25519".replace("0.", "9."), 1))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size and path.stat().st_mtime_ns == before.st_mtime_ns
    assert check_host_key(read_known_hosts([str(path)]), [NAME], B).status is not HostKeyStatus.TRUSTED


def test_new_lines_plain_or_hashed() -> None:
    assert known_host_line(NAME, A, hashed=False) == f"{NAME} ssh-ed25519 {b64(A)}\n"
    hashed = known_host_line(NAME, A, hashed=True)
    (parsed,) = lines_of(hashed)
    assert parsed.hashed and NAME not in hashed and host_matches(parsed.patterns, NAME) and parsed.key_blob == A
    assert fingerprint(A).startswith("SHA256:") and not fingerprint(A).endswith("=")


def test_append_keeps_the_file_its_mode_and_its_symlink(tmp_path: Path) -> None:
    real = tmp_path / "dotfiles" / "known_hosts"
    real.parent.mkdir()
    real.write_text("# no newline at the end")
    real.chmod(0o644)
    link = tmp_path / "known_hosts"
    link.symlink_to(real)
    inode = real.stat().st_ino
    assert append_known_host(str(link), "h ssh-ed25519 AAAA\n")
    assert append_known_host(str(link), "i ssh-ed25519 BBBB\n")
    assert real.read_text() == "# no newline at the end\nh ssh-ed25519 AAAA\ni ssh-ed25519 BBBB\n"
    assert link.is_symlink() and real.stat().st_ino == inode and real.stat().st_mode & 0o777 == 0o644


def test_append_creates_a_private_file_and_never_writes_a_device(tmp_path: Path) -> None:
    new = tmp_path / "ssh" / "known_hosts"
    assert append_known_host(str(new), "h ssh-ed25519 AAAA\n")
    assert new.read_text() == "h ssh-ed25519 AAAA\n"
    assert new.stat().st_mode & 0o777 == 0o600 & ~_umask() and new.parent.stat().st_mode & 0o777 == 0o700 & ~_umask()
    assert append_known_host(os.devnull, "h ssh-ed25519 AAAA\n") is False


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def test_a_known_hosts_that_is_no_regular_file_is_refused_without_reading_it(tmp_path: Path) -> None:
    """An endless device would take all the memory, a FIFO would hold the launch; /dev/null is no keys."""
    import os

    from launcher.transport.known_hosts import KnownHostsUnusable, read_known_hosts, read_revoked_keys

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in ("/dev/zero", str(fifo), str(tmp_path)):
        with pytest.raises(KnownHostsUnusable) as raised:
            read_known_hosts([path])
        assert raised.value.reason == "not a regular file"
        with pytest.raises(KnownHostsUnusable):
            read_revoked_keys(path)
    assert read_known_hosts(["/dev/null"]) == ()
    assert read_revoked_keys("/dev/null") == ()
