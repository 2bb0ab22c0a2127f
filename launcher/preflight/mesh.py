"""Which hosts' task ports a host proves it reaches before anything starts.

A full mesh is what the gang will use, but proving it costs a connection per pair of tasks: 65,000
for 256 hosts, a million for 1,024, the largest part of a fleet's start-up. Up to FULL_MESH hosts
every host still checks every other. Past that, each host checks the first host (where the
coordination service runs, which every task must reach) and the hosts 1, 2, 4, 8, ... places after
it in the spec's order, so that every host is checked from about log2(N) others, near and far in
that order (hosts listed by rack reach across racks too): N log N connections. A firewall that
blocks only a few pairs of hosts may then pass the check; the gang's own connections find it, and
the launcher reports the task that failed.
"""

from __future__ import annotations

FULL_MESH = 16


def peers_to_check(count: int, index: int) -> list[int]:
    """The positions (0 .. count-1, in the spec's order) whose ports the host at `index` connects to."""
    if count <= FULL_MESH:
        return [other for other in range(count) if other != index]
    peers = {0}
    step = 1
    while step < count:
        peers.add((index + step) % count)
        step *= 2
    peers.discard(index)
    return sorted(peers)


def checked_from(count: int) -> dict[int, int]:
    """How many hosts check each position's ports (each at least log2(count) past FULL_MESH)."""
    seen = dict.fromkeys(range(count), 0)
    for index in range(count):
        for other in peers_to_check(count, index):
            seen[other] += 1
    return seen
