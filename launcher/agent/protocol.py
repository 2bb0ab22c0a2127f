"""The host protocol: every command the launcher sends a host's agent, every probe request, and the
agent's own messages, as TypedDicts. Standard library only, and importable by any python 3 the
agent runs on: shipped to every host with the agent, and imported by the launcher's side
(launcher/transport/, launcher/preflight/), so mypy checks both halves against one description.

Commands travel as one JSON object per line on the agent's standard input (under Slurm each may
carry `"to": RANK`, the agent it is for); the agent answers on framed lines (launcher/agent/frames.py).
Each side dispatches from one table keyed by `op`: launcher/agent/main.py's ORDERS and
launcher/agent/probe.py's PROBES.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict, Union

# --- launcher -> agent: commands ------------------------------------------------------------------


class Ping(TypedDict):
    """The launcher still hears the agent (the agent watches for silence)."""

    op: Literal["ping"]


class Bye(TypedDict):
    """Stop every task and spare, and leave."""

    op: Literal["bye"]


class ProbeCommand(TypedDict):
    """A preflight question, answered by an `A id` frame (launcher/agent/probe.py)."""

    op: Literal["probe"]
    id: int
    request: ProbeRequest


class ClusterCommand(TypedDict):
    """The trainers' cluster, packed (launcher/agent/cluster.py): once per host."""

    op: Literal["cluster"]
    packed: dict[str, Any]


class Shared(TypedDict):
    """What a start's tasks share: their environment, command and working directory."""

    env: dict[str, str]
    argv: list[str]
    cwd: str


class CommonCommand(Shared):
    """A start's shared part, named by its content, sent once where one write reaches many agents."""

    op: Literal["common"]
    id: str


class _StartTask(TypedDict):
    id: int
    name: str
    type: str
    index: int
    env: dict[str, str]  # what differs from the shared environment


class StartTask(_StartTask, total=False):
    """One task of a start; the optional keys say only what differs from the shared part."""

    argv: list[str]
    cwd: str
    address: str  # a side-car's own address (its TF_CONFIG lists only itself)
    standby: int  # the standby made for it, which it takes over
    fork: bool  # the runtime may fork its next attempt's spare (worker/forked_spare.py)


class _Start(TypedDict):
    op: Literal["start"]
    tasks: list[StartTask]


class StartCommand(_Start, total=False):
    """The host's tasks of one attempt: with the shared part inline (env, argv, cwd) or named (common)."""

    common: str
    env: dict[str, str]
    argv: list[str]
    cwd: str


class StandbyTask(TypedDict):
    id: int
    name: str
    env: dict[str, str]


class StandbyCommand(TypedDict):
    """Warm spares: one per task, all of one python and preload list, waiting for a start to take them."""

    op: Literal["standby"]
    env: dict[str, str]
    cwd: str
    python: str
    preload: list[str]
    tasks: list[StandbyTask]


class DropCommand(TypedDict):
    """Standbys no start will take."""

    op: Literal["drop"]
    ids: list[int]


class SignalCommand(TypedDict):
    """A signal to one task's process group (`id`), or to every one (`id` null)."""

    op: Literal["signal"]
    id: int | None
    sig: int


class NetworkCommand(TypedDict):
    """A local agent's tasks and spares start in the gang's private network, held by process `pid`
    in `namespaces` (launcher/transport/private_network.py); `net` names that network as
    /proc/PID/ns/net reads (`net:[INODE]`). The agent opens them at once (they then live as long as
    it does); as root its command thread enters the network itself, otherwise each process starts
    under `nsenter` (launcher/agent/netns.py)."""

    op: Literal["network"]
    pid: int
    namespaces: list[str]
    net: str
    nsenter: str


Command = Union[
    Ping,
    Bye,
    ProbeCommand,
    ClusterCommand,
    CommonCommand,
    StartCommand,
    StandbyCommand,
    DropCommand,
    SignalCommand,
    NetworkCommand,
]

# --- launcher -> agent: probe requests --------------------------------------------------------------


class _Info(TypedDict):
    op: Literal["info"]
    workdir: str
    checkpoint_dir: str
    need_worker: bool


class InfoRequest(_Info, total=False):
    """What the host has: python, TensorFlow, the runtime, the directories, the tasks' programs, GPUs."""

    runtime_marks: dict[str, str]
    gpus: bool
    programs: list[str]
    scripts: list[str]
    command_modules: list[str]
    modules: list[str]
    functions: list[str]
    pythonpath: str | None
    startup_env: dict[str, str]
    path: str | None


class _Marker(TypedDict):
    op: Literal["write_marker", "read_marker", "remove"]
    path: str


class MarkerRequest(_Marker, total=False):
    """Write, read or remove a marker file: whether a checkpoint directory is shared."""

    token: str


class BindRequest(TypedDict):
    """Bind the tasks' ports, and accept whatever connects until `release`."""

    op: Literal["bind"]
    ports: list[int]


class ConnectRequest(TypedDict):
    """Open a TCP connection to each `[host, port]`."""

    op: Literal["connect"]
    addresses: list[list[Any]]
    timeout: float


class ReleaseRequest(TypedDict):
    """Close what `bind` opened."""

    op: Literal["release"]


class StacksRequest(TypedDict):
    """Every thread's stack of these running tasks (`ids` null: all), taken without stopping them
    (launcher/agent/stacks.py); answered as {"stacks": {ID: {"via", "processes" or "text", or "why"}}}."""

    op: Literal["stacks"]
    ids: list[int] | None


ProbeRequest = Union[InfoRequest, MarkerRequest, BindRequest, ConnectRequest, ReleaseRequest, StacksRequest]
Answer = dict[str, Any]  # a probe's answer: its findings, or {"error": ...}

# --- agent -> launcher: the agent's own messages (`A 0` frames) -----------------------------------


class Ready(TypedDict):
    """The agent's first frame: who and where it is."""

    event: Literal["ready"]
    pid: int
    hostname: str
    python: str
    executable: str
    node: str | None  # the Slurm node it runs on
    step: str | None  # the Slurm job step, as JOB.STEP
    rank: int | None  # its SLURM_PROCID, when commands are addressed


class Alive(TypedDict):
    """A few times per liveness timeout: the agent, and how many tasks it runs."""

    event: Literal["alive"]
    tasks: int
