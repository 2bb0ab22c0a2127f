"""The coordination leader leaves last; TensorFlow's lines about a leader already gone stay off the console once
a task finished, and come back if the run fails after all."""

from __future__ import annotations

import io
import json
import socket
import threading
import time

import pytest

from launcher.common.benign_lines import is_shutdown_noise
from launcher.console import Console
from tests.unit.test_console import PLAN
from tflaunch.leaving import leave_after_peers

# worker:1's lines when worker:0 (the leader) had left before its heartbeat (recorded from TensorFlow 2.21)
NOISE = [
    "E0000 00:00:1795934664.374013    2769 base_collective_executor.cc:252] BaseCollectiveExecutor::StartAbort "
    "UNAVAILABLE: Failed to send RPC to coordination service. Either the leader task was preempted/died/restarted "
    "unexpectedly or this task is experiencing network issues.",
    "Additional GRPC error information from remote target /job:worker/replica:0/task:0 while calling "
    "/tensorflow.CoordinationService/Heartbeat:",
    ':UNKNOWN:Error received from peer  {grpc_message:"failed to connect to all addresses; last error: UNKNOWN: '
    'ipv4:127.0.0.1:44815: Failed to connect to remote host: Connection refused", grpc_status:14}',
]


def test_the_shutdown_lines_are_known_and_their_detail_only_after_them() -> None:
    assert is_shutdown_noise(NOISE[0])
    assert is_shutdown_noise(NOISE[1], continuing=True) and is_shutdown_noise(NOISE[2], continuing=True)
    assert not is_shutdown_noise(NOISE[2]) and not is_shutdown_noise("loss 0.3 grpc_status:14 in my own words")
    assert not is_shutdown_noise("E0000 00:00:1.0  1 some_other.cc:1] StartAbort UNAVAILABLE: x")


def finished_console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    console = Console(live=False, out=out, err=io.StringIO())
    worker0, worker1 = PLAN.tasks
    console.output(worker1, "loss 0.25")
    for line in NOISE:
        console.output(worker1, line)  # before any task finished: a real failure's words, shown
    console.report(worker0, {"event": "done", "step": 60})
    for line in [*NOISE, "leaving"]:
        console.output(worker1, line)
    return console, out


def test_after_a_task_finished_they_are_held_and_dropped_when_the_run_succeeds() -> None:
    console, out = finished_console()
    console.close(succeeded=True)
    lines = out.getvalue().splitlines()
    assert lines == ["[worker:1] loss 0.25", *(f"[worker:1] {line}" for line in NOISE), "[worker:1] leaving"]


def test_they_are_shown_at_the_end_when_the_run_did_not_succeed() -> None:
    console, out = finished_console()
    console.close(succeeded=False)
    assert out.getvalue().count("StartAbort") == 2 and out.getvalue().endswith(f"[worker:1] {NOISE[2]}\n")


def listener() -> socket.socket:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    return server


def tf_config(monkeypatch: pytest.MonkeyPatch, addresses: list[str], index: int) -> None:
    config = {"cluster": {"worker": addresses}, "task": {"type": "worker", "index": index}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(config))


def test_the_leader_waits_until_every_peer_left(monkeypatch: pytest.MonkeyPatch) -> None:
    peers = [listener(), listener()]
    addresses = ["127.0.0.1:1", *(f"127.0.0.1:{p.getsockname()[1]}" for p in peers)]
    tf_config(monkeypatch, addresses, 0)
    closer = threading.Timer(0.3, lambda: [p.close() for p in peers])
    closer.start()
    started = time.monotonic()
    waited = leave_after_peers()
    closer.join()
    assert 0.3 <= waited <= time.monotonic() - started < 5


def test_only_the_leader_waits_and_never_past_its_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    peer = listener()
    try:
        tf_config(monkeypatch, ["127.0.0.1:1", f"127.0.0.1:{peer.getsockname()[1]}"], 1)
        assert leave_after_peers() == 0.0  # worker:1 is not the leader
        tf_config(monkeypatch, [f"127.0.0.1:{peer.getsockname()[1]}", "127.0.0.1:1"], 0)
        assert leave_after_peers() < 0.1  # its one peer refuses: gone already
        tf_config(monkeypatch, ["127.0.0.1:1", f"127.0.0.1:{peer.getsockname()[1]}"], 0)
        assert 0.2 <= leave_after_peers(limit_s=0.2) < 1.5  # a peer that stays is not waited for past the limit
    finally:
        peer.close()
    monkeypatch.delenv("TF_CONFIG")
    assert leave_after_peers() == 0.0
