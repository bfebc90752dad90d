"""The metadata loop applies an update PARTITIONS_PER_STEP changed partitions at a time, with the event loop
turning between the steps (issue 31: a broker's share of 10,000 new partitions applied in one piece held
its loop for a tenth of a second and more). A real Broker with real logs on disk; the snapshots are built
here as the controller sends them."""

from __future__ import annotations

from pathlib import Path

from dm_broker import broker as broker_module
from dm_broker.broker import Broker
from dm_broker.config import BrokerConfig
from dm_broker.controller.models import BrokerInfo, ClusterMetadata, PartitionState, TopicDoc
from dm_broker.replication.partition import FOLLOWER, LEADER

TOPIC_ID = "6a0fe9b8-3c2e-4f0e-9a41-0d8e7f8e2f10"


def snapshot(version: int, partitions: int, leader: int, epoch: int, topics: dict | None = None) -> ClusterMetadata:
    states = [PartitionState(replicas=[0, 1], leader=leader, isr=[0, 1], leader_epoch=epoch, partition_epoch=epoch)
              for _ in range(partitions)]
    return ClusterMetadata(
        version=version, incarnation="c1", cluster_id="cluster",
        brokers=[BrokerInfo(node_id=i, host="127.0.0.1", port=1, epoch=1) for i in range(2)],
        topics={"t": TopicDoc(name="t", topic_id=TOPIC_ID, partitions=states), **(topics or {})})


async def test_an_update_is_applied_in_steps_and_whole_at_the_end(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(broker_module, "PARTITIONS_PER_STEP", 40)
    config = BrokerConfig.build({"node.id": 0, "log.dirs": str(tmp_path / "data")}, environ={})
    broker = Broker(config, controller=None)  # type: ignore[arg-type]  # never called here
    try:
        broker.apply_metadata(snapshot(1, 100, leader=1, epoch=1))  # at start: in one piece
        assert all(p.role == FOLLOWER for p in broker.partitions.values()) and len(broker.partitions) == 100
        changed = broker._metadata_changed

        steps = []
        for _ in broker._applying(snapshot(2, 100, leader=0, epoch=2)):  # broker 0 takes every partition over
            steps.append(sum(p.role == LEADER for p in broker.partitions.values()))
            assert not changed.is_set()  # waiters hear of the update once it is applied whole
        assert steps == [39, 79]  # the 40th and 80th changed partitions wait for the next step
        assert all(p.role == LEADER and p.leader_epoch == 2 for p in broker.partitions.values())
        assert changed.is_set()

        # Unchanged topics are skipped without counting: one new topic of 10 is applied in a single step.
        md = snapshot(3, 100, leader=0, epoch=2)
        md.topics["t"] = broker.metadata.topics["t"]  # the same document, as a delta keeps it
        md.topics["u"] = TopicDoc(name="u", topic_id="0c6f1f3a-8d58-4d5e-b0a4-5a3f3f6b9d21", partitions=[
            PartitionState(replicas=[0], leader=0, isr=[0], leader_epoch=0, partition_epoch=0) for _ in range(10)])
        assert list(broker._applying(md)) == []
        assert len(broker.partitions) == 110
    finally:
        await broker.replicas.close()
