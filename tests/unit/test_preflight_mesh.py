"""The preflight's reachability check stays a full mesh for small gangs and grows as N log N past them, while
every host is still checked from about log2(N) others and every host checks the first one; every host's
probe is sent before any answer is waited for."""

from __future__ import annotations

import math
from typing import Any

from launcher.preflight import check
from launcher.preflight.mesh import FULL_MESH, checked_from, peers_to_check


def test_small_gangs_check_the_full_mesh() -> None:
    for count in range(1, FULL_MESH + 1):
        for index in range(count):
            assert peers_to_check(count, index) == [other for other in range(count) if other != index]


def test_fleets_check_n_log_n_pairs_and_every_host_from_log_n_others() -> None:
    for count in (FULL_MESH + 1, 100, 256, 1024, 4096):
        bound = math.ceil(math.log2(count)) + 1
        total = 0
        for index in range(count):
            peers = peers_to_check(count, index)
            assert index not in peers and all(0 <= p < count for p in peers)
            assert index == 0 or 0 in peers, "every host reaches the coordination service's host"
            assert len(peers) <= bound
            total += len(peers)
        assert total <= count * bound < count * (count - 1)
        assert min(checked_from(count).values()) >= math.floor(math.log2(count)) - 1


class _Agent:
    def __init__(self, index: int, log: list[tuple[str, int]]) -> None:
        self.index, self.log = index, log

    def ask(self, request: dict[str, Any]) -> Any:
        self.log.append(("ask", self.index))

        def answer(timeout: float) -> dict[str, Any]:
            self.log.append(("wait", self.index))
            return {"results": {}, "timeout": timeout}

        return answer


def test_every_probe_is_sent_before_any_answer_is_awaited() -> None:
    log: list[tuple[str, int]] = []
    hosts = [check._Host(i, f"h{i}", False, "python3", "/", []) for i in range(40)]
    for host in hosts:
        host.session = _Agent(host.index, log)  # type: ignore[assignment]
    answers = check._asked(hosts, lambda h: {"op": "release"})
    assert [kind for kind, _ in log] == ["ask"] * 40 + ["wait"] * 40
    assert all(isinstance(answer, dict) and answer["timeout"] <= check.PROBE_TIMEOUT_S for _, answer in answers)


class _FullDisk:
    def probe(self, request: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
        if request["op"] == "write_marker":
            raise RuntimeError("OSError: [Errno 28] No space left on device")
        return {}


def test_a_checkpoint_dir_that_cannot_be_written_is_a_problem_not_a_traceback() -> None:
    from types import SimpleNamespace

    hosts = [check._Host(i, f"10.0.0.{i + 1}", False, "python3", "/", []) for i in range(2)]
    for host in hosts:
        host.session = _FullDisk()  # type: ignore[assignment]
    report = check.PreflightReport()
    check._check_shared_checkpoints(hosts, SimpleNamespace(checkpoint_dir="/ckpt"), report)  # type: ignore[arg-type]
    assert report.problems == [
        "10.0.0.1: cannot write in checkpoint_dir /ckpt (OSError: [Errno 28] No space left on device); checkpoints "
        "are written there: free space, or choose another checkpoint_dir"
    ]


class _Silent:
    def ask(self, request: dict[str, Any]) -> Any:
        from launcher.transport.session import NoAnswer

        def answer(timeout: float) -> dict[str, Any]:
            raise NoAnswer(request["op"], timeout)

        return answer


def test_a_host_that_does_not_answer_is_said_to_have_had_the_whole_round() -> None:
    hosts = [check._Host(i, f"h{i}", False, "python3", "/", []) for i in range(3)]
    for host in hosts:
        host.session = _Silent()  # type: ignore[assignment]
    said = [str(outcome) for _, outcome in check._asked(hosts, lambda h: {"op": "info"}, timeout=7.0)]  # type: ignore[arg-type, return-value]
    assert said == ["no answer to info within 7s"] * 3


def test_a_port_taken_by_another_host_of_the_same_machine_says_so() -> None:
    from types import SimpleNamespace

    def host(index: int, port: int) -> check._Host:
        task = SimpleNamespace(port=port, name=f"worker:{index}", host=f"127.0.0.{index + 2}")
        return check._Host(index, f"127.0.0.{index + 2}", False, "python3", "/", [task])  # type: ignore[list-item]

    hosts = [host(0, 23456), host(1, 23456), host(2, 23457)]
    assert check._port_fix(hosts, hosts[1], 23456) == (
        "free it or choose another port; 127.0.0.2 uses port 23456 too: hosts that are one machine need ports of "
        "their own"
    )
    assert check._port_fix(hosts, hosts[2], 23457) == "free it or choose another port"
