"""~/.ssh/config options that decide whom we trust and how we get there: read, honoured or refused
with a message; and the table that turns connection errors into fix-it messages (no server)."""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

import paramiko
import pytest

from launcher.common.errors import HostError
from launcher.spec.hosts import HostSpec
from launcher.transport.ssh_client import HostKeyRefused, SshTarget, _host_error, resolve_target
from launcher.transport.ssh_options import JumpHop, expand_path, parse_proxy_jump, path_list, yes_no


@pytest.mark.parametrize(
    ("value", "hops"),
    [
        (None, ()),
        ("none", ()),
        ("bastion", (JumpHop("bastion"),)),
        ("ops@bastion:2200", (JumpHop("bastion", "ops", 2200),)),
        ("ssh://ops@bastion:2200", (JumpHop("bastion", "ops", 2200),)),
        ("a, b:23", (JumpHop("a"), JumpHop("b", None, 23))),
        ("[fe80::1]:2222", (JumpHop("fe80::1", None, 2222),)),
        ("u@[gw]", (JumpHop("gw", "u"),)),
        ("fe80::1", (JumpHop("fe80::1"),)),
    ],
)
def test_proxy_jump_values(value: str | None, hops: tuple[JumpHop, ...]) -> None:
    assert parse_proxy_jump(value) == hops


@pytest.mark.parametrize("value", ["a:0", "a:99999", "a:x", "@a", "[a", "[a]x", "a,,b"])
def test_bad_proxy_jump_values_are_refused(value: str) -> None:
    with pytest.raises(ValueError, match="jump host"):
        parse_proxy_jump(value)


def test_known_hosts_file_lists_and_tokens() -> None:
    tokens = {"%d": "/home/u", "%h": "gpu-a", "%u": "u"}
    assert path_list("~/kh /etc/kh_%h", (), tokens) == ("/home/u/kh", "/etc/kh_gpu-a")
    assert path_list('"/a b/kh" %d/x%%', (), tokens) == ("/a b/kh", "/home/u/x%")
    assert path_list(None, ("~/.ssh/known_hosts",), tokens) == ("/home/u/.ssh/known_hosts",)
    assert path_list("none", ("~/x",), tokens) == ()
    with pytest.raises(ValueError, match="token %k"):
        expand_path("~/kh_%k", tokens)
    assert yes_no(None, "HashKnownHosts") is None and yes_no("Yes", "X") is True and yes_no("no", "X") is False
    with pytest.raises(ValueError, match="HashKnownHosts 'maybe': expected yes or no"):
        yes_no("maybe", "HashKnownHosts")


def host(address: str, **ssh: object) -> HostSpec:
    return HostSpec.model_validate({"address": address, "ports": [5000], **({"ssh": ssh} if ssh else {})})


def test_known_hosts_files_strictness_and_hashing_from_the_config(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text(
        "Host gpu-*\n"
        "  UserKnownHostsFile ~/.ssh/fleet_hosts %d/.ssh/known_hosts_%h\n"
        f"  GlobalKnownHostsFile {tmp_path}/global\n"
        "  StrictHostKeyChecking accept-new\n"
        "  HashKnownHosts yes\n"
        f"  RevokedHostKeys {tmp_path}/revoked\n"
        "  HostKeyAlias fleet-node\n"
    )
    target = resolve_target(host("gpu-a"), str(config))
    home = os.path.expanduser("~")
    assert target.user_known_hosts == (f"{home}/.ssh/fleet_hosts", f"{home}/.ssh/known_hosts_gpu-a")
    assert target.known_hosts == f"{home}/.ssh/fleet_hosts"
    assert target.global_known_hosts == (f"{tmp_path}/global",)
    assert target.revoked_host_keys == f"{tmp_path}/revoked"
    assert target.accept_unknown and target.hash_known_hosts is True and target.key_name == "fleet-node"
    assert target.known_hosts_files[-1] == f"{tmp_path}/revoked"
    # the spec's file replaces UserKnownHostsFile; the system files are still read
    pinned = resolve_target(host("gpu-a", known_hosts=str(tmp_path / "kh")), str(config))
    assert pinned.user_known_hosts == (str(tmp_path / "kh"),) and pinned.global_known_hosts == (f"{tmp_path}/global",)


def test_defaults_read_the_user_and_system_files(tmp_path: Path) -> None:
    target = resolve_target(host("10.0.0.9"), str(tmp_path / "none"))
    home = os.path.expanduser("~")
    assert target.user_known_hosts == (f"{home}/.ssh/known_hosts", f"{home}/.ssh/known_hosts2")
    assert target.global_known_hosts == ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")
    assert not target.accept_unknown and target.jump is None and target.policy.warning is None


def test_strict_no_is_taken_as_accept_new_with_a_warning(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text("Host *\n  StrictHostKeyChecking no\n")
    target = resolve_target(host("node"), str(config))
    assert target.accept_unknown and target.policy.warning and "taken as accept-new" in target.policy.warning


def test_proxy_jump_chains_resolve_each_hop_from_the_config(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text(
        "Host node\n  ProxyJump ops@gate,inner:2200\n"
        "Host gate\n  HostName 10.9.0.1\n  Port 2201\n  ProxyJump outer\n  IdentityFile ~/.ssh/gate_key\n"
        "Host inner\n  HostName 10.9.0.2\n  ProxyJump ignored-for-the-second-hop\n"
        "Host outer\n  HostName 10.9.0.3\n  StrictHostKeyChecking accept-new\n"
    )
    target = resolve_target(host("node", accept_unknown_host_keys=True, known_hosts=str(tmp_path / "kh")), str(config))
    assert target.in_spec and target.accept_unknown
    inner = target.jump
    assert inner is not None and (inner.address, inner.hostname, inner.port) == ("inner", "10.9.0.2", 2200)
    gate = inner.jump
    assert gate is not None and (gate.address, gate.hostname, gate.port, gate.user) == ("gate", "10.9.0.1", 2201, "ops")
    assert gate.identity_files[0].endswith("/.ssh/gate_key")
    outer = gate.jump
    assert outer is not None and outer.hostname == "10.9.0.3" and outer.jump is None and outer.accept_unknown
    # the spec's settings are the spec host's: a bastion is not opted in, nor pinned to its file
    assert not gate.in_spec and not gate.accept_unknown and gate.known_hosts.endswith("/.ssh/known_hosts")


@pytest.mark.parametrize(
    ("config_text", "expected"),
    [
        ("Host node\n  ProxyJump node\n", "ProxyJump loops"),
        ("Host node\n  ProxyJump a\nHost a\n  ProxyJump node\n", "node -> a -> node"),
        ("Host node\n  ProxyCommand ssh -W %h:%p gate\n", "ProxyCommand is not supported"),
        ("Host gate\n  ProxyCommand nc %h %p\nHost node\n  ProxyJump gate\n", "gate: ProxyCommand is not supported"),
        ("Host node\n  KnownHostsCommand /bin/true\n", "KnownHostsCommand is not supported"),
        ("Host node\n  StrictHostKeyChecking maybe\n", "StrictHostKeyChecking maybe"),
        ("Host node\n  ProxyJump a:0\n", "must be 1..65535"),
    ],
)
def test_options_refused_with_the_host_and_the_file(tmp_path: Path, config_text: str, expected: str) -> None:
    config = tmp_path / "config"
    config.write_text(config_text)
    with pytest.raises(HostError) as caught:
        resolve_target(host("node"), str(config))
    assert caught.value.host == "node" and expected in caught.value.cause and str(config) in caught.value.cause


def test_proxy_command_none_is_a_direct_connection(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text("Host node\n  ProxyCommand none\n  ProxyJump none\n")
    assert resolve_target(host("node"), str(config)).jump is None


def a_target(tmp_path: Path, config_text: str = "") -> SshTarget:
    config = tmp_path / "config"
    config.write_text(config_text)
    return resolve_target(host("node", port=2222, user="train"), str(config))


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (
            HostKeyRefused("the host key of x is revoked by /kh line 2"),
            "node: the host key of x is revoked by /kh line 2",
        ),
        (paramiko.AuthenticationException("denied"), "node: authentication as train failed (denied)"),
        (paramiko.ChannelException(1, "Administratively prohibited"), "AllowTcpForwarding"),
        (paramiko.SSHException("Error reading SSH protocol banner"), "accepted the connection but said nothing SSH"),
        (paramiko.SSHException("Incompatible ssh peer (no acceptable kex algorithm)"), "SSH handshake with train@node"),
        (EOFError(), "failed: EOFError"),
        (socket.gaierror(-2, "Name or service not known"), "cannot resolve host name 'node'"),
        (TimeoutError(), "no answer from train@node:2222 within 10s"),
        (ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"), "Connection refused; is sshd running"),
        (paramiko.ssh_exception.NoValidConnectionsError({("1.2.3.4", 22): OSError()}), "Unable to connect to port"),
    ],
)
def test_connection_errors_become_fix_it_messages(tmp_path: Path, error: BaseException, expected: str) -> None:
    message = str(_host_error(a_target(tmp_path), error))
    assert message.startswith("node: ") and expected in message, message


def test_errors_through_a_jump_host_name_it(tmp_path: Path) -> None:
    target = a_target(tmp_path, "Host node\n  ProxyJump gate\n")
    assert "through ProxyJump gate" in str(_host_error(target, TimeoutError()))
    refused = str(_host_error(target, paramiko.ChannelException(2, "Connect failed")))
    assert "gate did not open a connection to node:2222 (Connect failed)" in refused
