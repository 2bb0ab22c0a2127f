"""A gang whose tasks all run on this machine is not a server on the network.

TensorFlow's gRPC server listens on every interface whatever TF_CONFIG names, serves anyone who
connects, and runs the graphs it is sent. For a gang all on this machine (`--local`, `-H
localhost:N`, a spec of local hosts) the launcher keeps other machines off the tasks' ports, the
first way that works here:

1. A private network (`local_network: "private"`, the default; every task's address a loopback
   one): the tasks run in a network namespace of their own holding only a loopback device
   (launcher/transport/netns_holder.py makes it; as a user other than root, inside a user namespace,
   where the kernel allows one). slirp4netns gives it a way out through this machine's network, so a
   script still downloads its data; nothing comes in. A service on this machine's own loopback is at
   10.0.2.2 from a task.
2. As root: an nftables rule that refuses connections to the tasks' ports from anywhere but this
   machine (launcher/transport/port_firewall.py).
3. Neither: the ports stay open, and the console says so once, with how to close them.

`local_network: "host"` keeps the tasks on this machine's network, as a gang with remote hosts is.
"""

from __future__ import annotations

import ipaddress
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from launcher.agent.protocol import NetworkCommand
from launcher.plan import TaskLaunch
from launcher.spec.addresses import is_this_machine
from launcher.transport.port_firewall import FirewallUnavailable, PortFirewall
from worker.contract import RUN_DIR_VAR

HOLDER = str(Path(__file__).with_name("netns_holder.py"))
SLIRP_DNS = "10.0.2.3"  # slirp4netns' resolver, which asks this machine's own
_READY_TIMEOUT_S = 10.0
_CLOSE_WAIT_S = 5.0
_RESOLV_CONF = "/etc/resolv.conf"
_APPARMOR_USERNS = "/proc/sys/kernel/apparmor_restrict_unprivileged_userns"


# Tells one helper to leave (or removes a rule) and returns what waits for it to be gone, if anything.
Closer = Callable[[], "Callable[[], None] | None"]


class NetworkUnavailable(Exception):
    """Why a private network cannot be made here."""


@dataclass
class LocalNetwork:
    """How a local gang's ports are kept from other machines: what `--check` says (`says`), what each
    local agent is told (`order`), the ports left open (`exposed`) and the warning for them."""

    says: str
    order: NetworkCommand | None = None
    exposed: tuple[int, ...] = ()
    warning: str | None = None
    _closers: list[Closer] = field(default_factory=list)

    def close(self) -> None:
        """Tell every helper to leave; they are reaped on a thread of their own, so that the run's end
        does not wait for them (each leaves within milliseconds of its lifeline's end)."""
        waits = []
        while self._closers:
            waits.append(self._closers.pop()())
        left = [wait for wait in waits if wait is not None]
        if left:
            threading.Thread(target=lambda: [wait() for wait in left], daemon=True, name="network-close").start()


class NetworkStarting:
    """`open_local_network` on a thread of its own, so that making the namespaces overlaps the
    agents' own start; `result()` waits for it (and raises what it raised)."""

    def __init__(self, choice: str, tasks: Sequence[TaskLaunch], run_dir: str) -> None:
        self._made: list[LocalNetwork | None] = []
        self._error: list[BaseException] = []
        self._thread = threading.Thread(target=self._make, args=(choice, tasks, run_dir), daemon=True, name="network")
        self._thread.start()

    def _make(self, choice: str, tasks: Sequence[TaskLaunch], run_dir: str) -> None:
        try:
            self._made.append(open_local_network(choice, tasks, run_dir))
        except BaseException as error:  # noqa: BLE001 - raised by result(), on the caller's thread
            self._error.append(error)

    def result(self) -> LocalNetwork | None:
        self._thread.join()
        if self._error:
            raise self._error[0]
        return self._made[0]

    def order(self) -> NetworkCommand | None:
        """What each local agent is told before anything else (None: nothing)."""
        made = self.result()
        return None if made is None else made.order

    def close(self) -> None:
        made = self.result() if not self._error else None
        if made is not None:
            made.close()


def open_local_network(choice: str, tasks: Sequence[TaskLaunch], run_dir: str) -> LocalNetwork | None:
    """The best isolation for `tasks` here; None when some task runs on another host (its peers
    there must reach the ports, so they stay on the machine's network). The processes that hold a
    private network carry `run_dir` in their environment, as the tasks do: `ps e` tells whose they are."""
    if not tasks or not all(task.is_local for task in tasks):
        return None
    ports = tuple(sorted({task.port for task in tasks}))
    if choice == "host":
        return LocalNetwork(
            f"the tasks' ports {_listed(ports)} are open to other machines (local_network is host)", None, ports
        )
    reasons = []
    if all(_loopback(task.host) for task in tasks):
        try:
            return _private({**os.environ, RUN_DIR_VAR: run_dir})
        except NetworkUnavailable as why:
            reasons.append(str(why))
    else:
        reasons.append("a task's address is not a loopback one, which a private network would not have")
    try:
        firewall = PortFirewall(list(ports))
    except FirewallUnavailable as why:
        reasons.append(str(why))
    else:
        return LocalNetwork(
            f"the tasks' ports {_listed(ports)} are closed to other machines by the nftables table {firewall.table}",
            _closers=[firewall.close],  # removed at once: no wait
        )
    return LocalNetwork(
        f"the tasks' ports {_listed(ports)} are OPEN to other machines: {'; '.join(reasons)}",
        None,
        ports,
        _warning(ports, reasons),
    )


def _loopback(address: str) -> bool:
    """An address every private network has: localhost, or any of 127.0.0.0/8 and ::1 (its loopback
    device holds them all)."""
    if is_this_machine(address):
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:  # a host name
        return False


def _listed(ports: tuple[int, ...]) -> str:
    return ", ".join(map(str, ports))


def _warning(ports: tuple[int, ...], reasons: list[str]) -> str:
    fixes = ["install slirp4netns (apt install slirp4netns) for a private network"]
    fixes.append("install nftables for a firewall rule" if os.geteuid() == 0 else "launch as root for a firewall rule")
    fixes.append("refuse connections to them from other machines in your firewall")
    them = f"port {ports[0]} is" if len(ports) == 1 else f"ports {_listed(ports)} are"
    return (
        f"warning: the tasks' TensorFlow {them} open to other machines, and TensorFlow runs what anyone sends "
        f"there ({'; '.join(reasons)}). To close them: {', or '.join(fixes)}"
    )


def _loopback_resolver() -> bool:
    """Whether this machine's resolver is on its own loopback (systemd-resolved's 127.0.0.53), which
    the private network cannot reach."""
    try:
        lines = Path(_RESOLV_CONF).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return False
    for line in lines:
        words = line.split()
        if words[:1] == ["nameserver"] and len(words) > 1:
            try:
                if ipaddress.ip_address(words[1].split("%")[0]).is_loopback:
                    return True
            except ValueError:
                continue
    return False


def _private(env: dict[str, str]) -> LocalNetwork:
    """Namespaces held by a holder process, slirp4netns for the way out, and the nsenter command
    that puts a task there (checked once here, so a task never starts outside)."""
    slirp = shutil.which("slirp4netns")
    nsenter = shutil.which("nsenter")
    if slirp is None or nsenter is None:
        raise NetworkUnavailable(f"no {'slirp4netns' if slirp is None else 'nsenter'} on PATH for a private network")
    closers: list[Closer] = []
    try:
        pid, namespaces = _start_holder(env, closers)
        _start_slirp(slirp, pid, namespaces, env, closers)
        enter = [nsenter, f"--target={pid}", *(f"--{kind}" for kind in namespaces)]
        if "user" in namespaces:
            enter.append("--preserve-credentials")
        if "user" in namespaces:  # each task starts under nsenter (as root, the agent enters itself)
            _check_enter(enter)
    except BaseException:
        LocalNetwork("", _closers=closers).close()
        raise
    return LocalNetwork(
        "the tasks run in a private network (slirp4netns): no other machine can reach their ports",
        {"op": "network", "pid": pid, "namespaces": namespaces, "enter": enter, "wd": "mount" in namespaces},
        _closers=closers,
    )


def _restricted() -> str:
    """Why the kernel refuses a user other than root its namespaces, where a setting says (Ubuntu 24.04's AppArmor)."""
    try:
        restricted = Path(_APPARMOR_USERNS).read_text().strip() == "1"
    except OSError:
        restricted = False
    if os.geteuid() == 0 or not restricted:
        return ""
    return " (AppArmor restricts user namespaces to programs it allows: kernel.apparmor_restrict_unprivileged_userns=1)"


def _read_line(proc: subprocess.Popen[bytes], what: str) -> bytes:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], _READY_TIMEOUT_S)
    if not ready:
        raise NetworkUnavailable(f"{what} said nothing in {_READY_TIMEOUT_S:.0f} s")
    return proc.stdout.readline()


def _stopper(proc: subprocess.Popen[bytes], *files: int) -> Callable[[], Callable[[], None]]:
    """What tells `proc` to leave (closing its lifeline `files`, or its input); it returns the wait."""

    def wait() -> None:
        try:
            proc.wait(timeout=_CLOSE_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()

    def stop() -> Callable[[], None]:
        for fd in files:
            os.close(fd)
        if proc.stdin is not None:
            proc.stdin.close()
        return wait

    return stop


def _start_holder(env: dict[str, str], closers: list[Closer]) -> tuple[int, list[str]]:
    argv = [sys.executable, "-I", "-S", HOLDER, *([SLIRP_DNS] if _loopback_resolver() else [])]
    try:  # a process group of its own: a Ctrl-C at the terminal is the launcher's to handle
        holder = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, process_group=0
        )
    except OSError as error:
        raise NetworkUnavailable(f"cannot run {sys.executable} ({error.strerror})") from None
    closers.append(_stopper(holder))
    said = _read_line(holder, "the namespace holder")
    try:
        answer = json.loads(said)
    except ValueError:
        answer = {"error": said.decode(errors="replace").strip() or f"it exited with code {holder.wait()}"}
    if "error" in answer:
        raise NetworkUnavailable(f"{answer['error']}{_restricted()}, so no private network")
    return int(answer["pid"]), [str(kind) for kind in answer["namespaces"]]


def _start_slirp(slirp: str, pid: int, namespaces: list[str], env: dict[str, str], closers: list[Closer]) -> None:
    """slirp4netns for the namespace's way out: ends when `exit_w` closes (the launcher closed it, or died)."""
    exit_r, exit_w = os.pipe()
    ready_r, ready_w = os.pipe()
    argv = [slirp, "--configure", "--mtu=65520", "--enable-seccomp", f"--exit-fd={exit_r}", f"--ready-fd={ready_w}"]
    if "user" in namespaces:
        argv.append(f"--userns-path=/proc/{pid}/ns/user")
    with tempfile.TemporaryFile() as said_file:  # a file, not a pipe: what it says in a long run never blocks it
        try:
            proc = subprocess.Popen(
                [*argv, str(pid), "tap0"],
                stdin=subprocess.DEVNULL,
                stdout=said_file,
                stderr=subprocess.STDOUT,
                pass_fds=(exit_r, ready_w),
                env=env,
                process_group=0,
            )
        except OSError as error:
            os.close(exit_w)
            raise NetworkUnavailable(f"cannot run {slirp} ({error.strerror})") from None
        finally:
            os.close(exit_r)
            os.close(ready_w)
        closers.append(_stopper(proc, exit_w))
        try:
            ready, _, _ = select.select([ready_r], [], [], _READY_TIMEOUT_S)
            said = os.read(ready_r, 1) if ready else b""
        finally:
            os.close(ready_r)
        if said != b"1":
            proc.kill()
            proc.wait()
            said_file.seek(0)
            lines = said_file.read(64 * 1024).decode(errors="replace").strip().splitlines()
            why = (lines or ["it said nothing"])[-1][:200]
            raise NetworkUnavailable(f"slirp4netns could not give the private network a way out ({why})")


def _check_enter(enter: list[str]) -> None:
    """Enter once, as the agents will, so that a refusal (a security module's) is known before any task."""
    try:
        done = subprocess.run(
            [*enter, "--", "true"], capture_output=True, text=True, timeout=_READY_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.SubprocessError) as error:
        raise NetworkUnavailable(f"nsenter did not run ({error})") from None
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1][:200]
        raise NetworkUnavailable(f"nsenter cannot enter the private network ({why})")
