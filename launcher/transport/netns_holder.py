"""A private network for a gang on this machine: the program that makes it and holds it open.

Run as a program (`python -I -S netns_holder.py [UPSTREAM RESOLVER...]`, standard library only),
never imported by the launcher. It leaves the machine's network for one of its own, holding only a
loopback device, brought up: a task started in it listens where no other machine can connect. As
root that takes a network namespace alone; as any other user a user namespace too, which maps only
the user's own ids (the task keeps its uid and gid, files keep their owner; other users' files show
as `nobody`).

Given UPSTREAM and RESOLVER addresses (this machine's resolver is on its own loopback, such as
systemd-resolved's 127.0.0.53, which the private network does not have), it answers DNS at each
RESOLVER address inside the network, over UDP and TCP, by asking UPSTREAM (slirp4netns' resolver,
which asks this machine's own). The tasks keep reading this machine's /etc/resolv.conf as it is; a
resolver the machine names later at another loopback address is not answered, and the answers end
with this process.

It prints one JSON line, `{"pid": ..., "namespaces": [...]}` (what a process must enter) or
`{"error": "..."}` (the kernel refused: why), and then holds the network until its standard input
ends (the launcher closed it, or died).
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import socket
import struct
import sys
import threading

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
SIOCSIFFLAGS = 0x8914
IFF_UP, IFF_LOOPBACK, IFF_RUNNING = 0x1, 0x8, 0x40
DNS_PORT = 53
_ANSWER_TIMEOUT_S = 10.0


def _map_own_ids(uid: int, gid: int) -> None:
    """Map the user's own uid and gid (read before the user namespace was made: inside it, unmapped,
    they read as the kernel's overflow id), and no other, into the new user namespace."""
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w", encoding="ascii") as file:
            file.write(text)


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", IFF_UP | IFF_LOOPBACK | IFF_RUNNING, b""))


def make() -> list[str]:
    """Move this process into namespaces of its own; the namespaces made, as nsenter names them."""
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    made = ["net"] if uid == 0 else ["user", "net"]
    if libc.unshare(CLONE_NEWNET | (CLONE_NEWUSER if uid != 0 else 0)) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"the kernel refused new namespaces: {os.strerror(error)}")
    if "user" in made:
        _map_own_ids(uid, gid)
    _loopback_up()
    return made


# ---- DNS at the machine's loopback resolver addresses -------------------------------------------


def _family(address: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in address else socket.AF_INET


def _answer_udp(server: socket.socket, query: bytes, client: tuple[str, int], upstream: str) -> None:
    with socket.socket(_family(upstream), socket.SOCK_DGRAM) as ask:
        ask.settimeout(_ANSWER_TIMEOUT_S)
        try:
            ask.sendto(query, (upstream, DNS_PORT))
            server.sendto(ask.recv(65535), client)
        except OSError:  # no answer: the client asks again, as it would its resolver
            pass


def _serve_udp(server: socket.socket, upstream: str) -> None:
    while True:
        query, client = server.recvfrom(65535)
        threading.Thread(target=_answer_udp, args=(server, query, client, upstream), daemon=True).start()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65535):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _answer_tcp(client: socket.socket, upstream: str) -> None:
    try:
        ask = socket.create_connection((upstream, DNS_PORT), timeout=_ANSWER_TIMEOUT_S)
    except OSError:
        client.close()
        return
    ask.settimeout(None)
    threading.Thread(target=_pipe, args=(ask, client), daemon=True).start()
    _pipe(client, ask)


def _serve_tcp(server: socket.socket, upstream: str) -> None:
    while True:
        client, _ = server.accept()
        threading.Thread(target=_answer_tcp, args=(client, upstream), daemon=True).start()


def serve_dns(upstream: str, resolvers: list[str]) -> None:
    """Answer DNS at each of `resolvers` (loopback addresses) by asking `upstream`, on threads."""
    for address in resolvers:
        udp = socket.socket(_family(address), socket.SOCK_DGRAM)
        udp.bind((address, DNS_PORT))
        tcp = socket.socket(_family(address), socket.SOCK_STREAM)
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        tcp.bind((address, DNS_PORT))
        tcp.listen(64)
        threading.Thread(target=_serve_udp, args=(udp, upstream), daemon=True).start()
        threading.Thread(target=_serve_tcp, args=(tcp, upstream), daemon=True).start()


def main() -> int:
    try:
        made = make()
        if len(sys.argv) > 2:
            serve_dns(sys.argv[1], sys.argv[2:])
    except OSError as error:
        print(json.dumps({"error": error.strerror or str(error)}), flush=True)
        return 1
    print(json.dumps({"pid": os.getpid(), "namespaces": made}), flush=True)
    sys.stdin.buffer.read()  # the lifeline: held until the launcher closes it or dies
    return 0


if __name__ == "__main__":
    sys.exit(main())
