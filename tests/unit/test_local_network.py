"""Which isolation a local gang gets, and how its tasks are started there (the decisions; the real
namespaces, slirp4netns and firewall are in tests/integration/test_local_network.py)."""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from launcher.agent import netns, spawn
from launcher.transport import local_network, private_network
from launcher.transport.local_network import open_local_network
from launcher.transport.port_firewall import FirewallUnavailable
from launcher.transport.private_network import NetworkUnavailable


@dataclass
class Task:
    host: str
    port: int
    is_local: bool = True


class Unavailable:
    def __init__(self, ports: list[int]) -> None:
        raise FirewallUnavailable("no nft (nftables) for a firewall rule")


def _no_private(env: dict[str, str]) -> Any:
    raise NetworkUnavailable("no slirp4netns on PATH for a private network")


@pytest.fixture
def nothing_works(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_network, "make_private", _no_private)
    monkeypatch.setattr(local_network, "take_early", lambda: None)
    monkeypatch.setattr(local_network, "PortFirewall", Unavailable)


def test_a_gang_with_a_remote_task_is_left_on_the_machines_network() -> None:
    tasks: list[Any] = [Task("localhost", 1000), Task("node2", 1001, is_local=False)]
    assert open_local_network("private", tasks, "/r") is None


def test_host_keeps_the_machines_network_without_a_warning() -> None:
    network = open_local_network("host", [Task("localhost", 1000)], "/r")  # type: ignore[list-item]
    assert network is not None and network.order is None and network.warning is None
    assert network.exposed == (1000,) and "local_network is host" in network.says


def test_where_nothing_closes_the_ports_the_warning_names_them_and_why(nothing_works: None) -> None:
    network = open_local_network("private", [Task("localhost", 2001), Task("127.0.0.1", 2000)], "/r")  # type: ignore[list-item]
    assert network is not None and network.order is None and network.exposed == (2000, 2001)
    assert network.warning is not None
    assert "ports 2000, 2001 are open to other machines" in network.warning
    assert "no slirp4netns on PATH" in network.warning and "no nft" in network.warning
    assert "OPEN" in network.says


def test_an_address_no_private_network_has_goes_to_the_firewall(monkeypatch: pytest.MonkeyPatch) -> None:
    tried: list[str] = []
    monkeypatch.setattr(local_network, "make_private", lambda env: tried.append("private"))
    monkeypatch.setattr(local_network, "PortFirewall", Unavailable)
    network = open_local_network("private", [Task("10.1.2.3", 2000)], "/r")  # type: ignore[list-item]
    assert not tried and network is not None and network.warning is not None
    assert "not a loopback one" in network.warning


def test_the_firewall_is_closed_with_the_network(monkeypatch: pytest.MonkeyPatch) -> None:
    closed: list[int] = []

    class Rule:
        table = "tflaunch_1_2"

        def __init__(self, ports: list[int]) -> None:
            self.ports = ports

        def close(self) -> None:
            closed.extend(self.ports)

    monkeypatch.setattr(local_network, "make_private", _no_private)
    monkeypatch.setattr(local_network, "take_early", lambda: None)
    monkeypatch.setattr(local_network, "PortFirewall", Rule)
    network = open_local_network("private", [Task("localhost", 2000)], "/r")  # type: ignore[list-item]
    assert network is not None and network.warning is None and "tflaunch_1_2" in network.says
    network.close()
    network.close()
    assert closed == [2000]


@pytest.mark.parametrize(
    ("text", "resolvers"),
    [
        ("nameserver 127.0.0.53\noptions edns0\n", ["127.0.0.53"]),
        ("# comment\nnameserver ::1\nnameserver 127.0.0.53\nnameserver ::1\n", ["::1", "127.0.0.53"]),
        ("nameserver 10.255.255.53\nsearch example.org\n", []),
        ("nameserver fe80::1%eth0\n", []),
        ("nameserver\n", []),
    ],
)
def test_the_machines_resolvers_on_its_loopback_are_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, resolvers: list[str]
) -> None:
    resolv = tmp_path / "resolv.conf"
    resolv.write_text(text)
    monkeypatch.setattr(private_network, "_RESOLV_CONF", str(resolv))
    assert private_network.loopback_resolvers() == resolvers


def test_tasks_start_under_nsenter_given_the_namespaces_the_agent_holds() -> None:
    here = os.readlink("/proc/self/ns/net")
    order: Any = {"op": "network", "pid": os.getpid(), "namespaces": ["net"], "net": here, "nsenter": "/bin/nsenter"}
    try:
        assert netns.wrapped(["python", "-m", "worker"]) == ["python", "-m", "worker"]
        netns.enter({**order, "namespaces": ["user", "net"]})  # a user namespace: never entered by a thread
        started = netns.wrapped(["python", "-m", "worker"])
        assert started[0] == "/bin/nsenter" and started[-5:] == [
            "--preserve-credentials",
            "--",
            "python",
            "-m",
            "worker",
        ]
        held = dict(option[2:].split("=", 1) for option in started[1:3])
        assert list(held) == ["user", "net"] and os.readlink(held["net"]) == here  # the agent's own descriptors
        netns.enter({**order, "pid": 2**22 + 1})  # no such process: nothing can start, none outside
        assert "/nonexistent/" in " ".join(netns.wrapped(["x"]))
        netns.enter({**order, "net": "net:[1]"})  # the pid is another process's now: none outside either
        assert "/nonexistent/" in " ".join(netns.wrapped(["x"]))
    finally:
        netns.forget()


def test_a_program_that_cannot_run_is_refused_as_popen_would(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path)}
    assert spawn._exec_error("absent", env, str(tmp_path)).errno == errno.ENOENT
    (tmp_path / "plain").write_text("echo hi\n")
    assert spawn._exec_error("plain", env, str(tmp_path)).errno == errno.EACCES
    os.chmod(tmp_path / "plain", 0o755)
    assert spawn._exec_error("plain", env, str(tmp_path)).errno == errno.ENOEXEC
    assert spawn._exec_error("./absent", env, str(tmp_path)).errno == errno.ENOENT


@pytest.mark.parametrize(
    ("address", "loopback"),
    [
        ("localhost", True),
        ("a.localhost", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("10.0.0.5", False),
        ("n1", False),
    ],
)
def test_a_private_network_has_every_loopback_address(nothing_works: None, address: str, loopback: bool) -> None:
    network = open_local_network("private", [Task(address, 2000)], "/r")  # type: ignore[list-item]
    assert network is not None and network.warning is not None  # nothing works here (the fixture)
    assert ("not a loopback one" not in network.warning) is loopback


def test_slirp4netns_failure_is_its_error_with_the_fix_not_a_warning_after_it() -> None:
    said = 'open("/dev/net/tun"): Permission denied\nchild failed(1)\nWARNING: Support for seccomp is experimental\n'
    failure = private_network._slirp_failure(said)
    assert 'open("/dev/net/tun"): Permission denied' in str(failure) and "WARNING" not in str(failure)
    assert failure.fix is not None and "chmod 0666 /dev/net/tun" in failure.fix
    assert str(private_network._slirp_failure("")).endswith("(it said nothing)")


def test_the_warning_does_not_tell_to_install_what_is_installed(
    nothing_works: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def tun_refused(env: dict[str, str]) -> Any:
        raise NetworkUnavailable("slirp4netns could not give the private network a way out (...)")

    monkeypatch.setattr(local_network, "make_private", tun_refused)
    network = open_local_network("private", [Task("localhost", 2000)], "/r")  # type: ignore[list-item]
    assert network is not None and network.warning is not None
    assert "install slirp4netns" not in network.warning and "could not give" in network.warning


def test_the_firewall_says_why_there_is_no_private_network(monkeypatch: pytest.MonkeyPatch) -> None:
    class Rule:
        table = "tflaunch_1_2"

        def __init__(self, ports: list[int]) -> None:
            pass

        def close(self) -> None:
            pass

    monkeypatch.setattr(local_network, "make_private", _no_private)
    monkeypatch.setattr(local_network, "take_early", lambda: None)
    monkeypatch.setattr(local_network, "PortFirewall", Rule)
    network = open_local_network("private", [Task("localhost", 2000)], "/r")  # type: ignore[list-item]
    assert network is not None
    assert network.says.startswith("the tasks' port 2000 is closed") and "no slirp4netns on PATH" in network.says


def test_a_network_that_could_not_be_made_early_is_not_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    tried: list[str] = []

    def early() -> Any:
        raise NetworkUnavailable("slirp4netns said nothing in 10 s")

    monkeypatch.setattr(local_network, "take_early", early)
    monkeypatch.setattr(local_network, "make_private", lambda env: tried.append("again"))
    monkeypatch.setattr(local_network, "PortFirewall", Unavailable)
    network = open_local_network("private", [Task("localhost", 2000)], "/r")  # type: ignore[list-item]
    assert not tried and network is not None and network.warning is not None and "said nothing" in network.warning
