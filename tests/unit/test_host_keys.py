"""The host key decision table, the policy from the spec and StrictHostKeyChecking, and the messages
that name the file and line that decided."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.transport.host_keys import (
    HostKeyAction,
    HostKeyPolicy,
    HostKeySubject,
    decide,
    host_key_policy,
    preferred_key_types,
    refusal,
)
from launcher.transport.known_hosts import HostKeyStatus, check_host_key, fingerprint, parse_known_hosts
from tests.unit.test_known_hosts import NAME, A, B, R, b64

STRICT = HostKeyPolicy(False, "StrictHostKeyChecking yes in /home/u/.ssh/config")
ACCEPT = HostKeyPolicy(True, "ssh.accept_unknown_host_keys: true in the spec")


@pytest.mark.parametrize(
    ("status", "policy", "action"),
    [
        (HostKeyStatus.TRUSTED, STRICT, HostKeyAction.CONNECT),
        (HostKeyStatus.TRUSTED, ACCEPT, HostKeyAction.CONNECT),
        (HostKeyStatus.UNKNOWN, STRICT, HostKeyAction.REFUSE),
        (HostKeyStatus.UNKNOWN, ACCEPT, HostKeyAction.RECORD),
        (HostKeyStatus.CHANGED, STRICT, HostKeyAction.REFUSE),
        (HostKeyStatus.CHANGED, ACCEPT, HostKeyAction.REFUSE),
        (HostKeyStatus.REVOKED, STRICT, HostKeyAction.REFUSE),
        (HostKeyStatus.REVOKED, ACCEPT, HostKeyAction.REFUSE),
    ],
)
def test_decision_table(status: HostKeyStatus, policy: HostKeyPolicy, action: HostKeyAction) -> None:
    from launcher.transport.known_hosts import HostKeyVerdict

    assert decide(HostKeyVerdict(status), policy) is action


@pytest.mark.parametrize(
    ("spec", "strict", "accepts", "warns"),
    [
        (False, None, False, False),
        (False, "yes", False, False),
        (False, "ask", False, False),
        (False, "accept-new", True, False),
        (False, "Accept-New", True, False),
        (False, "no", True, True),
        (False, "off", True, True),
        (True, "yes", True, False),  # the spec's explicit opt-in wins
        (True, None, True, False),
    ],
)
def test_policy_from_spec_and_strict_host_key_checking(
    spec: bool, strict: str | None, accepts: bool, warns: bool
) -> None:
    policy = host_key_policy(spec, strict, "/home/u/.ssh/config")
    assert policy.accept_unknown is accepts
    assert (policy.warning is not None) is warns
    if warns:
        assert policy.warning and "accept-new" in policy.warning and "still refused" in policy.warning
    if strict and not spec:
        assert f"StrictHostKeyChecking {strict} in /home/u/.ssh/config" in policy.setting


def test_an_unknown_strict_value_is_refused() -> None:
    with pytest.raises(ValueError, match="StrictHostKeyChecking maybe in /c: expected yes, ask, accept-new, no or off"):
        host_key_policy(False, "maybe", "/c")


def test_known_types_are_asked_for_first() -> None:
    lines = parse_known_hosts(
        f"{NAME} ssh-rsa {b64(R)}\n@revoked {NAME} ssh-ed25519 {b64(A)}\nother ecdsa-sha2-nistp256 {b64(B)}\n", "/kh"
    ).lines
    offered = ("ssh-ed25519", "ecdsa-sha2-nistp256", "rsa-sha2-512", "rsa-sha2-256", "ssh-rsa")
    assert preferred_key_types(lines, [NAME], offered) == [
        "rsa-sha2-512",
        "rsa-sha2-256",
        "ssh-rsa",
        "ssh-ed25519",
        "ecdsa-sha2-nistp256",
    ]
    assert preferred_key_types(lines, ["unlisted"], offered) == list(offered)


def subject(policy: HostKeyPolicy = STRICT, in_spec: bool = True) -> HostKeySubject:
    return HostKeySubject(
        key_name=NAME,
        hostname="10.0.0.5",
        port=2222,
        key_type="ssh-ed25519",
        key_blob=A,
        files=("/home/u/.ssh/known_hosts", "/etc/ssh/ssh_known_hosts"),
        record_file="/home/u/.ssh/known_hosts",
        policy=policy,
        in_spec=in_spec,
    )


def test_a_revocation_names_the_file_and_line_and_the_listing_it_overrides() -> None:
    lines = (
        *parse_known_hosts(f"{NAME} ssh-ed25519 {b64(A)}\n", "/home/u/.ssh/known_hosts").lines,
        *parse_known_hosts(
            f"# revoked after the leak\n@revoked * ssh-ed25519 {b64(A)}\n", "/etc/ssh/ssh_known_hosts"
        ).lines,
    )
    message = refusal(check_host_key(lines, [NAME], A), subject(ACCEPT))
    assert message.startswith(f"the host key of {NAME} (ssh-ed25519 {fingerprint(A)}) is revoked by ")
    assert "/etc/ssh/ssh_known_hosts line 2 (@revoked *)" in message
    assert "although /home/u/.ssh/known_hosts line 1 lists it" in message
    assert f"ssh-keygen -f /home/u/.ssh/known_hosts -R '{NAME}'" in message
    assert "ssh-keyscan -p 2222 10.0.0.5 >> /home/u/.ssh/known_hosts" in message


def test_a_changed_key_says_where_the_old_one_is() -> None:
    lines = parse_known_hosts(f"# x\n{NAME} ssh-ed25519 {b64(B)}\n", "/home/u/.ssh/known_hosts").lines
    message = refusal(check_host_key(lines, [NAME], A), subject(ACCEPT))
    assert "has CHANGED since it was recorded in /home/u/.ssh/known_hosts line 2" in message
    assert f"ssh-keygen -f /home/u/.ssh/known_hosts -R '{NAME}'" in message


def test_an_unknown_key_says_what_was_read_and_which_setting_refused() -> None:
    lines = parse_known_hosts(
        f"{NAME} ssh-rsa {b64(R)}\n@cert-authority * ssh-rsa {b64(R)}\n@cert-authority *.x ssh-rsa {b64(R)}\n", "/kh"
    ).lines
    message = refusal(check_host_key(lines, [NAME], A), subject())
    assert message.startswith(f"unknown host key for {NAME} (ssh-ed25519 {fingerprint(A)}; not in ")
    assert "/home/u/.ssh/known_hosts, /etc/ssh/ssh_known_hosts" in message
    assert "listed only with ssh-rsa keys (/kh line 1)" in message
    assert "/kh trusts host certificates (@cert-authority, line 2, 3)" in message
    assert "refused by StrictHostKeyChecking yes in /home/u/.ssh/config" in message
    assert "set ssh.accept_unknown_host_keys: true for this host" in message
    hop = refusal(check_host_key((), [NAME], A), subject(in_spec=False))
    assert "accept_unknown_host_keys" not in hop and f"StrictHostKeyChecking accept-new for {NAME}" in hop


def test_the_keyscan_fix_makes_a_missing_ssh_folder_first(tmp_path: Path) -> None:
    from launcher.transport.host_keys import HostKeySubject, host_key_policy

    def subject(record: str) -> HostKeySubject:
        policy = host_key_policy(False, None, "~/.ssh/config")
        return HostKeySubject("h", "h", 22, "ssh-ed25519", b"k", (record,), record, policy, True)

    missing = tmp_path / "none" / ".ssh" / "known_hosts"
    assert subject(str(missing)).keyscan == f"mkdir -p -m 700 {missing.parent} && ssh-keyscan h >> {missing}"
    assert subject(str(tmp_path / "known_hosts")).keyscan == f"ssh-keyscan h >> {tmp_path / 'known_hosts'}"
