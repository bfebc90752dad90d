"""What changed between two versions of a topic document (pure): the leader changes that become
Events on the Topic, and the counts that become metrics and status."""

from __future__ import annotations

from dataclasses import dataclass

from dm_broker.controller.models import NO_LEADER, TopicDoc


@dataclass(frozen=True)
class LeaderChange:
    partition: int
    old: int | None  # None: a new partition
    new: int
    epoch: int


def leader_changes(old: TopicDoc | None, new: TopicDoc) -> list[LeaderChange]:
    before = old.partitions if old else []
    out = []
    for i, p in enumerate(new.partitions):
        prev = before[i].leader if i < len(before) else None
        if prev != p.leader and not (prev is None and p.leader == NO_LEADER):
            out.append(LeaderChange(i, prev, p.leader, p.leader_epoch))
    return out


def isr_changes(old: TopicDoc | None, new: TopicDoc) -> int:
    before = old.partitions if old else []
    return sum(1 for i, p in enumerate(new.partitions) if i < len(before) and set(before[i].isr) != set(p.isr))


def under_replicated(doc: TopicDoc) -> int:
    return sum(1 for p in doc.partitions if len(p.isr) < len(p.replicas))


def offline(doc: TopicDoc) -> int:
    return sum(1 for p in doc.partitions if p.leader == NO_LEADER)


def describe(change: LeaderChange) -> str:
    if change.new == NO_LEADER:
        return f"partition {change.partition}: offline, no in-sync replica to lead it (was broker {change.old})"
    if change.old is None:
        return f"partition {change.partition}: leader is broker {change.new} (leader epoch {change.epoch})"
    was = "none" if change.old == NO_LEADER else f"broker {change.old}"
    return f"partition {change.partition}: leader {was} -> broker {change.new} (leader epoch {change.epoch})"


EVENTS_PER_CHANGE = 5  # past this many partitions in one change, one Event per kind says them all


def leader_events(topic: str, changes: list[LeaderChange]) -> list[tuple[str, str, str]]:
    """(reason, message, type) of the Events a stored change of `topic` records: one per partition
    for a few, one per kind (LeaderElected, PartitionOffline) when more — a broker leading 700 of 2,000
    partitions going away must not post 700 Events at the API server while it fails over."""
    kinds: dict[str, list[LeaderChange]] = {}
    for change in changes:
        kinds.setdefault("PartitionOffline" if change.new == NO_LEADER else "LeaderElected", []).append(change)
    events = []
    for reason, group in kinds.items():
        kind = "Warning" if reason == "PartitionOffline" else "Normal"
        if len(group) <= EVENTS_PER_CHANGE:
            events += [(reason, f"{topic} {describe(c)}", kind) for c in group]
            continue
        if reason == "PartitionOffline":
            message = f"{topic}: {len(group)} partitions offline, no in-sync replica to lead them"
        else:
            by_leader: dict[int, int] = {}
            for c in group:
                by_leader[c.new] = by_leader.get(c.new, 0) + 1
            message = f"{topic}: {len(group)} partitions have new leaders (" + ", ".join(
                f"broker {b}: {n}" for b, n in sorted(by_leader.items())) + ")"
        shown = ", ".join(str(c.partition) for c in group[:20])
        events.append((reason, f"{message}; partitions {shown}{', ...' if len(group) > 20 else ''}", kind))
    return events
