"""An SSH relay: a process of the launcher's that owns the SSH connections of a share of the hosts.

It reads the SSH config and the known_hosts files (once each, then again only when they change),
checks every host key, and connects.

One paramiko handshake costs ~7-9 ms of CPU and every Python thread shares one interpreter lock, so
a thousand hosts handshaken in the launcher's own process would take seconds one after another,
whatever the cores. Relays (launcher/transport/relays.py starts them) spread the handshakes, and
later the ciphering of every host's traffic, over processes: each connects its hosts, a window of
them at once, opens the agent's session on each and carries its bytes over one pipe pair to the
launcher (launcher/transport/relay_frames.py).

One thread reads every channel (launcher/transport/relay_pump.py), leaving out a channel while the
launcher holds enough of its output; per channel, a writer thread sends what the launcher wrote, in
order, so a host whose network is gone holds up only its own channel. The relay ignores the
terminal's and a job's signals (the launcher decides how its hosts stop, through it) and ends at the
end of its standard input, closing every connection, which makes every agent stop its tasks.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import queue
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from launcher.common.errors import HostError
from launcher.transport import relay_frames as rf
from launcher.transport.malloc_arenas import limit_malloc_arenas
from launcher.transport.relay_pump import Pump
from launcher.transport.ssh_client import SshHost, SshTarget, connect, resolve_target

_SESSION_TIMEOUT_S = 10.0
_STATUS_WAIT_S = 1.0  # after the end of a channel's output, how long its exit status may take to come
_CLOSE_WAIT_S = 5.0  # at the end, how long closing every connection may take
# paramiko's transport thread wakes every 0.1 s (its socket timeout) to see whether it was closed: 2,560
# wakeups a second, each for the interpreter lock, at 256 hosts. Once connected, every second is enough:
# keepalives (every 5 s) and rekeying are checked at the same wakeups, and closing it is not waited for.
_IDLE_CHECK_S = 1.0


def _channel_errors() -> tuple[type[BaseException], ...]:
    import paramiko

    return (paramiko.SSHException, OSError, EOFError)


@dataclass
class _Channel:
    """One agent's session, and what to write to it."""

    session: Any
    writes: queue.SimpleQueue[bytes | None] = field(default_factory=queue.SimpleQueue)
    closing: bool = False  # the launcher closed it (not its far side)


class Relay:
    """Obeys the launcher's frames (`obey`), one at a time from its standard input; never blocks on a host."""

    def __init__(self, out: rf.FrameWriter, window: int) -> None:
        self._out = out
        self._lock = threading.Lock()
        self._clients: dict[int, Any] = {}  # host index -> its connection, reused by the next open
        self._connecting: dict[int, threading.Lock] = {}
        self._channels: dict[int, _Channel] = {}
        self._handshakes = ThreadPoolExecutor(max_workers=window, thread_name_prefix="handshake")
        self._pump = Pump(lambda ident, data: self._send(rf.OUTPUT, ident, data), self._ended)

    def obey(self, kind: bytes, number: int, payload: bytes) -> None:
        if kind == rf.OPEN:
            index, host, command, first_line = pickle.loads(payload)
            self._handshakes.submit(self._open, number, index, host, command, first_line)
            return
        if kind == rf.LOST:
            with self._lock:
                client = self._clients.pop(number, None)
            if client is not None:  # closing a connection to a host that is gone may block
                threading.Thread(target=client.close, daemon=True).start()
            return
        with self._lock:
            channel = self._channels.get(number)
        if channel is None:  # it ended meanwhile
            return
        if kind == rf.DATA:
            channel.writes.put(payload)
        elif kind == rf.CLOSE:
            channel.closing = True
            channel.writes.put(None)
        elif kind == rf.PAUSE:
            self._pump.pause(number)
        elif kind == rf.RESUME:
            self._pump.resume(number)

    # ---- opening -----------------------------------------------------------------------------

    def _client(self, index: int, target: SshTarget) -> Any:
        with self._lock:
            gate = self._connecting.setdefault(index, threading.Lock())
        with gate:
            with self._lock:
                client = self._clients.get(index)
            transport = client.get_transport() if client is not None else None
            if transport is None or not transport.is_active():
                client = connect(target)
                client.get_transport().sock.settimeout(_IDLE_CHECK_S)
                with self._lock:
                    self._clients[index] = client
            return client

    def _open(self, ident: int, index: int, host: SshHost, command: str, first_line: bytes) -> None:
        try:
            session = self._session(index, resolve_target(host), command)
        except HostError as error:
            self._send(rf.FAILED, ident, json.dumps([error.host, error.cause]).encode())
            return
        except Exception as error:  # noqa: BLE001 - a bug here must fail this host, not the relay
            cause = f"SSH relay: {type(error).__name__}: {error}"
            self._send(rf.FAILED, ident, json.dumps([host.address, cause]).encode())
            return
        try:
            session.sendall(memoryview(first_line))  # sendall slices what is left: a view is not copied
        except _channel_errors():  # the command ended at once (a python that is not there): its output says why
            pass
        channel = _Channel(session)
        session.fileno()  # made here, once: the pump watches it
        with self._lock:
            self._channels[ident] = channel
        threading.Thread(target=self._write, args=(ident, channel), daemon=True, name=f"to-{ident}").start()
        self._pump.add(ident, session)
        self._send(rf.OPENED, ident)

    def _session(self, index: int, target: SshTarget, command: str) -> Any:
        client = self._client(index, target)
        try:
            session = client.get_transport().open_session(timeout=_SESSION_TIMEOUT_S)
            session.set_combine_stderr(True)
            session.exec_command(command)
        except _channel_errors() as error:
            raise HostError(target.address, f"cannot open an SSH session ({error or type(error).__name__})") from None
        return session

    # ---- a channel's two directions ----------------------------------------------------------

    def _write(self, ident: int, channel: _Channel) -> None:
        while (data := channel.writes.get()) is not None:
            try:
                channel.session.sendall(data)
            except _channel_errors():  # the session is gone: the pump hears its end
                break
        self._pump.drop(ident)  # closed by the launcher, or ended: the pump lets go of it, then `_ended`

    def _ended(self, ident: int) -> None:
        """The pump let go of the channel: it ended, or the launcher closed it (on the pump's thread)."""
        threading.Thread(target=self._finish, args=(ident,), daemon=True, name=f"end-{ident}").start()

    def _finish(self, ident: int) -> None:
        with self._lock:
            channel = self._channels.pop(ident, None)
        if channel is None:
            return
        session = channel.session
        channel.writes.put(None)
        if channel.closing:  # the agent reads the end of its input now; its status is not waited for
            self._close(session)
            self._send(rf.ENDED, ident)
            return
        session.status_event.wait(_STATUS_WAIT_S)
        reason = ""
        if session.exit_status_ready():
            status = session.recv_exit_status()
            reason = "the SSH session closed" if status < 0 else f"the agent exited with code {status}"
        self._close(session)
        self._send(rf.ENDED, ident, reason.encode())

    @staticmethod
    def _close(session: Any) -> None:
        try:
            session.close()
        except _channel_errors():  # a dead connection: closed as far as we are concerned
            pass

    def _send(self, kind: bytes, number: int, payload: bytes = b"") -> None:
        try:
            self._out.send(kind, number, payload)
        except (OSError, ValueError):  # the launcher is gone: the end of the input ends this relay
            pass

    def close(self) -> None:
        """Close every connection (each agent then stops its tasks), a bounded wait for all. One thread
        closes them in turn: a close only marks the transport closed and closes its socket (a send stuck
        on a host that is gone gives up within 0.1 s), and a thread per connection cost 256 thread starts
        at a stop on the machine the hosts' exits were using."""
        with self._lock:
            clients = list(self._clients.values())
            self._clients.clear()
        closer = threading.Thread(target=_close_all, args=(clients,), daemon=True, name="close")
        closer.start()
        closer.join(_CLOSE_WAIT_S)


def _close_all(clients: list[Any]) -> None:
    for client in clients:
        try:
            client.close()
        except Exception:  # noqa: BLE001, S112 - the rest are closed all the same; the relay's exit closes its socket
            continue


class _Forward(logging.Handler):
    """This relay's log records, as the launcher's own (it prints them as it prints its own)."""

    def __init__(self, out: rf.FrameWriter) -> None:
        super().__init__()
        self._out = out

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._out.send(rf.LOG, record.levelno, json.dumps([record.name, record.getMessage()]).encode())
        except (OSError, ValueError):  # the launcher is gone
            pass


def _frame_streams() -> tuple[Any, Any]:
    """The launcher's pipes, on descriptors of their own: standard input and output become /dev/null, so
    that nothing else in this process (a library's print, a prompt) reads or writes a frame's bytes."""
    frames_in, frames_out = os.fdopen(os.dup(0), "rb"), os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    return frames_in, frames_out


def main(window: int, root_level: int, paramiko_level: int) -> None:
    """Serve the launcher on standard input and output until the input ends."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    limit_malloc_arenas()  # before the transports' threads start
    stdin, stdout = _frame_streams()
    out = rf.FrameWriter(stdout)
    logging.getLogger().addHandler(_Forward(out))
    logging.getLogger().setLevel(root_level)
    logging.getLogger("paramiko").setLevel(paramiko_level)
    relay = Relay(out, window)
    _channel_errors()  # paramiko's import (a tenth of a second), now: the launcher is still planning meanwhile
    try:
        while isinstance(frame := rf.read_frame(stdin, rf.LAUNCHER_KINDS), tuple):  # an end, or not a frame: done
            relay.obey(*frame)
    finally:
        relay.close()
        os._exit(0)  # the threads still blocked on dead hosts are not waited for
