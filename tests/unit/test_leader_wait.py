"""A task waits for the coordination leader's port before building its strategy (a task that asks
first is refused and its channel backs off for about a second). Real sockets on loopback: a port
bound but not listening refuses, as a leader not up yet does."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator

import pytest

from tflaunch import leader
from tflaunch.leader import coordination_leader, split_address, wait_for_leader


@pytest.fixture()
def not_listening() -> Iterator[socket.socket]:
    """A loopback port that refuses connections until the test calls listen() on it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    yield sock
    sock.close()


def _address(sock: socket.socket) -> str:
    return f"127.0.0.1:{sock.getsockname()[1]}"


def test_a_worker_waits_until_the_leader_listens(not_listening: socket.socket) -> None:
    listening = threading.Event()

    def come_up() -> None:
        listening.set()
        not_listening.listen()

    cluster = {"worker": [_address(not_listening), "127.0.0.1:9"]}
    timer = threading.Timer(0.3, come_up)
    timer.start()
    try:
        waited = wait_for_leader(cluster, "worker", 1, limit_s=30)
    finally:
        timer.join()
    assert listening.is_set()  # it returned only once the leader's port was listening
    assert waited is not None and waited.listening and waited.seconds > 0


def test_the_leader_and_a_lone_process_do_not_wait(
    not_listening: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = {"worker": [_address(not_listening), "127.0.0.1:9"]}
    assert wait_for_leader(cluster, "worker", 0, limit_s=30) is None
    assert wait_for_leader({}, "worker", 0, limit_s=30) is None
    monkeypatch.delenv("TF_CONFIG", raising=False)
    assert wait_for_leader(limit_s=30) is None  # no launcher, no TF_CONFIG: a single local worker


def test_a_leader_that_never_comes_is_waited_for_only_up_to_the_limit_and_said(not_listening: socket.socket) -> None:
    waited = wait_for_leader({"worker": [_address(not_listening), "127.0.0.1:9"]}, "worker", 1, limit_s=0.2)
    assert waited is not None and not waited.listening and waited.seconds >= 0.2


def test_tf_config_is_read_when_nothing_is_given(not_listening: socket.socket, monkeypatch: pytest.MonkeyPatch) -> None:
    not_listening.listen()
    config = {"cluster": {"worker": [_address(not_listening), "127.0.0.1:9"]}, "task": {"type": "worker", "index": 1}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(config))
    waited = wait_for_leader(limit_s=30)
    assert waited is not None and waited.listening


def test_the_leader_is_the_one_tensorflow_picks() -> None:
    assert coordination_leader({"worker": ["a:1", "b:2"]}) == ("worker", 0)
    assert coordination_leader({"chief": ["c:1"], "worker": ["a:1"]}) == ("chief", 0)
    assert coordination_leader({"ps": ["p:1"], "chief": ["c:1"], "worker": ["a:1"]}) == ("ps", 0)
    assert coordination_leader({}) is None


def test_worker_zero_waits_for_the_chief(not_listening: socket.socket) -> None:
    not_listening.listen()
    cluster = {"chief": [_address(not_listening)], "worker": ["127.0.0.1:9"]}
    waited = wait_for_leader(cluster, "worker", 0, limit_s=30)
    assert waited is not None and waited.listening  # the chief leads: worker 0 is not the leader here
    assert wait_for_leader(cluster, "chief", 0, limit_s=30) is None


def test_names_and_ipv6_addresses_are_understood(not_listening: socket.socket) -> None:
    not_listening.listen()
    port = not_listening.getsockname()[1]
    assert split_address("[::1]:2222") == ("::1", 2222)
    assert split_address("host.example:2222") == ("host.example", 2222)
    waited = wait_for_leader({"worker": [f"localhost:{port}", "localhost:9"]}, "worker", 1, limit_s=30)
    assert waited is not None and waited.listening  # `localhost` looked up, its IPv4 address accepted


def test_a_name_not_resolved_yet_is_asked_less_and_less_often(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pod's name resolves only once the pod has an address: a gang must not flood its DNS meanwhile."""
    lookups = []

    def unresolved(*args: object, **kwargs: object) -> list[object]:
        lookups.append(args[0])
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(leader.socket, "getaddrinfo", unresolved)
    waited = wait_for_leader({"worker": ["leader-0.example:2222", "me:2222"]}, "worker", 1, limit_s=1.0)
    assert waited is not None and not waited.listening
    assert 3 <= len(lookups) <= 6, lookups  # 0, 0.1, 0.3, 0.7 s: not one every 5 ms (200 in that second)


def test_what_is_not_a_host_name_is_left_to_the_strategy() -> None:
    assert wait_for_leader({"worker": ["a..b:2222", "me:2222"]}, "worker", 1, limit_s=30) is None
    assert wait_for_leader({"worker": [f"{'x' * 64}.example:2222", "me:1"]}, "worker", 1, limit_s=30) is None
    assert wait_for_leader({"worker": ["no-port", "me:1"]}, "worker", 1, limit_s=30) is None
