"""A broker never goes back to an older leader epoch of a partition, whatever metadata it is sent
(a controller that has not caught up: two of them for a moment while an operator pod is replaced);
a topic deleted and created again (another topic id) starts over.

A real Broker with real logs on disk; the metadata snapshots are built here, as a controller would
send them (a stale controller cannot be produced on demand)."""

from __future__ import annotations

from pathlib import Path

from dm_broker.broker import Broker
from dm_broker.config import BrokerConfig
from dm_broker.controller.models import BrokerInfo, ClusterMetadata, PartitionState, TopicDoc
from dm_broker.replication.partition import FOLLOWER, LEADER

TOPIC_ID = "6a0fe9b8-3c2e-4f0e-9a41-0d8e7f8e2f10"


def snapshot(version: int, leader: int, leader_epoch: int, topic_id: str = TOPIC_ID) -> ClusterMetadata:
    state = PartitionState(replicas=[0, 1, 2], leader=leader, isr=[0, 1, 2], leader_epoch=leader_epoch,
                           partition_epoch=leader_epoch)
    return ClusterMetadata(
        version=version, incarnation="c1", cluster_id="cluster",
        brokers=[BrokerInfo(node_id=i, host="127.0.0.1", port=1, epoch=1) for i in range(3)],
        topics={"t": TopicDoc(name="t", topic_id=topic_id, partitions=[state])})


async def test_metadata_never_moves_a_partition_back_to_an_older_leader_epoch(tmp_path: Path) -> None:
    config = BrokerConfig.build({"node.id": 0, "log.dirs": str(tmp_path / "data")}, environ={})
    broker = Broker(config, controller=None)  # type: ignore[arg-type]  # never called here
    try:
        broker.apply_metadata(snapshot(1, leader=0, leader_epoch=5))
        part = broker.partition("t", 0)
        assert (part.role, part.leader_epoch) == (LEADER, 5)

        broker.apply_metadata(snapshot(2, leader=1, leader_epoch=6))  # broker 1 took over
        assert (part.role, part.leader_id, part.leader_epoch) == (FOLLOWER, 1, 6)

        broker.apply_metadata(snapshot(3, leader=0, leader_epoch=5))  # a stale controller's view
        assert (part.role, part.leader_id, part.leader_epoch) == (FOLLOWER, 1, 6)

        # The topic deleted and created again: its epochs start over, with an empty log.
        broker.apply_metadata(snapshot(4, leader=0, leader_epoch=0, topic_id="0c6f1f3a-8d58-4d5e-b0a4-5a3f3f6b9d21"))
        again = broker.partition("t", 0)
        assert again is not part and (again.role, again.leader_epoch) == (LEADER, 0)
    finally:
        await broker.replicas.close()
