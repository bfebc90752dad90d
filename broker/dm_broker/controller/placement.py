"""Replica placement: rack-aware round robin with leaders spread evenly (Kafka's algorithm).

Brokers are ordered by alternating racks (r1-b0, r2-b3, r1-b1, ...); partition p's first replica is
broker (start + p) of that list and the others follow at a shifting distance, so leaders spread
evenly and, with racks, replicas of a partition land on different racks when there are enough.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence


class PlacementError(ValueError):
    pass


def rack_alternating(brokers: Sequence[tuple[int, str | None]]) -> list[int]:
    by_rack: dict[str | None, list[int]] = {}
    for node, rack in sorted(brokers):
        by_rack.setdefault(rack, []).append(node)
    racks = sorted(by_rack, key=lambda r: (r is None, r or ""))
    ordered: list[int] = []
    while any(by_rack.values()):
        for rack in racks:
            if by_rack[rack]:
                ordered.append(by_rack[rack].pop(0))
    return ordered


def assign(brokers: Sequence[tuple[int, str | None]], partitions: int, replication_factor: int,
           first_partition: int = 0, seed: int | None = None) -> list[list[int]]:
    if replication_factor < 1:
        raise PlacementError("replication factor must be >= 1")
    if replication_factor > len(brokers):
        raise PlacementError(
            f"replication factor {replication_factor} is larger than the {len(brokers)} available brokers")
    rack_of = dict(brokers)
    racks = {r for _, r in brokers if r is not None}
    ordered = rack_alternating(brokers)
    n = len(ordered)
    rng = random.Random(seed)
    start = rng.randrange(n)
    shift = rng.randrange(n)
    out = []
    for p in range(first_partition, first_partition + partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (start + p) % n
        replicas = [ordered[first]]
        # Followers at a shifting distance from the leader; with racks, a broker of a rack that
        # already holds a replica is passed over while some rack holds none (Kafka's rule).
        for relax in (False, True):
            for k in range(n - 1):
                if len(replicas) == replication_factor:
                    break
                candidate = ordered[(first + 1 + (shift + k) % (n - 1)) % n] if n > 1 else ordered[first]
                if candidate in replicas:
                    continue
                used = {rack_of[r] for r in replicas}
                if not relax and racks and rack_of[candidate] in used and not racks <= used:
                    continue
                replicas.append(candidate)
        out.append(replicas)
    return out


def capacity_refusal(hosted: Mapping[int, int], added: Mapping[int, int], file_limits: Mapping[int, int],
                     headroom: int) -> str | None:
    """Why adding `added` replicas per broker to the `hosted` ones is refused, or None. A partition log
    keeps at least one file open, so a broker whose open-file limit is known (above 0) hosts at most
    `limit - headroom` replicas; past that its segment rolls and connections fail together."""
    for node in sorted(added):
        limit = file_limits.get(node, 0)
        if limit <= 0 or not added[node]:
            continue
        room = max(0, limit - headroom)
        total = hosted.get(node, 0) + added[node]
        if total > room:
            return (f"broker {node} would host {total} partition replicas, and its open-file limit ({limit}) leaves "
                    f"room for {room} ({headroom} descriptors kept for new segments, indexes and checkpoints; each "
                    f"log keeps at least one file open): raise the limit (ulimit -n, systemd LimitNOFILE, the "
                    f"container runtime's nofile), use more brokers, or fewer partitions")
    return None
