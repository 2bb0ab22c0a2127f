"""What a host's agent is sent for one attempt: a pure function of the host's task launches.

Only the host's part of the plan: what its tasks share (environment, argv, working directory)
once, then per task what differs (its name, its TF task, a few variables). The cluster travels
separately, packed, once per host (launcher/agent/cluster.py). The result and error file
variables are the agent's to set (it mirrors them from its scratch directory), so they are not
sent. No sockets, no processes: tested and benchmarked on simulated fleets.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from launcher.agent import cluster
from launcher.agent.protocol import (
    ClusterCommand,
    CommonCommand,
    Shared,
    StandbyCommand,
    StandbyTask,
    StartCommand,
    StartTask,
)
from launcher.plan import WORKER_MODULE, TaskLaunch
from worker.contract import FAULT_VAR, MIRRORED_FILE_VARS, TASK_VAR

# What names one task rather than the attempt: never part of what a host's tasks share, even on a
# host of one task, so hosts alike send alike shared parts (one copy for a whole Slurm step).
_OWN_KEYS = frozenset({TASK_VAR, FAULT_VAR, "CUDA_VISIBLE_DEVICES"})


def _shared(values: Sequence[Mapping[str, str]]) -> dict[str, str]:
    first = values[0]
    return {
        key: value
        for key, value in first.items()
        if key not in _OWN_KEYS and all(other.get(key) == value for other in values[1:])
    }


def start_command(launches: Sequence[TaskLaunch], ids: Sequence[int], standbys: Mapping[str, int]) -> StartCommand:
    """The `start` command for one host's tasks of one attempt. `ids[i]` names launches[i] on the
    channel; `standbys` maps a task's name to the standby made for it, which it takes over (and
    whose id it keeps)."""
    common = _shared([launch.env for launch in launches])
    argv, cwd = launches[0].argv, launches[0].cwd
    tasks = []
    for launch, ident in zip(launches, ids, strict=True):
        entry: StartTask = {
            "id": ident,
            "name": launch.name,
            "type": launch.task_type,
            "index": launch.task_index,
            "env": {k: v for k, v in launch.env.items() if k not in common and k not in MIRRORED_FILE_VARS},
        }
        if launch.sidecar:
            entry["address"] = launch.address
        if launch.argv != argv:
            entry["argv"] = launch.argv
        if launch.cwd != cwd:
            entry["cwd"] = launch.cwd
        if launch.name in standbys:
            entry["standby"] = standbys[launch.name]
        if launch.preload and not launch.sidecar and launch.argv[1:] == ["-P", "-m", WORKER_MODULE]:
            entry["fork"] = True  # the runtime forks its next attempt's spare after its import
        tasks.append(entry)
    env = {k: v for k, v in common.items() if k not in MIRRORED_FILE_VARS}
    return {"op": "start", "env": env, "argv": argv, "cwd": cwd, "tasks": tasks}


def split_start(command: StartCommand) -> tuple[CommonCommand, StartCommand]:
    """A start command as what its tasks share (`common`, named by its content) and the rest, which
    refers to it: where one write reaches many agents, the shared part is sent once."""
    shared: Shared = {"env": command["env"], "argv": command["argv"], "cwd": command["cwd"]}
    name = hashlib.sha1(json.dumps(shared, sort_keys=True).encode()).hexdigest()[:16]
    common: CommonCommand = {"op": "common", "id": name, **shared}
    return common, {"op": "start", "tasks": command["tasks"], "common": name}


def standby_command(launches: Sequence[TaskLaunch], ids: Sequence[int]) -> StandbyCommand:
    """The `standby` command: one warm spare per task (all of one host, with the same python and
    preload list), started with the task's environment as it is known before the next attempt."""
    common = _shared([launch.env for launch in launches])
    tasks: list[StandbyTask] = [
        {"id": ident, "name": launch.name, "env": {k: v for k, v in launch.env.items() if k not in common}}
        for launch, ident in zip(launches, ids, strict=True)
    ]
    first = launches[0]
    return {
        "op": "standby",
        "python": first.python,
        "preload": list(first.preload),
        "env": common,
        "cwd": first.cwd,
        "tasks": tasks,
    }


def cluster_command(launch: TaskLaunch) -> ClusterCommand:
    return {"op": "cluster", "packed": cluster.pack(dict(launch.cluster))}


def size(command: Mapping[str, Any]) -> int:
    """Bytes of the command on the wire."""
    return len(json.dumps(command)) + 1
