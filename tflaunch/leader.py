"""Wait until the coordination leader listens before building the strategy.

MultiWorkerMirroredStrategy registers every task with a coordination service that runs inside
one task (the leader: `ps:0`, else `chief:0`, else `worker:0`). A task that asks before the
leader's server is up is refused, and its gRPC channel then backs off for about a second before
it tries again, so a leader that comes up a few milliseconds late costs the whole gang a second
at every start and every restart (measured: a leader 0.1 s behind the other worker joined after
0.84-1.14 s instead of 0.06-0.14 s). Waiting here for the leader's port to accept a connection,
every few milliseconds, takes that second away. The built-in runtime does it; a script can too:

    from tflaunch import wait_for_leader
    wait_for_leader()                          # reads TF_CONFIG, as the strategy will
    strategy = tf.distribute.MultiWorkerMirroredStrategy()

Standard library only, and nothing here builds a TF op.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

INTERVAL_S = 0.005  # the leader is usually up within a few tenths of a second: notice it within 5 ms
GANG_PROBES_PER_S = 20_000  # a big gang probes less often each: refused connections stay cheap for the leader's host
LOOKUP_FIRST_S = 0.1  # a name not resolved yet (a pod without its address): asked again after this, doubling,
LOOKUP_LONGEST_S = 2.0  # up to this, so a fleet does not flood its DNS while the leader's name is not there yet
CONNECT_TIMEOUT_S = 1.0  # a host that drops packets answers nothing: try again rather than hang
WAIT_LIMIT_S = 60.0  # then the strategy waits on its own terms (and the launcher's start-up timeout rules)


class Waited(NamedTuple):
    """How long a task waited for its leader, and whether the leader was listening in the end."""

    seconds: float
    listening: bool


def coordination_leader(cluster: Mapping[str, Sequence[str]]) -> tuple[str, int] | None:
    """The (job, index) of the task that runs the coordination service, as TensorFlow picks it."""
    for job in ("ps", "chief", "worker"):
        if cluster.get(job):
            return job, 0
    return None


def split_address(address: str) -> tuple[str, int]:
    """`host:port` or `[v6 address]:port` to (host, port)."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def _from_tf_config() -> tuple[dict[str, list[str]], str, int] | None:
    try:
        config = json.loads(os.environ.get("TF_CONFIG") or "{}")
        return dict(config.get("cluster") or {}), str(config["task"]["type"]), int(config["task"]["index"])
    except (ValueError, KeyError, TypeError, AttributeError):  # no cluster: nothing to wait for
        return None


def wait_for_leader(
    cluster: Mapping[str, Sequence[str]] | None = None,
    task_type: str | None = None,
    task_index: int | None = None,
    limit_s: float = WAIT_LIMIT_S,
) -> Waited | None:
    """Block until the leader's address accepts a TCP connection, at most `limit_s` seconds.

    The cluster and this task are TF_CONFIG's unless given. None when there is nothing to wait
    for: no cluster, this task is the leader, or an address that is not `host:port` or not a host
    name at all (the strategy will say what is wrong with it)."""
    if cluster is None or task_type is None or task_index is None:
        found = _from_tf_config()
        if found is None:
            return None
        cluster, task_type, task_index = found
    leader = coordination_leader(cluster)
    if leader is None or leader == (task_type, task_index):
        return None
    try:
        host, port = split_address(cluster[leader[0]][0])
    except ValueError:
        return None
    trainers = len(cluster.get("chief", ())) + len(cluster.get("worker", ()))
    interval = max(INTERVAL_S, trainers / GANG_PROBES_PER_S)
    started = time.monotonic()
    addresses: list[Any] = []
    next_lookup, lookup_wait = started, LOOKUP_FIRST_S
    while True:
        now = time.monotonic()
        if not addresses and now >= next_lookup:
            try:  # looked up once it resolves (a fleet's names are not asked of its DNS every few ms)
                addresses = [found[4] for found in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]
            except OSError:  # not resolved yet: asked again later, less and less often
                next_lookup, lookup_wait = now + lookup_wait, min(lookup_wait * 2, LOOKUP_LONGEST_S)
            except (UnicodeError, ValueError):  # not a host name at all
                return None
        if any(_accepts(address) for address in addresses):
            return Waited(time.monotonic() - started, True)
        if time.monotonic() - started >= limit_s:
            return Waited(time.monotonic() - started, False)
        time.sleep(interval)


def _accepts(address: Any) -> bool:
    """Whether a TCP connection to this (host, port[, ...]) tuple is accepted; closed at once."""
    family = socket.AF_INET6 if len(address) == 4 else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.settimeout(CONNECT_TIMEOUT_S)
        try:
            probe.connect(address)
            return True
        except OSError:  # refused (not up yet) or unreachable
            return False
