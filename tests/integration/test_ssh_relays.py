"""SSH relays against a real OpenSSH sshd (stock settings) on loopback aliases: hosts spread over relay
processes, each channel carried in order both ways, a reader that falls behind holds up only its own
channel, a relay that dies ends only its own channels (the next open starts another), and closing leaves
no relay and no remote command behind."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest

from launcher.common.errors import HostError
from launcher.transport import relays as relays_module
from launcher.transport.channel import Channel
from launcher.transport.relay_inbox import HIGH
from launcher.transport.relays import Relays, relay_count
from launcher.transport.ssh_client import SshHost, SshSettings
from tests.labs.sshd import ADDRESSES, SshServer
from tests.labs.waiting import wait_for

BIG = 24 << 20


def target(sshd: SshServer, address: str) -> SshHost:
    return SshHost(address, SshSettings(**sshd.ssh_settings()))  # type: ignore[arg-type]


def relay_processes() -> list[psutil.Process]:
    return [p for p in psutil.Process().children() if "ssh_relay" in " ".join(p.cmdline())]


def opened(channel: Channel | HostError) -> Channel:
    assert isinstance(channel, Channel), channel
    return channel


def echoes(channel: Channel, text: bytes) -> bool:
    channel.write(text + b"\n")
    return bool(channel.reader.readline() == text + b"\n")


def test_relay_counts_follow_hosts_and_cores() -> None:
    assert [relay_count(n, 1) for n in (1, 64, 65, 1024)] == [1, 1, 1, 1]
    assert [relay_count(n, 2) for n in (1, 64, 65, 256, 1024)] == [1, 1, 1, 1, 1], "the launcher keeps a core"
    assert [relay_count(n, 16) for n in (64, 65, 256, 1024, 4096)] == [1, 2, 4, 15, 15]


def test_hosts_spread_over_relays_and_a_dead_relay_ends_only_its_own(
    sshd: SshServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(relays_module, "RELAY_HOSTS", 2)
    relays = Relays(len(ADDRESSES), cores=3)
    try:
        targets = {i: (target(sshd, address), "cat") for i, address in enumerate(ADDRESSES)}
        channels = {i: opened(c) for i, c in relays.open(targets, b"first\n").items()}
        assert len(relay_processes()) == 2
        for index, channel in channels.items():
            assert channel.reader.readline() == b"first\n"
            assert echoes(channel, f"host {index}".encode())
        dead = relays._relays[0]
        os.kill(dead._proc.pid, signal.SIGKILL)
        for index in (0, 2):  # served by the relay killed
            assert channels[index].reader.readline() == b""
            assert channels[index].ended() == "the SSH relay process ended (exit code -9)"
            with pytest.raises(OSError):
                channels[index].write(b"more\n")
        assert echoes(channels[1], b"still here"), "the other relay's channel goes on"
        again = opened(relays.open({0: targets[0]}, b"again\n")[0])
        assert again.reader.readline() == b"again\n"
        assert len(relay_processes()) == 2
    finally:
        relays.close()
    assert relay_processes() == []
    wait_for(lambda: not sshd.sessions(), 10, "every remote command to end with its connection")


def test_a_reader_behind_holds_up_only_its_own_channel(sshd: SshServer) -> None:
    relays = Relays(2, cores=1)
    flood = f"python3 -c \"import sys; sys.stdout.buffer.write(b'z' * {BIG} + b'\\n')\""
    try:
        both = relays.open({0: (target(sshd, ADDRESSES[0]), flood), 1: (target(sshd, ADDRESSES[1]), "cat")}, b"\n")
        slow, quick = opened(both[0]), opened(both[1])
        assert quick.reader.readline() == b"\n"
        inbox = slow.reader
        wait_for(lambda: inbox._paused, 30, "the flooding channel to be paused")
        started = time.monotonic()
        for number in range(20):
            assert echoes(quick, f"line {number}".encode())
        assert time.monotonic() - started < 5
        assert inbox._held() < HIGH + (4 << 20), "a paused channel stops being read"
        got = bytearray()
        reader = threading.Thread(target=lambda: got.extend(slow.reader.readline(BIG + 1)))
        reader.start()
        reader.join(60)
        assert bytes(got) == b"z" * BIG + b"\n"
    finally:
        relays.close()
    assert relay_processes() == []
    wait_for(lambda: not sshd.sessions(), 10, "every remote command to end with its connection")


def test_a_relay_of_idle_channels_uses_no_cpu(sshd: SshServer) -> None:
    relays = Relays(len(ADDRESSES), cores=1)
    try:
        channels = relays.open({i: (target(sshd, a), "cat") for i, a in enumerate(ADDRESSES)}, b"\n")
        for channel in channels.values():
            assert opened(channel).reader.readline() == b"\n"
        (relay,) = relay_processes()
        before = sum(relay.cpu_times()[:2])
        time.sleep(2)
        assert sum(relay.cpu_times()[:2]) - before < 0.1, "an idle relay spins"
    finally:
        relays.close()
    assert relay_processes() == []


def test_a_module_in_the_working_directory_is_never_imported_by_a_relay(
    sshd: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relay is a python started in the launch's working directory: a `random.py` there (which printed onto
    the frames' pipe and ran the user's code in the launcher's relay) must not be imported."""
    (tmp_path / "random.py").write_text(f"print('shadowed'); open({str(tmp_path / 'ran')!r}, 'w').close()\n")
    monkeypatch.chdir(tmp_path)
    relays = Relays(1, cores=1)
    try:
        channel = opened(relays.open({0: (target(sshd, ADDRESSES[0]), "cat")}, b"first\n")[0])
        assert channel.reader.readline() == b"first\n"
        assert echoes(channel, b"still framed")
    finally:
        relays.close()
    assert not (tmp_path / "ran").exists()


def test_a_relay_that_sends_what_is_not_a_frame_is_stopped_and_its_channels_say_why() -> None:
    import io

    from launcher.transport import relay_frames as rf

    garbage = io.BytesIO(b"my random helpers\n")
    assert rf.read_frame(garbage, rf.RELAY_KINDS, rf.MAX_RELAY_PAYLOAD) == "sent what is not a frame (b'my random')"
    huge = io.BytesIO(rf._HEADER.pack(rf.OUTPUT, 1, 1 << 30))
    assert (
        rf.read_frame(huge, rf.RELAY_KINDS, rf.MAX_RELAY_PAYLOAD)
        == "sent a frame of 1073741824 bytes (at most 1048576)"
    )


def test_a_stopped_relay_fails_its_opens_by_the_deadline_and_is_replaced(
    sshd: SshServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(relays_module, "OPEN_TIMEOUT_S", 2.0)
    relays = Relays(len(ADDRESSES), cores=1)
    try:
        first = opened(relays.open({0: (target(sshd, ADDRESSES[0]), "cat")}, b"\n")[0])
        assert first.reader.readline() == b"\n"
        (stopped,) = relay_processes()
        os.kill(stopped.pid, signal.SIGSTOP)
        started = time.monotonic()
        failed = relays.open({i: (target(sshd, a), "cat") for i, a in enumerate(ADDRESSES[1:], 1)}, b"\n")
        assert time.monotonic() - started < 10, "one deadline for every host, not one each"
        for outcome in failed.values():
            assert isinstance(outcome, HostError) and "did not answer within 2s" in outcome.cause, outcome
        assert first.reader.readline() == b"", "the stopped relay's channels end with it"
        again = opened(relays.open({1: (target(sshd, ADDRESSES[1]), "cat")}, b"back\n")[1])
        assert again.reader.readline() == b"back\n"
    finally:
        relays.close()
    assert relay_processes() == []
