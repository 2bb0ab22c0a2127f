"""A real OpenSSH server for the tests, on loopback aliases that act as separate hosts.

It generates its own host key and a user key, listens on a free port on 127.0.0.2, 127.0.0.3, ...
(any 127/8 address works on Linux without setup), and is stopped with every session it spawned.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from tests.labs.ports import free_port

ADDRESSES = ("127.0.0.2", "127.0.0.3", "127.0.0.4")


def sshd_binary() -> str | None:
    return shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)


def host_login(directory: Path) -> str:
    """The login environment of a host whose `python3` on PATH is the one with the project: a home
    without rc files (this machine's own rc files put another python first) and a PATH starting
    with a two-line wrapper (a symlink would not start the virtual environment). SetEnv lines for
    an sshd_config; they add a host's environment, they loosen nothing."""
    home = directory / "home"
    home.mkdir(parents=True, exist_ok=True)
    return f"SetEnv HOME={home} PATH={python3_on_path(directory)}:/usr/local/bin:/usr/bin:/bin\n"


def python3_on_path(directory: Path) -> Path:
    """A directory whose `python3` is the project's python: a two-line wrapper (a symlink would not
    start the virtual environment). Put it first on a PATH."""
    bin_dir = directory / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    wrapper = bin_dir / "python3"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    return bin_dir


def stock_sshd_config(listen: list[str], host_key: Path, pid_file: Path, authorized_keys: Path) -> str:
    """OpenSSH's defaults (MaxSessions 10, MaxStartups 10:30:100: what users' hosts have), keys only,
    the log verbose enough to count logins and sessions. Tests may add lines, never loosen these."""
    listening = "\n".join(f"ListenAddress {address}" for address in listen)
    return f"""{listening}
HostKey {host_key}
PidFile {pid_file}
AuthorizedKeysFile {authorized_keys}
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin prohibit-password
LogLevel VERBOSE
"""


def _keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return (path.with_suffix(".pub") if path.suffix else Path(f"{path}.pub")).read_text().strip()


@dataclass
class SshServer:
    directory: Path
    port: int
    process: subprocess.Popen[bytes]
    identity_file: str
    known_hosts: str
    host_public_key: str
    addresses: tuple[str, ...] = ADDRESSES

    def start_again(self) -> None:
        """sshd again, with the same configuration, keys and port: a host back after an outage."""
        binary = sshd_binary()
        assert binary is not None and self.process.poll() is not None, "start_again after stop"
        with open(self.directory / "sshd.log", "ab") as log:
            self.process = subprocess.Popen(
                [binary, "-D", "-e", "-f", str(self.directory / "sshd_config")], stdout=log, stderr=subprocess.STDOUT
            )
        self.wait_accepting()

    def wait_accepting(self) -> None:
        deadline = time.monotonic() + 15
        while True:
            assert self.process.poll() is None, (self.directory / "sshd.log").read_text()
            try:
                socket.create_connection((self.addresses[0], self.port), timeout=0.2).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise
                time.sleep(0.05)

    def ssh_settings(self, **extra: object) -> dict[str, object]:
        return {
            "port": self.port,
            "identity_file": self.identity_file,
            "known_hosts": self.known_hosts,
            "connect_timeout_s": 5,
            **extra,
        }

    def accepted_connections(self) -> int:
        """How many logins sshd has accepted so far (its log says so at LogLevel VERBOSE)."""
        return (self.directory / "sshd.log").read_text(errors="replace").count("Accepted publickey")

    def sessions_started(self) -> int:
        """How many sessions (one command each) sshd has started so far, all connections together."""
        return (self.directory / "sshd.log").read_text(errors="replace").count("Starting session:")

    def sessions_serving(self, address: str) -> list[psutil.Process]:
        """The per-connection sshd processes whose connection arrived on `address`."""
        return [
            s for s in self.sessions() if any(c.laddr and c.laddr.ip == address for c in s.net_connections(kind="tcp"))
        ]

    def sessions(self) -> list[psutil.Process]:
        """The per-connection sshd processes (what a dropped connection kills)."""
        try:
            return psutil.Process(self.process.pid).children()
        except psutil.NoSuchProcess:
            return []

    def stop(self) -> None:
        try:
            everything = [psutil.Process(self.process.pid), *psutil.Process(self.process.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            everything = []
        for proc in everything:
            try:
                proc.kill()
            except psutil.NoSuchProcess:  # exited on its own meanwhile
                pass
        psutil.wait_procs(everything, timeout=10)
        self.process.wait(timeout=10)


def start_sshd(directory: Path, addresses: tuple[str, ...] = ADDRESSES) -> SshServer:
    """A stock sshd listening on `addresses` (one port for all), its keys and known_hosts in `directory`."""
    binary = sshd_binary()
    assert binary, "openssh-server is not installed (scripts/test.sh installs it)"
    directory.mkdir(parents=True, exist_ok=True)
    host_key = directory / "host_ed25519"
    host_public = _keygen(host_key)
    user_key = directory / "user_ed25519"
    (directory / "authorized_keys").write_text(_keygen(user_key) + "\n")
    port = free_port(addresses[0])
    config = directory / "sshd_config"
    listen = [f"{address}:{port}" for address in addresses]
    stock = stock_sshd_config(listen, host_key, directory / "sshd.pid", directory / "authorized_keys")
    config.write_text(stock + host_login(directory))
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # privilege separation directory
    log = open(directory / "sshd.log", "wb")
    process = subprocess.Popen([binary, "-D", "-e", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT)
    known_hosts = directory / "known_hosts"
    key_type, key_data = host_public.split()[:2]
    known_hosts.write_text("".join(f"[{address}]:{port} {key_type} {key_data}\n" for address in addresses))
    server = SshServer(directory, port, process, str(user_key), str(known_hosts), host_public, addresses)
    log.close()  # sshd holds its own copy
    server.wait_accepting()
    return server
