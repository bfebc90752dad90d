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
