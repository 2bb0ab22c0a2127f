"""The host agent: one process per host per launch, the launcher's hands on that host.

Started through the bootstrap (launcher/agent/bootstrap.py) over whatever channel reaches the
host (a local pipe, one SSH session, one task of a Slurm step per node), it answers the preflight,
starts the host's tasks and their warm spares, forwards their output and events as frames
(launcher/agent/frames.py) and obeys commands, one JSON object per line on its standard input: ping,
probe, cluster, common, start, standby, drop, signal and bye, each described in
launcher/agent/protocol.py and handled through ORDERS below.

Only the host's part of a plan reaches it, never on a command line: the cluster once, what its
tasks share once, then per task what differs. Each task's TF_CONFIG is built here. Under
Slurm every node's agent reads the same broadcast input, and a command with `"to": RANK` is for
the agent whose SLURM_PROCID is RANK alone.

It reports `alive` a few times per liveness timeout, and it kills every task and spare, removes
its scratch directory and exits when its input ends (the launcher or the connection is gone) or,
where it watches for silence, when no line came for the liveness timeout (a partition or a frozen
launcher closes nothing). SIGTERM and SIGINT are for the tasks, not for it; SIGHUP ends it like
the end of its input. An agent killed outright cannot clean up: the next agent of its user on the
host removes what it left (launcher/agent/scratch.py).
"""

from __future__ import annotations

import gc
import json
import os
import queue
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, cast

from launcher.agent import cluster, frames, netns, probe, scratch, spawn, usage
from launcher.agent.host_python import host_facts, python_version
from launcher.agent.keeper import Keeper
from launcher.agent.keeper import start as start_keeper
from launcher.agent.protocol import (
    Alive,
    Bye,
    ClusterCommand,
    CommonCommand,
    DropCommand,
    NetworkCommand,
    ProbeCommand,
    Ready,
    SignalCommand,
    StandbyCommand,
    StartCommand,
)
from launcher.agent.standby import LATE_KEYS
from launcher.agent.tasks import Tasks
from worker.contract import ALIVE, ENV_PREFIX, USAGE

BEATS_PER_TIMEOUT = 4  # alive reports (and silence checks) per liveness timeout
STATE_POLL_S = 0.5  # how often a task's state (stopped or running) is read


def _gpu_slots(env: dict[str, str]) -> None:
    """In a Slurm step the spec's GPU ids are slots of the devices Slurm gave the step: map them."""
    step = [g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g]
    slots = env.get("CUDA_VISIBLE_DEVICES")
    if os.environ.get("SLURM_STEP_ID") is not None and step and slots:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(step[int(i)] for i in slots.split(",") if i)


class Agent:
    """Lifecycle: `serve()` reads commands until the input ends; `leave()` (once, from any thread)
    kills everything, removes the scratch directory and exits the process."""

    def __init__(self, settings: dict[str, Any], keeper: Keeper | None = None) -> None:
        self._out = sys.stdout.buffer
        self.keeper = keeper
        self._write_lock = threading.Lock()
        self._leaving = threading.Lock()
        self.liveness_s: float | None = settings.get("liveness_s")
        self.watch_silence = bool(settings.get("watch_silence", True))
        self.spare_code: dict[str, str] = settings.get("spare") or {}
        self.rank = int(os.environ["SLURM_PROCID"]) if settings.get("addressed") else None
        self.heard = time.monotonic()
        self.scratch, self._held = scratch.make()  # the lock is let go when the process ends
        self.task_tmp = os.path.join(self.scratch, "tmp")
        os.mkdir(self.task_tmp, 0o700)
        self.cluster: dict[str, list[str]] = {}
        self.commons: dict[str, dict[str, Any]] = {}  # what a start command's tasks share, by name
        self.tasks = Tasks(self.send, self.scratch, keeper)

    def send(self, frame: bytes) -> None:
        with self._write_lock:
            try:
                self._out.write(frame)
                self._out.flush()
            except (OSError, ValueError):  # the channel is gone: nobody is left to report to
                threading.Thread(target=self.leave, daemon=True).start()

    def hello(self) -> None:
        job, step = os.environ.get("SLURM_JOB_ID"), os.environ.get("SLURM_STEP_ID")
        self.send(b"\n")  # ends whatever a wrapper of python printed first, so the frame starts a line
        ready: Ready = {
            "event": "ready",
            "pid": os.getpid(),
            "hostname": socket.gethostname(),
            "python": python_version(),
            "executable": sys.executable,
            "node": os.environ.get("SLURMD_NODENAME"),
            "step": f"{job}.{step}" if job and step else None,
            "rank": self.rank,
        }
        self.send(frames.agent_frame(dict(ready)))

    def serve(self) -> None:
        """Read commands on a thread of their own, so the launcher stays heard while a start waits
        for its spares; obey them in order here (a signal must not overtake the start it is for)."""
        orders: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._listen, args=(orders,), daemon=True, name="commands").start()
        while (command := orders.get()) is not None:
            self.obey(command)
        self.leave()

    def _listen(self, orders: queue.Queue[dict[str, Any] | None]) -> None:
        for raw in sys.stdin.buffer:
            self.heard = time.monotonic()
            try:
                command = json.loads(raw)
            except (ValueError, RecursionError):  # a garbled line must not stop the tasks
                continue
            if not isinstance(command, dict):
                continue
            to = command.get("to")
            if to is not None and to != self.rank:
                continue
            if command.get("op") == "ping":
                continue
            if command.get("op") == "bye":
                self.leave()  # at once, even while a start is under way
            orders.put(command)
        orders.put(None)

    def obey(self, command: dict[str, Any]) -> None:
        handler = ORDERS.get(str(command.get("op")))
        if handler is not None:  # an op this agent does not know (a newer launcher's): ignored
            handler(self, cast(Any, command))

    def _probe_aside(self, command: ProbeCommand) -> None:
        threading.Thread(target=self._probe, args=(command,), daemon=True).start()

    def _cluster(self, command: ClusterCommand) -> None:
        self.cluster = cluster.unpack(command["packed"])

    def _common(self, command: CommonCommand) -> None:
        self.commons[str(command["id"])] = dict(command)

    def _start_named(self, command: StartCommand) -> None:
        self._start({**self.commons.get(str(command.get("common")), {}), **command})

    def _network(self, command: NetworkCommand) -> None:
        netns.enter(command)

    def _drop(self, command: DropCommand) -> None:
        self.tasks.drop([int(i) for i in command.get("ids", [])])

    def _signal(self, command: SignalCommand) -> None:
        ident = command.get("id")
        self.tasks.signal(int(ident) if ident is not None else None, int(command["sig"]))

    def _bye(self, command: Bye) -> None:
        self.leave()

    def _probe(self, command: ProbeCommand) -> None:
        request: dict[str, Any] = dict(command.get("request") or {})
        answer: dict[str, Any]
        try:
            if request.get("op") == "stacks":  # of the tasks: the one question about them, not about the host
                ids = request.get("ids")
                answer = {"stacks": self.tasks.stacks([int(i) for i in ids] if isinstance(ids, list) else None)}
            else:
                answer = probe.handle(request)
        except Exception as error:  # noqa: BLE001 - every failure must become an answer, not a hang
            answer = {"error": f"{type(error).__name__}: {error}"}
        self.send(frames.agent_frame(answer, int(command.get("id", 0))))

    def _base_env(self, command: Mapping[str, Any]) -> dict[str, str]:
        """The host's environment with the spec's on top; temporary files go to the agent's scratch
        directory (removed when it leaves, so a task killed mid-save leaves no copy behind) unless
        the spec names a TMPDIR. The launcher's own variables come from the launcher alone: one the
        host's environment holds (a shell's stray TFLAUNCH_FAULT, an outer launch's) is dropped."""
        host = {key: value for key, value in os.environ.items() if not key.startswith(ENV_PREFIX)}
        return {**host, "TMPDIR": self.task_tmp, **(command.get("env") or {})}

    def _start(self, command: dict[str, Any]) -> None:
        base = self._base_env(command)
        for task in command["tasks"]:
            env = {**base, **(task.get("env") or {})}
            env["TF_CONFIG"] = cluster.tf_config(self.cluster, task["type"], int(task["index"]), task.get("address"))
            _gpu_slots(env)
            cwd = task.get("cwd", command.get("cwd"))
            self.tasks.start(
                int(task["id"]),
                str(task["name"]),
                [str(a) for a in task.get("argv", command.get("argv"))],
                env,
                os.path.expanduser(cwd) if cwd else None,
                task.get("standby"),
                bool(task.get("fork")),
            )

    def _standby(self, command: StandbyCommand) -> None:
        base = self._base_env(command)
        order = {
            "python": command["python"],
            "preload": command.get("preload", []),
            "source": self.spare_code.get("source", ""),
            "bootstrap": self.spare_code.get("bootstrap", ""),
        }
        cwd = command.get("cwd")
        for task in command["tasks"]:
            env = {k: v for k, v in {**base, **(task.get("env") or {})}.items() if k not in LATE_KEYS}
            self.tasks.prepare(int(task["id"]), order, env, os.path.expanduser(cwd) if cwd else None, task.get("name"))

    def beat(self) -> None:
        """Report alive every liveness period, and each task's stopped state as it changes."""
        period = self.liveness_s / BEATS_PER_TIMEOUT if self.liveness_s else None
        next_alive = time.monotonic()
        while True:
            time.sleep(min(STATE_POLL_S, period or STATE_POLL_S))
            self.tasks.check_states()
            if period is not None and time.monotonic() >= next_alive:
                next_alive = time.monotonic() + period
                alive: Alive = {"event": ALIVE, "tasks": self.tasks.counts()}
                self.send(frames.agent_frame(dict(alive)))

    def measure(self) -> None:
        """Each task's CPU, memory and GPU use, a few times a minute (launcher/agent/usage.py)."""
        sampler = usage.Sampler()
        while True:
            time.sleep(usage.USAGE_S)
            groups = self.tasks.groups()
            if groups:
                self.send(frames.agent_frame({"event": USAGE, "tasks": sampler.sample(groups)}))

    def watch(self) -> None:
        """Silence for the liveness timeout: the launcher, or the network to it, is gone. Never
        writes, so a channel that no longer drains cannot hold it up."""
        assert self.liveness_s is not None
        while True:
            time.sleep(min(1.0, self.liveness_s / BEATS_PER_TIMEOUT))
            if time.monotonic() - self.heard > self.liveness_s:
                self.leave()

    def leave(self) -> None:
        if not self._leaving.acquire(blocking=False):
            return  # another thread is at it
        try:
            self.tasks.kill_all()
            if self.keeper is not None:
                self.keeper.release()
        finally:
            scratch.remove(self.scratch)  # its lock file last: a later agent retries what is left
            os._exit(0)


def _ignore(signum: int, frame: Any) -> None:
    """A handler, not SIG_IGN: what a task inherits is its default again after exec."""


def _raise_open_files_limit() -> None:
    """Three pipes a task: a host of many tasks needs more than the usual soft limit of 1024."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 1 << 20, hard))
    except (ImportError, ValueError, OSError):  # not raised: fine for the usual few tasks
        pass


# What the agent does for each command of launcher/agent/protocol.py (a ping only counts as heard).
ORDERS: dict[str, Callable[[Agent, Any], None]] = {
    "probe": Agent._probe_aside,
    "cluster": Agent._cluster,
    "common": Agent._common,
    "start": Agent._start_named,
    "standby": Agent._standby,
    "drop": Agent._drop,
    "signal": Agent._signal,
    "network": Agent._network,
    "bye": Agent._bye,
}


def main(settings: dict[str, Any]) -> int:
    keeper = settings.pop("keeper") if "keeper" in settings else start_keeper()  # the bootstrap forks it first
    gc.freeze()  # the code loaded so far is never traversed by a collection again
    agent = Agent(settings, keeper)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _ignore)
    signal.signal(signal.SIGHUP, lambda signum, frame: threading.Thread(target=agent.leave).start())
    _raise_open_files_limit()
    agent.hello()
    threading.Thread(target=host_facts, daemon=True, name="facts").start()
    threading.Thread(target=spawn.setpriv, daemon=True, name="setpriv").start()  # should the keeper die
    threading.Thread(target=scratch.sweep, args=(agent.scratch,), daemon=True, name="sweep").start()
    threading.Thread(target=agent.beat, daemon=True, name="beat").start()
    threading.Thread(target=agent.measure, daemon=True, name="usage").start()
    if agent.liveness_s and agent.watch_silence:
        threading.Thread(target=agent.watch, daemon=True, name="watch").start()
    agent.serve()
    return 0
