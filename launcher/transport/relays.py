"""The launcher's SSH relays (launcher/transport/ssh_relay.py): processes that handshake and carry the
SSH connections of a share of the hosts each, so a fleet's handshakes and ciphering use the cores.

A relay serves at most RELAY_HOSTS hosts while there is a core for another: the launcher keeps one
core for itself, the relays share the others (up to 64 hosts, and on 2 cores, one relay; 256 hosts
on 8 cores, four). WINDOW handshakes are under way at once in all (pdsh's default fan-out), split
among the relays. A relay costs about 34 MiB (an interpreter with paramiko) and 0.13 MiB a host.
Each relay is a child of the launcher that ends when the launcher closes its input, or dies: then
it takes its hosts' channels with it and their sessions see why; the next open starts another.
"""

from __future__ import annotations

import json
import logging
import math
import os
import pickle
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from launcher.common.errors import HostError
from launcher.transport import relay_frames as rf
from launcher.transport.channel import Channel, end_by_input
from launcher.transport.relay_inbox import Inbox
from launcher.transport.ssh_client import SshHost

log = logging.getLogger(__name__)

WINDOW = 64  # handshakes under way at once, in all relays
RELAY_HOSTS = 64  # hosts a relay serves, at most, while there are cores for another
# A bound on waiting for the relays' answers to one open of many hosts, in all: each step of a handshake has
# its own timeout (ssh.connect_timeout_s), and a window of them runs at once. A relay that does not answer
# within it (stopped, wedged) is killed, and the next open starts another.
OPEN_TIMEOUT_S = 120.0
_STOP_WAIT_S = 5.0
_SOURCE_ROOT = str(Path(__file__).resolve().parents[2])  # where this `launcher` package is imported from


def relay_count(hosts: int, cores: int) -> int:
    """How many relays `hosts` SSH hosts get on `cores` cores (one of them the launcher's own)."""
    return max(1, min(cores - 1, math.ceil(hosts / RELAY_HOSTS)))


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


@dataclass
class Opening:
    """An open under way: `done` once the relay answered (`failed`, or the channel is up)."""

    ident: int
    address: str
    inbox: Inbox
    done: threading.Event
    failed: HostError | None = None


class RelayProcess:
    """One relay and the thread that hands what it sends to each channel's inbox."""

    def __init__(self, window: int) -> None:
        root = logging.getLogger()
        levels = (root.getEffectiveLevel(), logging.getLogger("paramiko").getEffectiveLevel())
        code = (
            f"import sys; sys.path.insert(0, {_SOURCE_ROOT!r}); from launcher.transport.ssh_relay import main; "
            f"main({window}, {levels[0]}, {levels[1]})"
        )
        self._proc = subprocess.Popen(  # -P: never a module of the working directory's (a random.py there)
            [sys.executable, "-P", "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._out = rf.FrameWriter(self._proc.stdin)  # type: ignore[arg-type]
        self._lock = threading.Lock()
        self._inboxes: dict[int, Inbox] = {}
        self._openings: dict[int, Opening] = {}
        self.dead = threading.Event()
        self._demux = threading.Thread(target=self._read, daemon=True, name=f"relay-{self._proc.pid}")
        self._demux.start()

    def begin(self, ident: int, index: int, host: SshHost, command: str, first_line: bytes) -> Opening:
        """Ask for the agent's channel on host `index` (connected, `command` started, `first_line` sent)."""
        inbox = Inbox(lambda: self._tell(rf.PAUSE, ident), lambda: self._tell(rf.RESUME, ident))
        opening = Opening(ident, host.address, inbox, threading.Event())
        with self._lock:
            self._inboxes[ident] = inbox
            self._openings[ident] = opening
        if not self._try(rf.OPEN, ident, pickle.dumps((index, host, command, first_line))):
            opening.failed = HostError(host.address, "the SSH relay process is gone")
            opening.done.set()
        return opening

    def finish(self, opening: Opening, deadline: float) -> Channel | HostError:
        """The channel `begin` asked for, once the relay answered (by `deadline`, monotonic); or why there is none."""
        if not opening.done.wait(max(0.0, deadline - time.monotonic())):
            opening.failed = HostError(
                opening.address,
                f"the SSH relay (pid {self._proc.pid}) did not answer within {OPEN_TIMEOUT_S:g}s: it is stopped, "
                "and the next try starts another",
            )
            self._proc.kill()  # its reader then ends every channel it carried
        ident, inbox = opening.ident, opening.inbox
        with self._lock:
            self._openings.pop(ident, None)
            if opening.failed is not None:
                self._inboxes.pop(ident, None)
        if opening.failed is not None:
            return opening.failed

        def write(data: bytes) -> None:
            if inbox.ended:
                raise OSError("the SSH channel closed")
            self._out.send(rf.DATA, ident, data)

        return Channel(write, inbox, lambda: self._tell(rf.CLOSE, ident), lambda: inbox.reason if inbox.ended else None)

    def lost(self, index: int) -> None:
        self._tell(rf.LOST, index)

    def _tell(self, kind: bytes, number: int) -> None:
        self._try(kind, number)

    def _try(self, kind: bytes, number: int, payload: bytes = b"") -> bool:
        try:
            self._out.send(kind, number, payload)
            return True
        except (OSError, ValueError):  # the relay is gone: its reader ends every channel
            return False

    def _read(self) -> None:
        stream = self._proc.stdout
        assert stream is not None
        garbled = None
        while (frame := rf.read_frame(stream, rf.RELAY_KINDS, rf.MAX_RELAY_PAYLOAD)) is not None:  # type: ignore[arg-type]
            if isinstance(frame, str):
                garbled = frame
                log.error("the SSH relay (pid %s) %s: stopped, its hosts' channels end", self._proc.pid, frame)
                self._proc.kill()
                break
            self._route(*frame)
        code = self._proc.wait()
        self.dead.set()
        why = f"the SSH relay process ended (exit code {code})" if code else "the SSH relay process ended"
        why = f"the SSH relay {garbled}" if garbled else why
        with self._lock:
            inboxes, self._inboxes = list(self._inboxes.values()), {}
            openings = list(self._openings.values())
        for opening in openings:
            opening.failed = opening.failed or HostError(opening.address, why)
            opening.done.set()
        for inbox in inboxes:
            inbox.end(why)

    def _route(self, kind: bytes, number: int, payload: bytes) -> None:
        if kind == rf.LOG:
            name, message = json.loads(payload)
            logging.getLogger(str(name)).log(number, "%s", message)
            return
        with self._lock:
            inbox = self._inboxes.get(number)
            opening = self._openings.get(number)
            if kind == rf.ENDED:
                self._inboxes.pop(number, None)
        if kind == rf.OUTPUT and inbox is not None:
            inbox.feed(payload)
        elif kind == rf.ENDED and inbox is not None:
            inbox.end(payload.decode("utf-8", "replace") or None)
        elif kind in (rf.OPENED, rf.FAILED) and opening is not None:
            if kind == rf.FAILED:
                host, cause = json.loads(payload)
                opening.failed = HostError(str(host), str(cause))
            opening.done.set()

    def stop(self) -> None:
        """Close its input (it closes every connection and exits); kill it if that takes too long."""
        end_by_input(self._proc, _STOP_WAIT_S)
        self._demux.join(_STOP_WAIT_S)


class Relays:
    """The relays of a launch's SSH hosts; host `index` is always served by the same relay while it lives."""

    def __init__(self, hosts: int, cores: int | None = None) -> None:
        self._count = relay_count(hosts, cores or usable_cores())
        self._window = max(1, WINDOW // self._count)
        self._lock = threading.Lock()
        self._relays: dict[int, RelayProcess] = {}
        self._ids = 0

    def _relay(self, index: int) -> RelayProcess:
        slot = index % self._count
        with self._lock:
            relay = self._relays.get(slot)
            if relay is None or relay.dead.is_set():
                relay = self._relays[slot] = RelayProcess(self._window)
            return relay

    def start(self, indices: list[int]) -> None:
        """Start the relays these hosts need now, so their start-up overlaps what the launcher does meanwhile."""
        for index in indices:
            self._relay(index)

    def open(self, hosts: dict[int, tuple[SshHost, str]], first_line: bytes) -> dict[int, Channel | HostError]:
        """Every host's agent channel (`hosts`: index -> the host, and the command to run there), all asked for
        at once: the relays' windows bound how many handshakes run side by side."""
        begun = []
        deadline = time.monotonic() + OPEN_TIMEOUT_S
        for index, (host, command) in hosts.items():
            with self._lock:
                self._ids += 1
                ident = self._ids
            relay = self._relay(index)
            begun.append((index, relay, relay.begin(ident, index, host, command, first_line)))
        return {index: relay.finish(opening, deadline) for index, relay, opening in begun}

    def lost(self, index: int) -> None:
        with self._lock:
            relay = self._relays.get(index % self._count)
        if relay is not None:
            relay.lost(index)

    def close(self) -> None:
        with self._lock:
            relays, self._relays = list(self._relays.values()), {}
        stoppers = [threading.Thread(target=relay.stop, daemon=True) for relay in relays]
        for stopper in stoppers:
            stopper.start()
        for stopper in stoppers:
            stopper.join()
