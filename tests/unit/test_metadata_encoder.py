"""The spliced Metadata encoding is byte for byte kio's, at every version dm serves, and a throttle set
afterwards lands in throttle_time_ms."""

from __future__ import annotations

import datetime
import io
import uuid

import pytest
from dm_broker.protocol.build import make, nested
from dm_broker.protocol.client import decode_response
from dm_broker.protocol.codec import EncodedResponse, encode_response, response_class
from dm_broker.protocol.metadata_encoder import TopicEntries, encode_metadata_response
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer


def topic(cls: type, name: str, partitions: int, operations: int | None) -> object:
    part_cls, topic_cls = nested(cls, "MetadataResponsePartition"), nested(cls, "MetadataResponseTopic")
    extra = {"topic_authorized_operations": operations} if operations is not None else {}
    return make(topic_cls, error_code=ErrorCode.none, name=name, topic_id=uuid.uuid4(), is_internal=False,
                partitions=tuple(make(part_cls, error_code=ErrorCode.none, partition_index=i, leader_id=i % 3,
                                      leader_epoch=4, replica_nodes=(0, 1, 2), isr_nodes=(0, 1),
                                      offline_replicas=(2,)) for i in range(partitions)), **extra)


@pytest.mark.parametrize("version", range(0, 14))
def test_spliced_topics_equal_kios_encoding(version: int):
    cls = response_class(3, version)
    broker_cls = nested(cls, "MetadataResponseBroker")
    ops = 0x5F8 if version >= 8 else None
    topics = [topic(cls, f"t{i}", i + 1, ops) for i in range(4)]
    has_cluster_ops = "cluster_authorized_operations" in cls.__dataclass_fields__
    extra = {"cluster_authorized_operations": 123} if has_cluster_ops else {}
    whole = make(cls, throttle_time=datetime.timedelta(0), brokers=(make(broker_cls, node_id=0, host="h", port=9,
                                                                          rack=None),),
                 cluster_id="c", controller_id=1, topics=tuple(topics), error_code=ErrorCode.none, **extra)
    flexible = cls.__flexible__
    encoded = []
    for t in topics:
        buf = io.BytesIO()
        entity_writer(type(t))(buf, t)
        encoded.append(buf.getvalue())
    empty = make(cls, throttle_time=datetime.timedelta(0), brokers=whole.brokers, cluster_id="c", controller_id=1,
                 topics=(), error_code=ErrorCode.none, **extra)
    assert encode_metadata_response(7, empty, encoded, flexible) == encode_response(7, whole, flexible)


def test_a_throttle_lands_in_the_field():
    cls = response_class(3, 12)
    response = make(cls, throttle_time=datetime.timedelta(0), brokers=(), cluster_id="c", controller_id=1, topics=())
    frame = encode_metadata_response(9, response, [], True)
    patched = EncodedResponse([frame], flexible_header=True, throttle_first=True).with_throttle(1234)
    correlation, decoded = decode_response(3, 12, b"".join(patched.chunks)[4:])
    assert correlation == 9 and decoded.throttle_time == datetime.timedelta(milliseconds=1234)


def test_entries_are_reencoded_only_when_their_key_changes():
    cls = response_class(3, 12)
    topic_cls = nested(cls, "MetadataResponseTopic")
    entries = TopicEntries()
    built = []

    def build() -> object:
        built.append(1)
        return topic(cls, "t", 2, None)

    first = entries.get(topic_cls, "t", ("id", 1), build)
    assert entries.get(topic_cls, "t", ("id", 1), build) is first and len(built) == 1
    entries.get(topic_cls, "t", ("id", 2), build)
    assert len(built) == 2
    entries.forget_except(set())
    assert len(entries) == 0
