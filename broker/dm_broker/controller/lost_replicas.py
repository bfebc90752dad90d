"""Replicas a broker comes back without (ADR 0047), as pure functions.

A broker whose log directory is new (no meta.properties: the disk was wiped or replaced, a claim was
recreated) holds nothing of the partitions it was in sync for. Left in their ISRs, it was elected
leader of those where it was the last in-sync replica, with an empty log. Every acknowledged record was
gone, and the other replicas, coming back, truncated theirs to match it: one wiped disk lost what a
second broker still held. Kafka refuses to start a broker on an unformatted directory, and with KIP-966
it keeps a replica that restarted uncleanly out of the leaders it may elect.

Such a replica leaves every ISR it is in. Where it was the last member, the partition has no in-sync
replica and no leader until someone decides (`dm topics elect-leaders --unclean`, or the topic's
`unclean.leader.election.enable`), and an unclean election then takes the most advanced log the live
replicas reported.
"""

from __future__ import annotations

from .models import NO_LEADER, PartitionState, RegisterRequest, TopicDoc


def lost_replicas(req: RegisterRequest, topics: dict[str, TopicDoc]) -> list[tuple[str, int]]:
    """The partitions whose in-sync replica on the registering broker is gone: it is in their ISR, holds no
    log of them, and a log directory of it is new. (A broker whose directories all belong to the cluster
    may hold no log of a partition it has not created yet; that is not a loss.)"""
    if not req.new_log_dirs:
        return []
    held = {(h.topic, h.partition): h.topic_id for h in req.holdings}
    lost = []
    for name, doc in topics.items():
        for index, p in enumerate(doc.partitions):
            if req.node_id not in p.isr or p.recovering:
                continue
            if (name, index) in held and held[(name, index)] in (doc.topic_id, None):
                continue
            lost.append((name, index))
    return lost


def without_replica(p: PartitionState, node: int) -> PartitionState:
    """The partition with `node` out of its ISR (an empty ISR when it was the last), and without a leader if
    it led; a new leader, if any, is elected by the caller."""
    update: dict = {"isr": [r for r in p.isr if r != node], "partition_epoch": p.partition_epoch + 1}
    if p.leader == node:
        update.update(leader=NO_LEADER, leader_epoch=p.leader_epoch + 1)
    return p.model_copy(update=update)
