"""A private network for a gang on this machine: its namespaces, held by a process of their own
(launcher/transport/netns_holder.py), and slirp4netns for its way out.

Made once per launch. A launch whose hosts are all this machine starts it at once (`start_early`,
beside the early agents, while the launcher still imports and validates), so that what it costs
overlaps the launcher's own start-up; the launch takes it (`take_early`) when its spec wants one,
and closes it otherwise (`close_early`). Its processes hold the launcher's pipes as lifelines: they
end with the launcher, however it ends.
Standard library and the agent's protocol only: the command line imports it before the spec is read.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from launcher.agent.protocol import NetworkCommand

HOLDER = str(Path(__file__).with_name("netns_holder.py"))
SLIRP_DNS = "10.0.2.3"  # slirp4netns' resolver, which asks this machine's own
_READY_TIMEOUT_S = 10.0
_CLOSE_WAIT_S = 5.0
_RESOLV_CONF = "/etc/resolv.conf"
_APPARMOR_USERNS = "/proc/sys/kernel/apparmor_restrict_unprivileged_userns"
# A process group of its own: a Ctrl-C at the terminal is the launcher's to handle, not the helpers'.
_OWN_GROUP: dict[str, Any] = {"process_group": 0} if sys.version_info >= (3, 11) else {"start_new_session": True}
SAYS = "the tasks run in a private network (slirp4netns): no other machine can reach their ports"

# Tells one helper to leave and returns what waits for it to be gone.
Closer = Callable[[], Callable[[], None]]


class NetworkUnavailable(Exception):
    """Why a private network cannot be made here, and what would mend it (`fix`) where that is known."""

    def __init__(self, why: str, fix: str | None = None) -> None:
        super().__init__(why)
        self.fix = fix


def close_all(closers: list[Closer]) -> None:
    """Tell every helper to leave; they are reaped on a thread of their own, so that the run's end
    does not wait for them (each leaves within milliseconds of its lifeline's end)."""
    waits = []
    while closers:
        waits.append(closers.pop()())
    if waits:
        threading.Thread(target=lambda: [wait() for wait in waits], daemon=True, name="network-close").start()


class PrivateNetwork:
    """The namespaces and their way out; `order` tells a local agent where they are."""

    def __init__(self, order: NetworkCommand, closers: list[Closer]) -> None:
        self.order = order
        self.says = SAYS
        self._closers = closers

    def close(self) -> None:
        close_all(self._closers)


def loopback_resolvers() -> list[str]:
    """This machine's name servers on its own loopback (systemd-resolved's 127.0.0.53), which the
    private network does not have: the holder answers there in it."""
    try:
        lines = Path(_RESOLV_CONF).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        words = line.split()
        if words[:1] == ["nameserver"] and len(words) > 1:
            try:
                address = ipaddress.ip_address(words[1].split("%")[0])
            except ValueError:
                continue
            if address.is_loopback and str(address) not in found:
                found.append(str(address))
    return found


def make_private(env: dict[str, str]) -> PrivateNetwork:
    """Namespaces held by a holder process, slirp4netns for the way out, and the order that tells an
    agent where they are. Where tasks will start under nsenter (a user namespace), it is tried once
    here, so that a refusal (a security module's) is known before any task.
    `env`: the helpers' environment. NetworkUnavailable: why it cannot be made here."""
    slirp = shutil.which("slirp4netns")
    nsenter = shutil.which("nsenter")
    if slirp is None or nsenter is None:
        missing, package = ("slirp4netns", "slirp4netns") if slirp is None else ("nsenter", "util-linux")
        raise NetworkUnavailable(
            f"no {missing} on PATH for a private network", f"install {package} (apt install {package})"
        )
    closers: list[Closer] = []
    try:
        pid, namespaces = _start_holder(env, closers)
        _start_slirp(slirp, pid, namespaces, env, closers)
        net = os.readlink(f"/proc/{pid}/ns/net")  # its name: the agents check they open this one
        if "user" in namespaces:  # each task starts under nsenter (as root, the agent enters itself)
            _check_enter([nsenter, f"--target={pid}", "--user", "--net", "--preserve-credentials"])
    except OSError as error:  # out of file descriptors or processes: no network, and the launch says why
        close_all(closers)
        raise NetworkUnavailable(f"cannot make a private network ({error.strerror or error})") from None
    except BaseException:
        close_all(closers)
        raise
    order: NetworkCommand = {
        "op": "network",
        "pid": pid,
        "namespaces": namespaces,
        "net": net,
        "nsenter": nsenter,
    }
    return PrivateNetwork(order, closers)


def _restricted() -> str:
    """Why the kernel refuses a user other than root its namespaces, where a setting says (Ubuntu 24.04's AppArmor)."""
    try:
        restricted = Path(_APPARMOR_USERNS).read_text().strip() == "1"
    except OSError:
        restricted = False
    if os.geteuid() == 0 or not restricted:
        return ""
    return " (AppArmor restricts user namespaces to programs it allows: kernel.apparmor_restrict_unprivileged_userns=1)"


def _readable(fd: int) -> bool:
    """Whether `fd` has something to read (or its end) within the ready timeout; poll, not select,
    which cannot watch a descriptor numbered 1024 or more."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(_READY_TIMEOUT_S * 1000))


def _read_line(proc: subprocess.Popen[bytes], what: str) -> bytes:
    assert proc.stdout is not None
    if not _readable(proc.stdout.fileno()):
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
    resolvers = loopback_resolvers()
    argv = [sys.executable, "-I", "-S", HOLDER, *([SLIRP_DNS, *resolvers] if resolvers else [])]
    try:
        holder = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, **_OWN_GROUP
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
        restricted = _restricted()
        fix = "set kernel.apparmor_restrict_unprivileged_userns=0, or launch as root" if restricted else None
        raise NetworkUnavailable(f"{answer['error']}{restricted}, so no private network", fix)
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
                **_OWN_GROUP,
            )
        except OSError as error:
            os.close(exit_w)
            raise NetworkUnavailable(f"cannot run {slirp} ({error.strerror})") from None
        finally:
            os.close(exit_r)
            os.close(ready_w)
        closers.append(_stopper(proc, exit_w))
        try:
            said = os.read(ready_r, 1) if _readable(ready_r) else b""
        finally:
            os.close(ready_r)
        if said != b"1":
            proc.kill()
            proc.wait()
            said_file.seek(0)
            raise _slirp_failure(said_file.read(64 * 1024).decode(errors="replace"))


def _slirp_failure(output: str) -> NetworkUnavailable:
    """Why slirp4netns gave up, from what it printed: its error, not a warning printed after it."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if not line.startswith("WARNING")] or lines or ["it said nothing"]
    why = next((line for line in errors if "/dev/net/tun" in line), errors[-1])[:200]
    fix = None
    if "/dev/net/tun" in why and "ermission denied" in why:
        fix = "let your user open /dev/net/tun, as stock Debian and Ubuntu do: chmod 0666 /dev/net/tun"
    return NetworkUnavailable(f"slirp4netns could not give the private network a way out ({why})", fix)


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


# ---- made ahead, while the launcher starts -----------------------------------------------------

_early: list[threading.Thread] = []
_made: list[PrivateNetwork | NetworkUnavailable] = []
_taking = threading.Lock()  # the launch's network thread and the transport's close may both ask


def start_early() -> None:
    """Make the private network on a thread of its own now; `take_early` hands it to the launch."""

    def make() -> None:
        try:
            _made.append(make_private({**os.environ, "PWD": os.getcwd()}))
        except NetworkUnavailable as why:  # the launch says why, and does not try again
            _made.append(why)
        except Exception as error:  # noqa: BLE001 - whatever it was, the launch tries again and says why
            del error

    if not _early:
        _early.append(threading.Thread(target=make, daemon=True, name="early-network"))
        _early[0].start()


def close_early() -> None:
    """Close the early network if no launch took it (its spec wanted none)."""
    try:
        taken = take_early()
    except NetworkUnavailable:
        return
    if taken is not None:
        taken.close()


def take_early() -> PrivateNetwork | None:
    """The network `start_early` made (once), or None; NetworkUnavailable: why it could not be made."""
    if not _early:
        return None
    _early[0].join()
    with _taking:
        made = _made.pop() if _made else None
    if isinstance(made, NetworkUnavailable):
        raise made
    return made
