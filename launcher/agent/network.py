"""The preflight's network probes on a host: bind the tasks' ports (and accept whatever connects, so a
mesh of any size never fills a backlog), connect to every peer's ports, and release what was bound.
Standard library only: part of the host agent (launcher/agent/probe.py dispatches to it).
"""

from __future__ import annotations

import errno
import os
import socket
from typing import Any

_listeners: list[socket.socket] = []
_wakes: list[int] = []  # write ends of the pipes that end each `bind`'s accepting thread


def _accept_all(selector: Any, wake: int) -> None:
    """Take every connection off the backlogs of one `bind`'s listeners, so a mesh of any size never
    fills them: one thread for all of them (a host of 250 tasks had started 250), until `release`
    writes to `wake`."""
    try:
        while True:
            for key, _ in selector.select():
                if key.fileobj == wake:
                    return
                try:
                    key.fileobj.accept()[0].close()
                except OSError:  # the peer gave up meanwhile, or the listener is being closed
                    continue
    finally:
        selector.close()
        os.close(wake)


def bind(ports: list[int]) -> dict[str, Any]:
    import selectors
    import threading

    results = {}
    listening = []
    for port in ports:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("", port))
            sock.listen(socket.SOMAXCONN)
            sock.setblocking(False)
            listening.append(sock)
            results[str(port)] = "ok"
        except OSError as error:
            sock.close()
            results[str(port)] = error.strerror or str(error)
    if listening:
        selector = selectors.DefaultSelector()
        wake_r, wake_w = os.pipe()
        selector.register(wake_r, selectors.EVENT_READ)
        for sock in listening:
            selector.register(sock, selectors.EVENT_READ)
        _listeners.extend(listening)
        _wakes.append(wake_w)
        threading.Thread(target=_accept_all, args=(selector, wake_r), daemon=True, name="accept").start()
    return {"results": results}


def connect(addresses: list[list[Any]], timeout: float) -> dict[str, Any]:
    """Every address at once, from one thread: a firewall that drops costs one timeout, not one per
    address, and a host of a 64-host fleet makes its 63 connections without 63 threads. At most
    _in_flight() sockets are open at a time (a host of a large mesh must not run out of descriptors).
    Each address is tried as `socket.create_connection` would: every address its name resolves to, in
    turn, one that cannot be used (an address family the host lacks) counting as a failed one."""
    import selectors
    import time

    deadline = time.monotonic() + timeout
    targets = [(str(host), int(port)) for host, port in addresses]
    outcomes, pending = _addresses(targets)
    waiting = list(pending)  # not started yet
    in_flight = _in_flight()
    with selectors.DefaultSelector() as selector:

        def attempt(target: tuple[str, int], error: str) -> None:
            """Start connecting to the target's next address; with none left, its outcome is `error`."""
            while pending[target]:
                family, address = pending[target].pop(0)
                try:
                    sock = socket.socket(family, socket.SOCK_STREAM)
                except OSError as failure:  # no such family here (IPv6 off), no descriptor left
                    error = failure.strerror or type(failure).__name__
                    continue
                sock.setblocking(False)
                code = sock.connect_ex(address)
                if code in (0, errno.EINPROGRESS):
                    selector.register(sock, selectors.EVENT_WRITE, target)
                    return
                sock.close()
                error = os.strerror(code)
            outcomes[target] = error

        try:
            while waiting or selector.get_map():
                while waiting and len(selector.get_map()) < in_flight:
                    attempt(waiting.pop(0), "no address")
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                for key, _ in selector.select(left):
                    sock, target = key.fileobj, key.data
                    selector.unregister(sock)
                    code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)  # type: ignore[union-attr]
                    sock.close()  # type: ignore[union-attr]
                    if code == 0:
                        outcomes[target] = "ok"
                    else:
                        attempt(target, os.strerror(code))
        finally:
            for key in list(selector.get_map().values()):  # no answer in time: dropped on the way
                key.fileobj.close()  # type: ignore[union-attr]
                outcomes.setdefault(key.data, "TimeoutError")
    for target in waiting:  # never started: the time ran out on the ones before it
        outcomes.setdefault(target, "TimeoutError")
    return {"results": {f"{host}:{port}": outcomes[(host, port)] for host, port in targets}}


def _addresses(targets: list[tuple[str, int]]) -> tuple[dict[tuple[str, int], str], dict[tuple[str, int], list[Any]]]:
    """Each target's socket addresses to try in turn; a target whose name does not resolve gets its outcome."""
    resolved = _resolve({host for host, _ in targets})
    outcomes: dict[tuple[str, int], str] = {}
    pending: dict[tuple[str, int], list[Any]] = {}
    for host, port in targets:
        found = resolved[host]
        if isinstance(found, str):
            outcomes[(host, port)] = found
        else:
            pending[(host, port)] = [(family, (address[0], port, *address[2:])) for family, address in found]
    return outcomes, pending


def _in_flight() -> int:
    """How many sockets a mesh check holds open at once: up to 256, and a quarter of what this process
    may open (a host with a low descriptor limit checks its peers a few at a time, not refused)."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 256 if soft == resource.RLIM_INFINITY else max(4, min(256, soft // 4))


def _resolve(hosts: set[str]) -> dict[str, list[tuple[int, Any]] | str]:
    """Each host's stream addresses (family, sockaddr), or why it has none. Names are looked up side by
    side (a slow resolver costs one wait); address literals need no lookup."""

    def lookup(host: str) -> list[tuple[int, Any]] | str:
        try:
            return [
                (family, address) for family, _, _, _, address in socket.getaddrinfo(host, 0, 0, socket.SOCK_STREAM)
            ]
        except OSError as error:
            return error.strerror or type(error).__name__

    names = [host for host in hosts if not _is_literal(host)]
    found: dict[str, list[tuple[int, Any]] | str] = {host: lookup(host) for host in hosts if _is_literal(host)}
    if names:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(32, len(names))) as pool:
            found.update(zip(names, pool.map(lookup, names), strict=True))
    return found


def _is_literal(host: str) -> bool:
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
            return True
        except OSError:
            continue
    return False


def release() -> dict[str, Any]:
    """Close every listener `bind` opened, and end their accepting threads."""
    while _wakes:  # each accepting thread leaves at its next look (a listener closed before: a failed accept)
        wake = _wakes.pop()
        os.write(wake, b"x")
        os.close(wake)
    while _listeners:
        listener = _listeners.pop()
        try:
            listener.shutdown(socket.SHUT_RDWR)  # wakes its accepting thread
        except OSError:  # not connected: nothing to shut down
            pass
        listener.close()
    return {"ok": True}
