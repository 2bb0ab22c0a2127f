"""A private network for a gang on this machine: the program that makes it and holds it open.

Run as a program (`python -I -S netns_holder.py [NAMESERVER]`, standard library only), never
imported by the launcher. It leaves the machine's network for one of its own, holding only a
loopback device, brought up: a task started in it (the host agent runs it under `nsenter`) listens
where no other machine can connect. As root that takes a network namespace alone; as any other user
a user namespace too, which maps only the user's own ids (the task keeps its uid and gid, files keep
their owner; other users' files show as `nobody`). Given NAMESERVER (the machine's resolver is on its
own loopback, such as systemd-resolved's 127.0.0.53, which the private network cannot reach), it
also takes a mount namespace in which /etc/resolv.conf names NAMESERVER instead; mounts made on the
machine later still reach it.

It prints one JSON line, `{"pid": ..., "namespaces": [...]}` (what `nsenter` must enter) or
`{"error": "..."}` (the kernel refused: why), and then holds the namespaces until its standard input
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
import tempfile

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
MS_BIND = 4096
MS_REC = 16384
MS_SLAVE = 1 << 19
SIOCSIFFLAGS = 0x8914
IFF_UP, IFF_LOOPBACK, IFF_RUNNING = 0x1, 0x8, 0x40
RESOLV_CONF = "/etc/resolv.conf"


def _check(result: int, what: str) -> None:
    if result != 0:
        raise OSError(ctypes.get_errno(), f"{what}: {os.strerror(ctypes.get_errno())}")


def _map_own_ids(uid: int, gid: int) -> None:
    """Map the user's own uid and gid (read before the user namespace was made: inside it, unmapped,
    they read as the kernel's overflow id), and no other, into the new user namespace."""
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w", encoding="ascii") as file:
            file.write(text)


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", IFF_UP | IFF_LOOPBACK | IFF_RUNNING, b""))


def _resolv_text(nameserver: str) -> str:
    """The machine's resolv.conf with its name servers replaced by `nameserver` (search and options kept)."""
    try:
        with open(RESOLV_CONF, encoding="utf-8", errors="replace") as file:
            kept = [line for line in file.read().splitlines() if not line.split()[:1] == ["nameserver"]]
    except OSError:
        kept = []
    return "\n".join([f"nameserver {nameserver}", *kept]) + "\n"


def _own_resolver(libc: ctypes.CDLL, nameserver: str) -> None:
    """Bind a resolv.conf naming `nameserver` over the machine's, in this mount namespace alone."""
    _check(libc.mount(None, b"/", None, MS_REC | MS_SLAVE, None), "cannot keep mounts private")
    with tempfile.NamedTemporaryFile("w", prefix="tflaunch-resolv-", suffix=".conf", delete=False) as file:
        file.write(_resolv_text(nameserver))
    try:
        os.chmod(file.name, 0o644)
        _check(libc.mount(file.name.encode(), RESOLV_CONF.encode(), None, MS_BIND, None), "cannot mount resolv.conf")
    finally:
        os.unlink(file.name)  # the mount holds the file


def make(nameserver: str | None) -> list[str]:
    """Move this process into namespaces of its own; the namespaces made, as nsenter names them."""
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    made = ["net"] if uid == 0 else ["user", "net"]
    flags = CLONE_NEWNET | (CLONE_NEWUSER if "user" in made else 0)
    if nameserver is not None:
        made.append("mount")
        flags |= CLONE_NEWNS
    _check(libc.unshare(flags), "the kernel refused new namespaces")
    if "user" in made:
        _map_own_ids(uid, gid)
    _loopback_up()
    if nameserver is not None:
        _own_resolver(libc, nameserver)
    return made


def main() -> int:
    try:
        made = make(sys.argv[1] if len(sys.argv) > 1 else None)
    except OSError as error:
        print(json.dumps({"error": error.strerror or str(error)}), flush=True)
        return 1
    print(json.dumps({"pid": os.getpid(), "namespaces": made}), flush=True)
    sys.stdin.buffer.read()  # the lifeline: held until the launcher closes it or dies
    return 0


if __name__ == "__main__":
    sys.exit(main())
