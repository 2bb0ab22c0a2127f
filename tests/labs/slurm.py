"""A real Slurm on this machine: munged, slurmctld, and one slurmd per network-namespace node.

Debian's `slurm-wlm` and `munge`, everything under one private directory: a munge key and daemon
of its own (its socket named in slurm.conf, so no system munged is touched), a controller in this
machine's namespace on a free port, and `node1`, `node2`, ... each a slurmd in a namespace of
`tests/labs/netns.py` with its own address and host name (a UTS namespace), so a job's TF_CONFIG
really spans two addresses. Clients (`sbatch`, `srun`, `scontrol`, the launcher) find it through
`SLURM_CONF` in `env()`. `close()` stops every daemon by its PID and removes the namespaces,
pass or fail. Needs root, slurm-wlm and munge (scripts/test.sh installs them).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.labs.netns import NetnsLab, make_lab
from tests.labs.netns import unavailable_reason as netns_unavailable
from tests.labs.ports import free_port

DAEMONS = ("/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/bin/sbatch", "/usr/bin/srun")


def unavailable_reason() -> str | None:
    """Why a Slurm lab cannot be made here, or None when it can."""
    reason = netns_unavailable()
    if reason is not None:
        return reason
    for path in DAEMONS:
        if not os.path.exists(path):
            return f"a Slurm lab needs {path} (scripts/test.sh installs slurm-wlm and munge)"
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return "a Slurm lab needs the 'munge' user (the munge package creates it)"
    return None


@dataclass
class SlurmLab:
    directory: Path
    net: NetnsLab
    nodes: list[str]
    daemons: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def conf(self) -> Path:
        return self.directory / "slurm.conf"

    def env(self, **extra: str) -> dict[str, str]:
        """The environment a client of this cluster runs with."""
        return {**os.environ, "SLURM_CONF": str(self.conf), **extra}

    def run(self, *argv: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, env=self.env(), capture_output=True, text=True, check=check, timeout=timeout)

    def job_state(self, job_id: str) -> dict[str, str]:
        """`scontrol show job` as a dict (JobState, ExitCode, Restarts, ...); {} once forgotten."""
        done = self.run("scontrol", "show", "job", "-o", job_id, check=False)
        fields: dict[str, str] = {}
        for word in done.stdout.split():
            key, _, value = word.partition("=")
            fields.setdefault(key, value)
        return fields

    def wait_job(self, job_id: str, states: tuple[str, ...], timeout: float) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while True:
            fields = self.job_state(job_id)
            if fields.get("JobState") in states:
                return fields
            assert time.monotonic() < deadline, f"job {job_id} never reached {states}: {fields}"
            time.sleep(0.2)

    def node_processes(self) -> list[str]:
        """Command lines of everything in the node namespaces but the slurmd daemons."""
        daemons = {d.pid for d in self.daemons}
        return [line for host in self.net.hosts for line in _commands(host.task_pids(), daemons)]

    def _start(self, argv: list[str], log: str, **popen: object) -> subprocess.Popen[bytes]:
        with open(self.directory / "log" / log, "ab") as handle:
            proc = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, **popen)  # type: ignore[call-overload]
        self.daemons.append(proc)
        return proc

    def close(self) -> None:
        for proc in reversed(self.daemons):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in reversed(self.daemons):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        self.net.close()  # kills whatever a job left in a node, then removes the namespaces
        shutil.rmtree(self.directory, ignore_errors=True)
        remove_nodes_scratch(self.nodes)


def remove_nodes_scratch(nodes: list[str]) -> list[str]:
    """The scratch directories the nodes' agents left in the /tmp they share with this machine (a node killed
    for good takes its agent with it): each names its node as its host, so this host's agents never sweep it.
    Only those whose lock is free (their agent is gone). Returns what was removed."""
    import fcntl

    from launcher.agent.scratch import HELD, PREFIX, remove

    removed = []
    for entry in os.scandir(tempfile.gettempdir()):
        if not entry.name.startswith(PREFIX) or not entry.is_dir(follow_symlinks=False):
            continue
        try:
            fd = os.open(os.path.join(entry.path, HELD), os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:  # no lock file: not an agent's of ours
            continue
        try:
            if os.pread(fd, 256, 0).decode("utf-8", "replace") not in nodes:
                continue
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # its agent is alive
            continue
        finally:
            os.close(fd)
        remove(entry.path)
        removed.append(entry.path)
    return removed


def _commands(pids: list[int], skip: set[int]) -> list[str]:
    import psutil

    alive = []
    for pid in pids:
        if pid in skip:
            continue
        try:
            proc = psutil.Process(pid)
            if proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(" ".join(proc.cmdline())[:200])
        except psutil.NoSuchProcess:  # exited while we looked
            continue
    return alive


def _config(lab: SlurmLab, controller_port: int) -> str:
    d = lab.directory
    nodes = "\n".join(
        f"NodeName={name} NodeAddr={host.address} CPUs=2 RealMemory=4000 State=UNKNOWN"
        for name, host in zip(lab.nodes, lab.net.hosts, strict=True)
    )
    return f"""ClusterName=tflaunch
SlurmctldHost={socket.gethostname().split(".")[0]}({lab.net.launcher_address})
SlurmctldPort={controller_port}
SlurmdPort=6818
AuthType=auth/munge
AuthInfo=socket={d}/munge/munge.socket
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
SlurmUser=root
ReturnToService=2
MpiDefault=none
JobRequeue=1
KillWait=20
MinJobAge=600
{nodes}
PartitionName=debug Nodes={",".join(lab.nodes)} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
"""


def make_slurm_lab(count: int = 2) -> SlurmLab:
    """A controller and `count` nodes, all up and idle; the caller must `close()` it."""
    directory = Path(tempfile.mkdtemp(prefix="tflaunch-slurm-"))
    directory.chmod(0o755)  # munged runs as 'munge' and must reach its own directory below
    net = make_lab(directory / "net", count, sshd=False)
    lab = SlurmLab(directory, net, [f"node{i}" for i in range(1, count + 1)])
    try:
        for sub in ("log", "state", "spool"):
            (directory / sub).mkdir()
        munge_dir = directory / "munge"
        munge_dir.mkdir()
        munge_dir.chmod(0o711)  # munged: clients must reach its socket, nobody may list the key
        key = munge_dir / "munge.key"
        subprocess.run(["mungekey", "--create", f"--keyfile={key}"], check=True, capture_output=True)
        user = pwd.getpwnam("munge")
        for path in (munge_dir, key):
            os.chown(path, user.pw_uid, user.pw_gid)
        lab._start(
            [
                "/usr/sbin/munged",
                "--foreground",
                f"--socket={munge_dir}/munge.socket",
                f"--key-file={key}",
                f"--pid-file={munge_dir}/munged.pid",
                f"--log-file={munge_dir}/munged.log",
                f"--seed-file={munge_dir}/munged.seed",
            ],
            "munged.out",
            user=user.pw_uid,
            group=user.pw_gid,
        )
        _wait(lambda: (munge_dir / "munge.socket").exists(), "munged to listen", lab)
        lab.conf.write_text(_config(lab, free_port("0.0.0.0")))
        lab._start(["/usr/sbin/slurmctld", "-D", "-c", "-i", "-f", str(lab.conf)], "slurmctld.out", env=lab.env())
        for name, host in zip(lab.nodes, net.hosts, strict=True):
            lab._start(
                [
                    "nsenter",
                    f"--net=/run/netns/{host.namespace}",
                    "unshare",
                    "--uts",
                    "sh",
                    "-c",
                    f'hostname {name} && exec /usr/sbin/slurmd -D -f "$SLURM_CONF" -N {name}',
                ],
                f"slurmd-{name}.out",
                env=lab.env(),
            )
        _wait(lambda: _all_idle(lab), "every node to be idle", lab, timeout=60)
    except BaseException:
        lab.close()
        raise
    return lab


def _all_idle(lab: SlurmLab) -> bool:
    done = lab.run("sinfo", "-h", "-N", "-o", "%N %t", check=False)
    states = dict(line.split() for line in done.stdout.splitlines() if len(line.split()) == 2)
    return all(states.get(name) == "idle" for name in lab.nodes)


def _wait(ready: object, what: str, lab: SlurmLab, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not ready():  # type: ignore[operator]
        for proc in lab.daemons:
            if proc.poll() is not None:
                logs = "\n".join(p.read_text(errors="replace")[-1500:] for p in (lab.directory / "log").iterdir())
                raise RuntimeError(f"a Slurm daemon exited while waiting for {what}: {proc.args}\n{logs}")
        if time.monotonic() > deadline:
            logs = "\n".join(p.read_text(errors="replace")[-1500:] for p in (lab.directory / "log").iterdir())
            raise RuntimeError(f"timed out waiting for {what}\n{logs}")
        time.sleep(0.2)


def lab_or_skip(count: int) -> Iterator[SlurmLab]:
    """A module fixture's body: a lab of `count` nodes for the tests, skipped where Slurm cannot run."""
    import pytest

    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    lab = make_slurm_lab(count)
    try:
        yield lab
    finally:
        lab.close()


def cancel_left_jobs(lab: SlurmLab) -> list[str]:
    """Cancel every job still in the queue; the ids of those it found."""
    queued = lab.run("squeue", "-h", "-o", "%i").stdout.split()
    for job in queued:
        lab.run("scancel", job, check=False)
    return queued
