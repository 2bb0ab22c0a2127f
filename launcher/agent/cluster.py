"""TF_CONFIG's `cluster`, packed so that a fleet's description stays small. Standard library only.

Every task's TF_CONFIG lists the whole cluster, so sending each task its own would cost the square
of the fleet. The launcher sends the cluster once per host, packed: consecutive hosts whose names
differ only in one counting number (`node001`, `node002`, ...; `10.0.0.7`, `10.0.0.8`, ...) and
that run the same ports become one run `[prefix, first, count, width, suffix, ports]`; IPv4
addresses count as one 32-bit number (10.0.0.255 is followed by 10.0.1.0). A fleet with regular
names or addresses packs to a few runs whatever its size; irregular names cost one run per host.
The agent unpacks it and builds each task's TF_CONFIG itself (`tf_config`).
"""

from __future__ import annotations

import json
import re
from typing import Any

_NUMBERED = re.compile(r"^(.*?)(\d+)(\D*)$")
_IPV4 = re.compile(r"^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$")
_LITERAL = -1  # `first` of a run naming one host as it is (no counting number in it)
_AS_IPV4 = -2  # `width` of a run of IPv4 addresses counted as one 32-bit number (10.0.0.255, 10.0.1.0, ...)


def address(host: str, port: int) -> str:
    """`host:port`, with brackets around an IPv6 address."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _split(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def _host_of(run: list[Any], offset: int) -> str:
    prefix, first, _, width, suffix, _ = run
    if first == _LITERAL:
        return str(prefix)
    if width == _AS_IPV4:
        number = first + offset
        return ".".join(str((number >> shift) & 255) for shift in (24, 16, 8, 0))
    return f"{prefix}{first + offset:0{width}d}{suffix}"


def _extends(run: list[Any], host: str, ports: list[int]) -> bool:
    return run[1] != _LITERAL and run[5] == ports and _host_of(run, run[2]) == host


def _new_run(host: str, ports: list[int]) -> list[Any]:
    quad = _IPV4.match(host)
    if quad is not None and all(int(part) <= 255 and str(int(part)) == part for part in quad.groups()):
        number = 0
        for part in quad.groups():
            number = number * 256 + int(part)
        return ["", number, 1, _AS_IPV4, "", ports]
    match = _NUMBERED.match(host)
    if match is None:
        return [host, _LITERAL, 1, 0, "", ports]
    prefix, digits, suffix = match.groups()
    return [prefix, int(digits), 1, len(digits), suffix, ports]


def pack(cluster: dict[str, list[str]]) -> dict[str, list[list[Any]]]:
    """The packed form of a `cluster` dict ({"chief": [...], "worker": ["host:port", ...]})."""
    packed: dict[str, list[list[Any]]] = {}
    for kind, addresses in cluster.items():
        blocks: list[tuple[str, list[int]]] = []
        for addr in addresses:
            host, port = _split(addr)
            if blocks and blocks[-1][0] == host:
                blocks[-1][1].append(port)
            else:
                blocks.append((host, [port]))
        runs: list[list[Any]] = []
        for host, ports in blocks:
            if runs and _extends(runs[-1], host, ports):
                runs[-1][2] += 1
            else:
                runs.append(_new_run(host, ports))
        packed[kind] = runs
    return packed


def unpack(packed: dict[str, list[list[Any]]]) -> dict[str, list[str]]:
    """The `cluster` dict back, in the same order."""
    return {
        kind: [address(_host_of(run, i), port) for run in runs for i in range(run[2]) for port in run[5]]
        for kind, runs in packed.items()
    }


_encoded: list[tuple[dict[str, list[str]], str]] = []  # the last cluster and its JSON: the same for every task


def _cluster_json(cluster: dict[str, list[str]]) -> str:
    if not _encoded or _encoded[0][0] is not cluster:
        _encoded[:] = [(cluster, json.dumps(cluster, sort_keys=True))]
    return _encoded[0][1]


def tf_config(cluster: dict[str, list[str]], task_type: str, index: int, own_address: str | None = None) -> str:
    """A task's TF_CONFIG as JSON, keys sorted. The evaluator sits outside the coordination
    service: its cluster lists only itself (`own_address`). The cluster part is encoded once for
    all of a host's tasks (a thousand tasks' cluster is tens of kilobytes)."""
    if task_type == "evaluator":
        alone = {"cluster": {"evaluator": [own_address or ""]}, "task": {"type": task_type, "index": index}}
        return json.dumps(alone, sort_keys=True)
    task = json.dumps({"index": index, "type": task_type})
    return f'{{"cluster": {_cluster_json(cluster)}, "task": {task}}}'
