"""Hosts that are real hosts: network namespaces on a bridge, each with its own address and sshd.

A `NetnsLab` makes a bridge in this machine's namespace (the launcher's side, address .1) and,
per host, a network namespace joined to it by a veth pair with an address of its own in a /23
of the benchmarking range 198.18.0.0/15 that no interface here uses yet (room for 500 hosts). Each host runs its own
OpenSSH sshd on port 22 of its own namespace (nothing else listens there). A partition is an
iptables rule inside one namespace; `close()` kills every process in every namespace, removes
the namespaces and the bridge, and restores the kernel's neighbour-table limits it raised for a
large lab (that table is shared by every namespace), pass or fail. Needs root, iproute2, nsenter
and iptables.
"""

from __future__ import annotations

import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tests.labs.sshd import host_login, stock_sshd_config

SSH_PORT = 22  # each namespace is a host of its own: its sshd is alone there


def unavailable_reason() -> str | None:
    """Why namespace hosts cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespace hosts need root (ip netns, veth, iptables)"
    for tool in ("ip", "nsenter", "iptables", "ssh-keygen"):
        if shutil.which(tool) is None and not os.path.exists(f"/usr/sbin/{tool}"):
            return f"network namespace hosts need {tool!r} (scripts/test.sh installs iproute2 and iptables)"
    if not os.path.exists("/usr/sbin/sshd"):
        return "network namespace hosts need openssh-server (scripts/test.sh installs it)"
    return None


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=check, capture_output=True, text=True)


def _in(namespace: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return _run("nsenter", f"--net=/run/netns/{namespace}", *argv, check=check)


PREFIX = 23  # two /24s: 198.18.N.0 to 198.18.N+1.255, N even


def _unused_subnet() -> int:
    used = _run("ip", "-o", "-4", "addr", "show").stdout
    choices = [n for n in range(2, 254, 2) if f" 198.18.{n}." not in used and f" 198.18.{n + 1}." not in used]
    return random.choice(choices)


def host_address(subnet: int, index: int) -> str:
    """Host `index`'s address (1, 2, ...): from .11 of the first /24 on, into the second one past .255."""
    offset = 10 + index
    assert offset < 510, "a lab holds at most 499 hosts"
    return f"198.18.{subnet + offset // 256}.{offset % 256}"


@dataclass
class NetnsHost:
    namespace: str
    address: str
    veth: str  # this machine's end of the host's link; deleting it deletes the pair
    sshd: subprocess.Popen[bytes] | None = None

    def task_pids(self) -> list[int]:
        """Every process in this host's namespace except its sshd listener."""
        found = _run("ip", "netns", "pids", self.namespace, check=False).stdout.split()
        listener = self.sshd.pid if self.sshd is not None else -1
        return [int(pid) for pid in found if int(pid) != listener]

    def tasks_alive(self) -> list[str]:
        """Command lines of the non-sshd processes here (sshd sessions excluded): what a test must see gone."""
        alive = []
        for pid in self.task_pids():
            try:
                proc = psutil.Process(pid)
                if proc.name() != "sshd" and proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(" ".join(proc.cmdline())[:200])
            except psutil.NoSuchProcess:  # exited while we looked
                continue
        return alive


@dataclass
class NetnsLab:
    directory: Path
    subnet: int
    tag: str
    bridge: str
    hosts: list[NetnsHost] = field(default_factory=list)
    identity_file: str = ""
    known_hosts: str = ""
    rules: list[tuple[str, list[str]]] = field(default_factory=list)
    restore_sysctls: dict[str, str] = field(default_factory=dict)

    @property
    def launcher_address(self) -> str:
        return f"198.18.{self.subnet}.1"

    def ssh_settings(self, **extra: object) -> dict[str, object]:
        return {
            "port": SSH_PORT,
            "identity_file": self.identity_file,
            "known_hosts": self.known_hosts,
            "connect_timeout_s": 3,
            **extra,
        }

    # ---- partitions ------------------------------------------------------------------------

    def drop(self, host: NetnsHost, *match: str) -> None:
        """Silently drop what reaches `host` (all of it, or what `match` selects): no RST, no ICMP."""
        rule = ["INPUT", *match, "-j", "DROP"]
        _in(host.namespace, "iptables", "-A", *rule)
        self.rules.append((host.namespace, rule))

    def partition(self, host: NetnsHost) -> None:
        self.drop(host)

    def partition_from_launcher(self, host: NetnsHost) -> None:
        self.drop(host, "-s", self.launcher_address)

    def heal(self) -> None:
        for namespace, rule in self.rules:
            _in(namespace, "iptables", "-D", *rule, check=False)
        self.rules.clear()

    # ---- lifetime --------------------------------------------------------------------------

    def add_host(self, index: int, host_key: Path | None) -> NetnsHost:
        """A namespace host on the bridge; with `host_key`, also its sshd."""
        namespace = f"{self.tag}-{index}"
        outside, inside = f"{self.tag}v{index}", f"{self.tag}p{index}"
        host = NetnsHost(namespace, host_address(self.subnet, index), outside)
        _run("ip", "netns", "add", namespace)
        self.hosts.append(host)
        _run("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
        _run("ip", "link", "set", inside, "netns", namespace)
        _run("ip", "-n", namespace, "link", "set", inside, "name", "eth0")
        _run("ip", "-n", namespace, "addr", "add", f"{host.address}/{PREFIX}", "dev", "eth0")
        _run("ip", "-n", namespace, "link", "set", "eth0", "up")
        _run("ip", "-n", namespace, "link", "set", "lo", "up")
        _run("ip", "link", "set", outside, "master", self.bridge, "up")
        if host_key is None:
            return host
        config = self.directory / f"sshd_config-{index}"
        stock = stock_sshd_config(
            [f"{host.address}:{SSH_PORT}"],
            host_key,
            self.directory / f"sshd-{index}.pid",
            self.directory / "authorized_keys",
        )
        config.write_text(stock + host_login(self.directory))
        log = open(self.directory / f"sshd-{index}.log", "wb")
        host.sshd = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{namespace}", "/usr/sbin/sshd", "-D", "-e", "-f", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        return host

    def wait_ready(self, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        for host in self.hosts:
            while True:
                assert host.sshd is not None and host.sshd.poll() is None, f"sshd in {host.namespace} exited"
                try:
                    socket.create_connection((host.address, SSH_PORT), timeout=0.5).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, f"sshd on {host.address} never answered"
                    time.sleep(0.05)

    def close(self) -> None:
        """Kill everything in every namespace, then remove the namespaces and the bridge."""
        self.heal()
        for host in self.hosts:
            everything = _run("ip", "netns", "pids", host.namespace, check=False).stdout.split()
            for pid in map(int, everything):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:  # already gone
                    pass
        for host in self.hosts:
            if host.sshd is not None:
                host.sshd.wait(timeout=10)
            deadline = time.monotonic() + 10
            while host.task_pids() and time.monotonic() < deadline:
                time.sleep(0.05)
            _run("ip", "link", "del", host.veth, check=False)  # the kernel may keep a deleted namespace a while
            _run("ip", "netns", "del", host.namespace, check=False)
        _run("ip", "link", "del", self.bridge, check=False)
        for key, value in self.restore_sysctls.items():
            Path(f"/proc/sys/{key.replace('.', '/')}").write_text(value)
        self.restore_sysctls.clear()


_NEIGHBOUR_LIMITS = ("net.ipv4.neigh.default.gc_thresh2", "net.ipv4.neigh.default.gc_thresh3")


def _room_for_neighbours(lab: NetnsLab, count: int) -> None:
    """The kernel's ARP table is one for all namespaces (1024 entries by default): a full mesh of
    `count` hosts needs about count squared. Raised while the lab exists, restored by close()."""
    needed = count * count + 512
    for key in _NEIGHBOUR_LIMITS:
        path = Path(f"/proc/sys/{key.replace('.', '/')}")
        current = path.read_text().strip()
        if int(current) < needed:
            lab.restore_sysctls[key] = current
            path.write_text(str(needed))


def make_lab(directory: Path, count: int, sshd: bool = True) -> NetnsLab:
    """`count` namespace hosts (with sshd up unless `sshd` is false); the caller must `close()` it
    (a fixture does)."""
    directory.mkdir(parents=True, exist_ok=True)
    tag = f"tl{secrets.token_hex(2)}"  # interface names stay under 15 characters
    subnet = _unused_subnet()
    lab = NetnsLab(directory, subnet, tag, f"{tag}br")
    try:
        _room_for_neighbours(lab, count)
        _run("ip", "link", "add", lab.bridge, "type", "bridge", "nf_call_iptables", "0", "nf_call_arptables", "0")
        _run("ip", "addr", "add", f"{lab.launcher_address}/{PREFIX}", "dev", lab.bridge)
        _run("ip", "link", "set", lab.bridge, "up")
        host_key = directory / "host_ed25519"
        user_key = directory / "user_ed25519"
        for key in (host_key, user_key):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        (directory / "authorized_keys").write_text(Path(f"{user_key}.pub").read_text())
        key_type, key_data = Path(f"{host_key}.pub").read_text().split()[:2]
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)
        for index in range(1, count + 1):
            lab.add_host(index, host_key if sshd else None)
        known = directory / "known_hosts"
        known.write_text("".join(f"{h.address} {key_type} {key_data}\n" for h in lab.hosts))
        lab.identity_file, lab.known_hosts = str(user_key), str(known)
        if sshd:
            lab.wait_ready()
    except BaseException:
        lab.close()
        raise
    return lab
