"""The coordination leader leaves last, so no other task heartbeats to a service that has gone.

Every task of a MultiWorkerMirroredStrategy gang sends heartbeats to the coordination service, which
one task hosts (the leader: chief:0, else worker:0), every ten seconds or so. When the leader exits
first, a task still tearing TensorFlow down sends its next heartbeat to nobody and prints
`BaseCollectiveExecutor::StartAbort UNAVAILABLE: Failed to send RPC to coordination service ...
Connection refused` in a run that succeeded (about one run in three, where teardown takes a few
seconds). So at the end of a successful run the leader waits until every other task has left (its
port refuses connections), then leaves itself:

    from tflaunch import leave_after_peers
    ...                                    # training done, results written
    leave_after_peers()                    # returns at once on every task but the leader

Bounded (LEAVE_WAIT_S): a task that lingers on (post-processing of its own) is not waited for past it.
Standard library only, and nothing here builds a TF op.
"""

from __future__ import annotations

import socket
import time
from typing import Any

from tflaunch.leader import _from_tf_config, coordination_leader, split_address

LEAVE_WAIT_S = 10.0
INTERVAL_S = 0.02
CONNECT_TIMEOUT_S = 0.5  # a partitioned peer answers nothing: it is waited for, to the end of LEAVE_WAIT_S


def leave_after_peers(limit_s: float = LEAVE_WAIT_S) -> float:
    """On the coordination leader, wait (at most `limit_s`) until every other task of TF_CONFIG's cluster has
    left; elsewhere (or without a cluster) return at once. Returns the seconds waited."""
    found = _from_tf_config()
    if found is None:
        return 0.0
    cluster, job, index = found
    if coordination_leader(cluster) != (job, index):
        return 0.0
    peers = []
    for peer_job, addresses in cluster.items():
        for peer_index, address in enumerate(addresses or []):
            if (peer_job, peer_index) != (job, index):
                try:
                    peers.append(split_address(str(address)))
                except ValueError:  # not host:port: the strategy would have refused it; nothing to wait for
                    continue
    started = time.monotonic()
    deadline = started + limit_s
    while peers and time.monotonic() < deadline:
        peers = [peer for peer in peers if time.monotonic() >= deadline or _still_there(peer, deadline)]
        if peers:
            time.sleep(INTERVAL_S)
    return time.monotonic() - started


def _still_there(peer: Any, deadline: float) -> bool:
    """Whether the peer's port still accepts a connection (or does not answer at all); refused: it left."""
    try:
        with socket.create_connection(peer, timeout=max(0.01, min(CONNECT_TIMEOUT_S, deadline - time.monotonic()))):
            return True
    except (ConnectionRefusedError, socket.gaierror):
        return False
    except OSError as error:  # a timeout: partitioned or busy, waited for; unreachable: gone
        return isinstance(error, (TimeoutError, socket.timeout))
