"""A gang all on this machine is not a server on the network.

"Another machine" is a network namespace host this test makes (its own address on a bridge; the
launcher's side of the bridge is this machine's address for it). A connection from there to a
task's port must be refused or unanswered while the gang trains, and a control connection from the
same place to a listener of the test's own must succeed, so the probe could pass.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.agent import netns
from launcher.transport import netns_holder, port_firewall
from launcher.transport.local_network import open_local_network
from tests.conftest import launch_cmd, launcher_traceback, local_spec, processes_mentioning, run_launch
from tests.integration.test_netns import launched
from tests.integration.test_train_local import assert_agree, results
from tests.labs.netns import NetnsLab, make_lab, unavailable_reason
from tests.labs.ports import free_port
from tests.labs.waiting import wait_for, wait_for_text
from tests.unit.test_local_network import Task

_CONNECT = (
    "import socket, sys\n"
    "try:\n"
    "    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3).close()\n"
    "    print('connected')\n"
    "except OSError as error:\n"
    "    print(type(error).__name__)\n"
)


@pytest.fixture(scope="module")
def outside(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetnsLab]:
    """Another machine: one namespace host, no sshd."""
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    lab = make_lab(tmp_path_factory.mktemp("outside"), 1, sshd=False)
    try:
        yield lab
    finally:
        lab.close()


def connect_from(enter: list[str], address: str, port: int) -> str:
    """`connected`, or the error's name, for a connection made by a process that `enter` moves elsewhere."""
    argv = [*enter, sys.executable, "-c", _CONNECT, address, str(port)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout.strip()


def other_machine(lab: NetnsLab) -> list[str]:
    return ["nsenter", f"--net=/run/netns/{lab.hosts[0].namespace}"]


def assert_probe_can_pass(lab: NetnsLab) -> None:
    """The control: from the other machine, a listener of this machine's is reached."""
    with socket.socket() as listener:
        listener.bind((lab.launcher_address, 0))
        listener.listen()
        assert connect_from(other_machine(lab), lab.launcher_address, listener.getsockname()[1]) == "connected"


# A task that downloads its data: what it fetched, the resolver it reads, the network it is in.
FETCH = (
    "import os, sys, urllib.request\n"
    "print('resolver', open('/etc/resolv.conf').read().split()[:2])\n"
    "print('fetched', urllib.request.urlopen(sys.argv[1], timeout=20).read().decode().strip())\n"
    "print('network', os.readlink('/proc/self/ns/net'))\n"
)


@contextlib.contextmanager
def serving(lab: NetnsLab, directory: Path) -> Iterator[int]:
    """An HTTP server of `directory` on the other machine, at its address; yields its port."""
    server = subprocess.Popen(
        [*other_machine(lab), sys.executable, "-m", "http.server", "--bind", lab.hosts[0].address, "0"],
        cwd=directory,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert server.stdout is not None
        yield int(server.stdout.readline().split(" port ")[1].split()[0])  # "Serving HTTP on A port P (...)"
    finally:
        server.kill()
        server.wait()


def task_ports(run_dir: Path) -> list[int]:
    hosts = json.loads((run_dir / "preflight.json").read_text())["hosts"]
    return [port for host in hosts for port in host["ports"]]


def net_namespace(pid: int | str) -> str:
    return os.readlink(f"/proc/{pid}/ns/net")


@pytest.mark.tf
def test_no_other_machine_reaches_a_local_gang_that_trains_to_its_end(work: Path, outside: NetnsLab) -> None:
    if shutil.which("slirp4netns") is None:
        pytest.fail("slirp4netns is missing: run the tests through scripts/test.sh, which installs it")
    steps = 1500
    spec = local_spec("private", 2, work / "runs", kind="builtin", steps=steps, checkpoint_every=steps, log_every=10)
    run_dir = work / "runs" / "private"
    with launched(work, spec) as (proc, log):
        wait_for_text(run_dir / "attempt-0" / "worker-1.log", f"step 10/{steps}", 180, lambda: proc.poll() is None)
        tasks = [p for p in processes_mentioning(str(work)) if p.cmdline()[-2:] == ["-m", "worker"]]
        assert tasks, "no worker process found"
        helpers = [" ".join(p.cmdline()) for p in processes_mentioning(str(work))]
        assert any("slirp4netns" in line for line in helpers) and any("netns_holder" in line for line in helpers)
        inside = net_namespace(tasks[0].pid)
        assert inside != net_namespace("self") and {net_namespace(p.pid) for p in tasks} == {inside}
        for port in task_ports(run_dir):
            said = connect_from(other_machine(outside), outside.launcher_address, port)
            assert said in ("ConnectionRefusedError", "TimeoutError"), f"port {port} from another machine: {said}"
            assert connect_from(["nsenter", f"--target={tasks[0].pid}", "--net"], "127.0.0.1", port) == "connected"
        assert_probe_can_pass(outside)
        assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
    output = log.read_text()
    assert not launcher_traceback(output) and "warning:" not in output, output[-3000:]
    assert_agree(results(run_dir, 0), 2, steps)
    lines = json.loads((run_dir / "preflight.json").read_text())["lines"]
    assert any("private network" in line for line in lines), lines


def test_a_task_reaches_out_from_the_private_network(work: Path, outside: NetnsLab) -> None:
    """A script still downloads its data: an HTTP server on the other machine answers it."""
    if shutil.which("slirp4netns") is None:
        pytest.fail("slirp4netns is missing: run the tests through scripts/test.sh, which installs it")
    (work / "data.txt").write_text("the data\n")
    with serving(outside, work) as port:
        (work / "fetch.py").write_text(FETCH)
        url = f"http://{outside.hosts[0].address}:{port}/data.txt"
        done = run_launch(
            ["--local", "1", "--run-root", str(work / "runs"), "--", sys.executable, "fetch.py", url], work
        )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "fetched the data" in done.stdout, done.stdout
    network = next(line.split()[-1] for line in done.stdout.splitlines() if "] network " in line)
    assert network != net_namespace("self")


_LISTENER = (
    "import json, os, socket, time\n"
    "tf = json.loads(os.environ['TF_CONFIG']); task = tf['task']\n"
    "port = int(tf['cluster'][task['type']][task['index']].rsplit(':', 1)[1])\n"
    "server = socket.create_server(('', port), family=socket.AF_INET6, dualstack_ipv6=True)\n"
    "print('listening', port, flush=True)\n"
    "while not os.path.exists('go'):\n"
    "    time.sleep(0.05)\n"
)


def _tool_dir(work: Path, *tools: str) -> str:
    """A PATH of its own holding only `tools`: what a machine without the others has."""
    folder = work / "bin"
    folder.mkdir()
    for tool in tools:
        found = shutil.which(tool)
        assert found is not None, f"{tool} is missing: run the tests through scripts/test.sh, which installs it"
        (folder / tool).symlink_to(found)
    return str(folder)


def _our_tables() -> list[str]:
    listed = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, check=True).stdout
    return [line.split()[-1] for line in listed.splitlines() if "tflaunch_" in line]


def test_as_root_without_slirp4netns_a_firewall_rule_closes_the_ports(work: Path, outside: NetnsLab) -> None:
    if shutil.which("nft") is None:
        pytest.fail("nft is missing: run the tests through scripts/test.sh, which installs nftables")
    before = _our_tables()
    path = _tool_dir(work, "nft")
    (work / "listen.py").write_text(_LISTENER)
    args = ["--local", "1", "--run-root", str(work / "runs"), "--", sys.executable, "listen.py"]
    outcome: dict[str, subprocess.CompletedProcess[str]] = {}
    runner = threading.Thread(target=lambda: outcome.update(done=run_launch(args, work, env={"PATH": path})))
    runner.start()
    try:
        log = work / "runs" / "listen" / "attempt-0" / "worker-0.log"
        wait_for_text(log, "listening", 60, runner.is_alive)
        port = int(log.read_text().split("listening ")[1].split()[0])
        assert len(_our_tables()) == len(before) + 1
        said = connect_from(other_machine(outside), outside.launcher_address, port)
        assert said in ("ConnectionRefusedError", "TimeoutError"), f"port {port} from another machine: {said}"
        assert connect_from([], "127.0.0.1", port) == "connected"  # this machine still reaches it
        assert_probe_can_pass(outside)
    finally:
        (work / "go").touch()
        runner.join(60)
    done = outcome["done"]
    assert done.returncode == 0, done.stdout + done.stderr
    assert "warning:" not in done.stdout + done.stderr, done.stderr
    assert _our_tables() == before


def test_where_nothing_can_close_the_ports_the_console_says_so_once(work: Path) -> None:
    path = _tool_dir(work)  # no slirp4netns, no nft
    args = ["--local", "1", "--run-root", str(work / "runs"), "--", sys.executable, "-c", "print('trained')"]
    done = run_launch(args, work, env={"PATH": path})
    assert done.returncode == 0, done.stdout + done.stderr
    said = done.stdout + done.stderr
    warnings = [line for line in said.splitlines() if "open to other machines" in line]
    assert len(warnings) == 1, said
    port = task_ports(work / "runs" / "local")[0]
    assert f"port {port} is open to other machines" in warnings[0] and "install slirp4netns" in warnings[0]
    checked = run_launch([*args[:4], "--check", "--", *args[5:]], work, env={"PATH": path})
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "OPEN to other machines" in checked.stdout and "no slirp4netns on PATH" in checked.stdout, checked.stdout


def test_a_user_other_than_root_gets_a_private_network_keeping_its_own_ids(tmp_path: Path) -> None:
    """The holder as an ordinary user (uid 43210, which is not the kernel's overflow id 65534 that
    unmapped ids read as): a user namespace that maps only its own ids, a network with its loopback
    up, entered the way the agent enters it (slirp4netns' part needs /dev/net/tun, which is 0666 on
    stock Debian and Ubuntu)."""
    if os.geteuid() != 0 or not os.path.exists("/usr/bin/python3") or shutil.which("setpriv") is None:
        pytest.skip("needs root (to become another user), /usr/bin/python3 and setpriv")
    if Path("/proc/sys/user/max_user_namespaces").read_text().strip() == "0":
        pytest.skip("this kernel lets no user make a user namespace (user.max_user_namespaces = 0)")
    as_user = ["setpriv", "--reuid=43210", "--regid=43211", "--clear-groups", "--"]
    shared = Path(tempfile.mkdtemp(prefix="tflaunch-test-"))
    try:
        shared.chmod(0o755)
        holder_path = shared / "netns_holder.py"
        shutil.copy(netns_holder.__file__, holder_path)
        holder = subprocess.Popen(
            [*as_user, "/usr/bin/python3", "-I", "-S", str(holder_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert holder.stdout is not None
            said = json.loads(holder.stdout.readline())
            assert "error" not in said, said  # this kernel lets users make them (the holder's first test above)
            assert said["namespaces"] == ["user", "net"]
            enter = ["nsenter", f"--target={said['pid']}", "--user", "--net", "--preserve-credentials", "--"]
            probe = (
                "import os, socket\n"
                "server = socket.create_server(('127.0.0.1', 0))\n"
                "socket.create_connection(server.getsockname(), timeout=3).close()\n"
                "print(os.getuid(), os.getgid(), os.readlink('/proc/self/ns/net'))\n"
            )
            done = subprocess.run(
                [*as_user, *enter, "/usr/bin/python3", "-c", probe], capture_output=True, text=True, timeout=30
            )
            assert done.returncode == 0, done.stderr
            uid, gid, network = done.stdout.split()
            assert (int(uid), int(gid)) == (43210, 43211)
            assert network != net_namespace("self")
        finally:
            assert holder.stdin is not None
            holder.stdin.close()
            assert holder.wait(timeout=10) == 0
    finally:
        shutil.rmtree(shared)


def test_as_root_the_agents_command_thread_enters_the_network_and_its_namespaces_outlive_their_holder(
    tmp_path: Path,
) -> None:
    """The command thread's tasks are born inside at no cost; the agent's other threads start theirs
    under nsenter, given the namespaces the agent holds; and a restart after the holder died (killed
    by someone) still starts inside, never outside."""
    if os.geteuid() != 0 or shutil.which("slirp4netns") is None:
        pytest.skip("needs root and slirp4netns")
    network = open_local_network("private", [Task("localhost", free_port())], str(tmp_path))  # type: ignore[list-item]
    assert network is not None and network.order is not None
    argv = [sys.executable, "-c", "import os; print(os.readlink('/proc/self/ns/net'))"]
    seen: dict[str, str] = {}

    def in_command_thread(key: str) -> None:
        seen[f"{key} argv"] = " ".join(netns.wrapped(argv))
        seen[key] = subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()

    def first() -> None:
        assert network.order is not None
        netns.enter(network.order)
        in_command_thread("first")

    def started_elsewhere(key: str) -> None:
        wrapped = netns.wrapped(argv)
        seen[key] = subprocess.run(wrapped, capture_output=True, text=True, check=True).stdout
        seen[key] = seen[key].strip()

    try:
        thread = threading.Thread(target=first)
        thread.start()
        thread.join(30)
        holder = network.order["pid"]
        private = net_namespace(holder)
        assert seen["first"] == private != net_namespace("self")
        assert "nsenter" not in seen["first argv"]
        started_elsewhere("other thread")
        assert seen["other thread"] == private
        os.kill(holder, signal.SIGKILL)
        wait_for(lambda: not os.path.exists(f"/proc/{holder}/ns/net"), 10, "the holder gone")
        started_elsewhere("after the holder")
        assert seen["after the holder"] == private
    finally:
        netns.forget()
        network.close()


def _dns_answer(query: bytes, address: str) -> bytes:
    """A reply to a DNS query: its one question answered with an A record for `address`."""
    question_end = query.index(b"\0", 12) + 5  # the name, then its type and class
    answer = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 60, 4) + socket.inet_aton(address)
    return query[:2] + b"\x81\x80" + query[4:6] + b"\x00\x01\x00\x00\x00\x00" + query[12:question_end] + answer


def test_where_the_resolver_is_on_the_machines_loopback_a_task_still_resolves_names(
    work: Path, outside: NetnsLab
) -> None:
    """As on a desktop with systemd-resolved (nameserver 127.0.0.53): the tasks read this machine's
    resolv.conf as it is, and the private network answers at its loopback resolver address by asking
    slirp4netns' resolver, which asks this machine's. Here the launcher runs in a mount namespace
    whose resolv.conf names a resolver of the test's own on a loopback address."""
    if shutil.which("slirp4netns") is None or shutil.which("unshare") is None:
        pytest.fail("slirp4netns and unshare are needed: run the tests through scripts/test.sh")
    resolver = f"127.{secrets.randbelow(200) + 20}.{secrets.randbelow(250) + 1}.53"
    dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        dns.bind((resolver, 53))
    except OSError as error:
        pytest.skip(f"cannot serve DNS on {resolver}:53 here ({error})")
    host = outside.hosts[0].address

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                query, peer = dns.recvfrom(512)
                dns.sendto(_dns_answer(query, host), peer)

    threading.Thread(target=serve, daemon=True).start()
    (work / "resolv.conf").write_text(f"nameserver {resolver}\n")
    (work / "data.txt").write_text("named data\n")
    try:
        with serving(outside, work) as port:
            (work / "fetch.py").write_text(FETCH)
            url = f"http://data.example.test:{port}/data.txt"
            launch = " ".join(
                launch_cmd("--local", "1", "--run-root", str(work / "runs"), "--", sys.executable, "fetch.py", url)
            )
            script = f"mount --bind {work / 'resolv.conf'} /etc/resolv.conf && exec {launch}"
            done = subprocess.run(
                ["unshare", "--mount", "--propagation", "slave", "sh", "-c", script],
                cwd=work,
                capture_output=True,
                text=True,
                timeout=120,
            )
    finally:
        dns.close()
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"['nameserver', '{resolver}']" in done.stdout and "fetched named data" in done.stdout, done.stdout
    assert Path("/etc/resolv.conf").read_text() != f"nameserver {resolver}\n"  # the machine's own is as it was


def test_a_rule_left_by_a_launcher_killed_outright_is_removed_by_the_next_local_launch(work: Path) -> None:
    """Whatever that launch's own network: a rule left behind would refuse the same ports to it."""
    if os.geteuid() != 0 or shutil.which("nft") is None:
        pytest.skip("needs root and nft")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    stale = f"tflaunch_{gone.pid}_1"  # a launcher that is no more
    port = free_port()
    rule = (
        f"table inet {stale} {{\n  chain input {{\n    type filter hook input priority -1;\n"
        f'    iifname != "lo" tcp dport {{ {port} }} reject with tcp reset\n  }}\n}}\n'
    )
    subprocess.run(["nft", "-f", "-"], input=rule, text=True, check=True)
    os.makedirs(port_firewall.MARKS, mode=0o700, exist_ok=True)
    mark = Path(port_firewall.MARKS) / stale  # what that launcher left with its table
    mark.touch()
    try:
        assert stale in _our_tables()
        args = ["--local", "1", "--host-network", "--run-root", str(work / "runs"), "--", sys.executable, "-c", "pass"]
        done = run_launch(args, work)
        assert done.returncode == 0, done.stdout + done.stderr
        assert stale not in _our_tables() and not mark.exists()
    finally:
        mark.unlink(missing_ok=True)
        subprocess.run(["nft", "delete", "table", "inet", stale], capture_output=True, check=False)
