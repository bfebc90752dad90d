"""Rebuilding the controller's topics from what its brokers hold (ADR 0017), as pure functions.

A broker reports, when it registers, the partition logs it holds (topic id, last leader epoch, log
end offset) and what its metadata cache last knew of each topic (id, configs, every partition's
replicas and partition epoch). A controller adopts any held topic it neither knows nor has
tombstoned: so a controller that lost its state (or a broker that holds a topic the state forgot)
loses nothing the brokers hold. An adopted partition is `recovering`: it has no leader until every
replica of its last known assignment has reported, then the most advanced log leads."""

from __future__ import annotations

from dataclasses import dataclass, field

from .models import NO_LEADER, HeldPartition, HeldTopic, PartitionState, RegisterRequest, TopicDoc


@dataclass
class Reports:
    """The latest report of every broker that registered with this controller."""

    held: dict[int, dict[tuple[str, int], HeldPartition]] = field(default_factory=dict)
    cached: dict[int, dict[str, HeldTopic]] = field(default_factory=dict)

    def record(self, req: RegisterRequest) -> None:
        self.held[req.node_id] = {(h.topic, h.partition): h for h in req.holdings}
        self.cached[req.node_id] = dict(req.topics)

    def refresh(self, node: int, held: list[HeldPartition]) -> None:
        """Newer figures for some of a broker's logs (its heartbeat's leaderless partitions)."""
        known = self.held.setdefault(node, {})
        for h in held:
            known[(h.topic, h.partition)] = h

    def holders(self, topic: str, topic_id: str, index: int) -> dict[int, HeldPartition]:
        """Broker -> its log of that partition (of that topic id)."""
        return {node: h[(topic, index)] for node, h in self.held.items()
                if (topic, index) in h and h[(topic, index)].topic_id == topic_id}

    def topic_id_of(self, node: int, topic: str) -> str | None:
        ids = {h.topic_id for (name, _), h in self.held.get(node, {}).items() if name == topic and h.topic_id}
        if len(ids) == 1:
            return ids.pop()
        cached = self.cached.get(node, {}).get(topic)
        return cached.topic_id if cached else None

    def best_assignment(self, topic: str, topic_id: str, index: int) -> tuple[list[int], int]:
        """The replicas of a partition as last known by any broker (the highest partition epoch
        wins), and that epoch; without any cache, the brokers that hold its log."""
        best: tuple[int, list[int]] = (-1, [])
        for cache in self.cached.values():
            t = cache.get(topic)
            if t is None or t.topic_id != topic_id or index >= len(t.replicas):
                continue
            epoch = t.partition_epochs[index] if index < len(t.partition_epochs) else 0
            if epoch > best[0] and t.replicas[index]:
                best = (epoch, list(t.replicas[index]))
        if best[1]:
            return best[1], best[0]
        return sorted(self.holders(topic, topic_id, index)), -1

    def partition_count(self, topic: str, topic_id: str) -> int:
        count = 0
        for cache in self.cached.values():
            t = cache.get(topic)
            if t is not None and t.topic_id == topic_id:
                count = max(count, t.partition_count, len(t.replicas))
        for h in self.held.values():
            for (name, index), held in h.items():
                if name == topic and held.topic_id == topic_id:
                    count = max(count, index + 1)
        return count

    def configs(self, topic: str, topic_id: str) -> dict[str, str]:
        for cache in self.cached.values():
            t = cache.get(topic)
            if t is not None and t.topic_id == topic_id:
                return dict(t.configs)
        return {}


def adopted_topics(node: int, reports: Reports, known: dict[str, TopicDoc], tombstoned: set[str]) -> list[TopicDoc]:
    """The topic documents to save after `node` reported: topics it holds that the controller does
    not know (new, recovering), and recovering topics it knows more of (a newer assignment, more
    partitions). A topic whose name is taken by another id, or whose id was deleted, is not adopted:
    the broker keeps those logs aside (stray) or deletes them (tombstoned)."""
    changed = []
    for topic in sorted({name for name, _ in reports.held.get(node, {})}):
        topic_id = reports.topic_id_of(node, topic)
        if topic_id is None or topic_id in tombstoned:
            continue
        current = known.get(topic)
        if current is not None and (current.topic_id != topic_id or not any(p.recovering for p in current.partitions)):
            continue
        partitions = list(current.partitions) if current else []
        count = max(reports.partition_count(topic, topic_id), len(partitions))
        for index in range(count):
            replicas, epoch = reports.best_assignment(topic, topic_id, index)
            if index < len(partitions):
                p = partitions[index]
                if p.recovering and replicas and epoch >= p.partition_epoch - 1 and replicas != p.replicas:
                    partitions[index] = p.model_copy(update={"replicas": replicas, "partition_epoch": epoch + 1})
                continue
            holders = reports.holders(topic, topic_id, index)
            last_epoch = max((h.last_leader_epoch for h in holders.values()), default=-1)
            partitions.append(PartitionState(replicas=replicas or sorted(holders) or [node], leader=NO_LEADER, isr=[],
                                             leader_epoch=max(last_epoch, 0), partition_epoch=max(epoch, 0) + 1,
                                             recovering=True))
        doc = (current.model_copy(update={"partitions": partitions}) if current else
               TopicDoc(name=topic, topic_id=topic_id, configs=reports.configs(topic, topic_id), partitions=partitions))
        if current is None or doc.partitions != current.partitions:
            changed.append(doc)
    return changed


def most_advanced(holders: dict[int, HeldPartition], candidates: list[int]) -> int | None:
    """Of `candidates` (in replica order), the one whose log is furthest: the latest leader epoch,
    then the highest log end offset; the last leader holds every committed record. A candidate
    without a log counts as empty."""
    best = None
    best_key = (-2, -1)
    for node in candidates:
        held = holders.get(node)
        key = (held.last_leader_epoch, held.log_end_offset) if held else (-1, 0)
        if best is None or key > best_key:
            best, best_key = node, key
    return best


def recovered(p: PartitionState, holders: dict[int, HeldPartition], reported: set[int],
              live: set[int], unclean: bool = False) -> PartitionState | None:
    """The recovering partition with a leader, once every replica of its assignment has reported
    (or, `unclean`, among the live replicas that did); None while it must wait."""
    if not p.recovering:
        return None
    if unclean:
        candidates = [r for r in p.replicas if r in reported and r in live]
    else:
        if not set(p.replicas) <= reported:
            return None
        candidates = [r for r in p.replicas if r in live]
        # The most advanced replica must lead: while it is not live, wait for it.
        best = most_advanced(holders, list(p.replicas))
        if best not in live:
            return None
        candidates = [best]
    leader = most_advanced(holders, candidates)
    if leader is None:
        return None
    epoch = max([p.leader_epoch, *(h.last_leader_epoch for h in holders.values())]) + 1
    return p.model_copy(update={"leader": leader, "isr": [leader], "leader_epoch": epoch,
                                "partition_epoch": p.partition_epoch + 1, "recovering": False})
