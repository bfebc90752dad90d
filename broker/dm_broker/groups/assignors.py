"""The server-side assignors of KIP-848 consumer groups: `uniform` and `range`.

Pure functions: the members' subscriptions and current assignments and the subscribed topics'
partition counts in, one target assignment per member out. An assignment maps a topic id to its
partitions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

Assignment = dict[str, frozenset[int]]

UNIFORM = "uniform"
RANGE = "range"
# Kafka's class names for the same assignors, accepted in group.consumer.assignors
CLASS_NAMES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": UNIFORM,
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": RANGE,
}


@dataclass(frozen=True)
class MemberSpec:
    topics: frozenset[str]  # subscribed topic ids (already resolved from names and regex)
    current: Mapping[str, frozenset[int]] = field(default_factory=dict)


def short_name(name: str) -> str | None:
    """The assignor a configured name means, or None when dm has no such assignor."""
    name = name.strip()
    if name in (UNIFORM, RANGE):
        return name
    return CLASS_NAMES.get(name)


def assign(assignor: str, members: Mapping[str, MemberSpec], partitions: Mapping[str, int]) -> dict[str, Assignment]:
    if assignor == RANGE:
        return range_assign(members, partitions)
    if assignor == UNIFORM:
        return uniform_assign(members, partitions)
    raise ValueError(f"unknown assignor {assignor!r}")


def range_assign(members: Mapping[str, MemberSpec], partitions: Mapping[str, int]) -> dict[str, Assignment]:
    """Per topic, its subscribers sorted by member id take contiguous ranges, the first ones one more
    partition when the count does not divide: co-partitioned topics land on the same members."""
    out: dict[str, dict[str, frozenset[int]]] = {m: {} for m in members}
    for topic, count in sorted(partitions.items()):
        subscribers = sorted(m for m, spec in members.items() if topic in spec.topics)
        if not subscribers or count <= 0:
            continue
        base, extra = divmod(count, len(subscribers))
        start = 0
        for i, member in enumerate(subscribers):
            size = base + (1 if i < extra else 0)
            if size:
                out[member][topic] = frozenset(range(start, start + size))
            start += size
    return out


def uniform_assign(members: Mapping[str, MemberSpec], partitions: Mapping[str, int]) -> dict[str, Assignment]:
    """Balanced and sticky: members keep what they own while the balance allows, new partitions go to
    the least-loaded subscriber, then partitions move from the most- to the least-loaded member that
    subscribes to them until no two eligible members differ by more than one."""
    owner: dict[tuple[str, int], str] = {}
    load: dict[str, set[tuple[str, int]]] = {m: set() for m in members}
    for member in sorted(members):
        spec = members[member]
        for topic, parts in spec.current.items():
            if topic not in spec.topics or topic not in partitions:
                continue
            for p in parts:
                if p < partitions[topic] and (topic, p) not in owner:
                    owner[(topic, p)] = member
                    load[member].add((topic, p))
    subscribers = {t: sorted(m for m, spec in members.items() if t in spec.topics) for t in partitions}
    for topic in sorted(partitions):
        eligible = subscribers[topic]
        for p in range(partitions[topic]):
            if (topic, p) in owner or not eligible:
                continue
            member = min(eligible, key=lambda m: (len(load[m]), m))
            owner[(topic, p)] = member
            load[member].add((topic, p))
    _balance(load, owner, subscribers)
    out: dict[str, dict[str, set[int]]] = {m: {} for m in members}
    for (topic, p), member in owner.items():
        out[member].setdefault(topic, set()).add(p)
    return {m: {t: frozenset(ps) for t, ps in topics.items()} for m, topics in out.items()}


def _balance(load: dict[str, set[tuple[str, int]]], owner: dict[tuple[str, int], str],
             subscribers: Mapping[str, list[str]]) -> None:
    """Evens out the loads: while some member carries at least two more partitions than another it can
    reach, shift one partition along a chain of members (each gives one partition of a topic the next
    subscribes to), so only the two ends change load. Each shift lowers the sum of squared loads, so
    this ends; a chain is needed when subscriptions differ (a gives T1 to b, b gives T2 to c)."""
    for _ in range(len(owner) + 1):
        for giver in sorted(load, key=lambda m: (-len(load[m]), m)):
            chain = _chain_to_lighter(giver, load, subscribers)
            if chain:
                for tp, taker in chain:
                    load[owner[tp]].discard(tp)
                    load[taker].add(tp)
                    owner[tp] = taker
                break
        else:
            return


def _chain_to_lighter(giver: str, load: dict[str, set[tuple[str, int]]],
                      subscribers: Mapping[str, list[str]]) -> list[tuple[tuple[str, int], str]]:
    """Breadth-first from `giver`: the shortest chain of (partition, next member) moves ending at a member
    with at least two partitions fewer than the giver; empty when there is none."""
    limit = len(load[giver]) - 2
    came_from: dict[str, tuple[str, tuple[str, int]] | None] = {giver: None}
    frontier = [giver]
    while frontier:
        nxt: list[str] = []
        for member in frontier:
            for tp in sorted(load[member]):
                for taker in subscribers[tp[0]]:
                    if taker in came_from:
                        continue
                    came_from[taker] = (member, tp)
                    if len(load[taker]) <= limit:
                        chain: list[tuple[tuple[str, int], str]] = []
                        node = taker
                        while (step := came_from[node]) is not None:
                            chain.append((step[1], node))
                            node = step[0]
                        return chain[::-1]
                    nxt.append(taker)
        frontier = nxt
    return []
