"""A Metadata request whose topic entries must all be encoded again (after a wave of leader or ISR changes,
or the first at a new version) gives the event loop its turn every PARTITIONS_PER_STEP partitions it
encodes, and answers exactly what it answers in one piece (issue 31: at 10,000 partitions this was a
stall of a tenth of a second and more). A real Broker with real logs on disk, asked through its dispatcher."""

from __future__ import annotations

from pathlib import Path

from dm_broker.broker import Broker
from dm_broker.config import BrokerConfig
from dm_broker.controller.models import BrokerInfo, ClusterMetadata, PartitionState, TopicDoc
from dm_broker.protocol.build import make
from dm_broker.protocol.codec import request_class
from dm_broker.protocol.handlers import metadata as metadata_handler
from dm_broker.security.listeners import Listener
from dm_broker.security.session import Session
from loop_turns import counting_turns

TOPICS, PER_TOPIC = 10, 100


def snapshot() -> ClusterMetadata:
    topics = {f"t{i}": TopicDoc(name=f"t{i}", topic_id=f"6a0fe9b8-3c2e-4f0e-9a41-0d8e7f8e2f{i:02d}", partitions=[
        PartitionState(replicas=[0, 1], leader=1, isr=[0, 1], leader_epoch=3, partition_epoch=3)
        for _ in range(PER_TOPIC)]) for i in range(TOPICS)}
    return ClusterMetadata(version=1, incarnation="c1", cluster_id="cluster",
                           brokers=[BrokerInfo(node_id=i, host="127.0.0.1", port=9092 + i, epoch=1) for i in range(2)],
                           topics=topics)


async def answer_counting_turns(broker: Broker, version: int) -> tuple[object, int]:
    """The Metadata answer for every topic at `version`, and how often another task ran meanwhile."""
    listener = Listener(name="PLAINTEXT", host="127.0.0.1", port=9092, security_protocol="PLAINTEXT",
                        advertised_host="127.0.0.1", advertised_port=9092)
    request = make(request_class(3, version), topics=None, allow_auto_topic_creation=False,
                   include_cluster_authorized_operations=False, include_topic_authorized_operations=False)
    async with counting_turns() as turns:
        response = await broker.dispatcher.call(request, Session(listener, "127.0.0.1"), "test", 0)
        return response, turns.count


async def test_a_full_metadata_request_encodes_in_steps_and_answers_the_same(tmp_path: Path, monkeypatch) -> None:
    config = BrokerConfig.build({"node.id": 0, "log.dirs": str(tmp_path / "data")}, environ={})
    broker = Broker(config, controller=None)  # type: ignore[arg-type]  # never called here
    try:
        broker.apply_metadata(snapshot())
        monkeypatch.setattr(metadata_handler, "PARTITIONS_PER_STEP", 1 << 30)
        whole, turns_whole = await answer_counting_turns(broker, 9)  # every entry encoded, in one piece
        assert turns_whole <= 1
        monkeypatch.setattr(metadata_handler, "PARTITIONS_PER_STEP", 250)
        stepped, turns_stepped = await answer_counting_turns(broker, 10)  # a new version: encoded again
        assert turns_stepped >= TOPICS * PER_TOPIC // 250 - 1
        assert [(t.name, [(p.partition_index, p.leader_id, p.isr_nodes) for p in t.partitions])
                for t in stepped.topics] == [(t.name, [(p.partition_index, p.leader_id, p.isr_nodes)
                                                       for p in t.partitions]) for t in whole.topics]
        assert len(stepped.topics) == TOPICS and all(len(t.partitions) == PER_TOPIC for t in stepped.topics)
        _, turns_cached = await answer_counting_turns(broker, 10)  # nothing changed: nothing to encode
        assert turns_cached <= 1
    finally:
        await broker.replicas.close()
