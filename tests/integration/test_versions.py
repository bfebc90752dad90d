"""Every supported version of the simple APIs gets a well-formed answer (older versions lack
fields; handlers must build responses through the version-tolerant helpers)."""

from __future__ import annotations

import datetime

import pytest
from dm_broker.protocol.apis import SPECS
from dm_broker.protocol.build import make, nested
from dm_broker.protocol.client import KafkaConnection
from dm_broker.protocol.codec import request_class
from kafka.protocol.broker_version_data import BROKER_API_VERSIONS
from kio.schema.errors import ErrorCode
from wire import list_offsets_request

pytestmark = pytest.mark.timeout(60)
RANGES = {s.key: (s.min_version, s.max_version) for s in SPECS}


def versions(key: int) -> range:
    lo, hi = RANGES[key]
    return range(lo, hi + 1)


def metadata_request(version: int, topic: str):
    cls = request_class(3, version)
    entry = make(nested(cls, "MetadataRequestTopic"), name=topic, topic_id=None)
    return make(cls, topics=(entry,), allow_auto_topic_creation=True, include_topic_authorized_operations=False,
                include_cluster_authorized_operations=False)


async def test_metadata_every_version(broker, topic_name):
    conn = await KafkaConnection.open("127.0.0.1", broker.port)
    for v in versions(3):
        resp = await conn.request(metadata_request(v, f"{topic_name}-{v}"))
        assert [b.node_id for b in resp.brokers] == [0]
        assert resp.topics[0].error_code == ErrorCode.none, (v, resp.topics[0])
    await conn.close()


async def test_metadata_by_topic_id_before_v12_is_an_invalid_request(broker, topic_name):
    """v10 and v11 have a topic id and a nullable name in the request's schema, but their answer has no null
    name (the broker closed the connection on the encoding error, found by a fuzz of every API): Kafka refuses
    such a request, INVALID_REQUEST for every topic in it, and the connection goes on. v12 looks the id up."""
    import uuid

    conn = await KafkaConnection.open("127.0.0.1", broker.port)
    created = await conn.request(metadata_request(12, topic_name))
    topic_id = created.topics[0].topic_id
    for v in (10, 11):
        cls = request_class(3, v)
        entry = nested(cls, "MetadataRequestTopic")
        for asked in ((entry(name=None, topic_id=topic_id),),
                      (entry(name=topic_name, topic_id=uuid.uuid4()), entry(name=topic_name, topic_id=None))):
            resp = await conn.request(make(cls, topics=asked, allow_auto_topic_creation=False,
                                           include_topic_authorized_operations=False,
                                           include_cluster_authorized_operations=False))
            assert [t.error_code for t in resp.topics] == [ErrorCode.invalid_request] * len(asked), (v, resp)
            assert [t.name for t in resp.topics] == [e.name or "" for e in asked]
    by_id = await conn.request(make(request_class(3, 12), topics=(
        nested(request_class(3, 12), "MetadataRequestTopic")(name=None, topic_id=topic_id),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    assert by_id.topics[0].error_code == ErrorCode.none and by_id.topics[0].name == topic_name
    await conn.close()


async def test_api_versions_list_offsets_init_producer_describe_cluster_every_version(broker, topic_name):
    conn = await KafkaConnection.open("127.0.0.1", broker.port)
    await conn.request(metadata_request(12, topic_name))  # auto-creates the topic
    for v in versions(18):
        resp = await conn.request(make(request_class(18, v), client_software_name="t", client_software_version="1"))
        assert resp.error_code == ErrorCode.none
    for v in versions(2):
        resp = await conn.request(list_offsets_request(topic_name, 0, -1, v))
        assert resp.topics[0].partitions[0].error_code == ErrorCode.none, v
    for v in versions(22):
        resp = await conn.request(make(request_class(22, v), transactional_id=None,
                                       transaction_timeout=datetime.timedelta(seconds=10), producer_id=-1,
                                       producer_epoch=-1))
        assert resp.error_code == ErrorCode.none and resp.producer_id >= 0, v
    for v in versions(60):
        resp = await conn.request(make(request_class(60, v), include_cluster_authorized_operations=False,
                                       endpoint_type=1, include_fenced_brokers=True))
        assert resp.error_code == ErrorCode.none, v
    for v in versions(10):
        cls = request_class(10, v)
        resp = await conn.request(make(cls, key="versions-group", key_type=0, coordinator_keys=("versions-group",)))
        assert resp is not None, v
    await conn.close()


# What Apache Kafka 4.0 answers to ApiVersions, as kafka-python recorded it from a 4.0 broker (its
# broker_version_data.py): dm claims that release for every API it implements.
KAFKA_4_0 = BROKER_API_VERSIONS[(4, 0)]
# 4.0's APIs dm does not implement, with why (docs/protocol.md lists them).
NOT_IMPLEMENTED = {
    38: "CreateDelegationToken", 39: "RenewDelegationToken", 40: "ExpireDelegationToken",
    41: "DescribeDelegationToken",
    55: "DescribeQuorum (KRaft)", 57: "UpdateFeatures",
    64: "UnregisterBroker (KRaft)",
    74: "ListClientMetricsResources", 80: "AddRaftVoter (KRaft)",
    81: "RemoveRaftVoter (KRaft)",
}

# Later versions dm serves as well (they add what dm already does).
NEWER = {45: 1}  # AlterPartitionReassignments v1 (Kafka 4.1: allow_replication_factor_change)
# APIs of later releases dm serves (share groups, KIP-932: GA in Kafka 4.2), within that release's ranges.
KAFKA_4_2 = BROKER_API_VERSIONS[(4, 2)]
LATER_APIS = {76: "ShareGroupHeartbeat", 77: "ShareGroupDescribe", 78: "ShareFetch", 79: "ShareAcknowledge",
              84: "ReadShareGroupState", 85: "WriteShareGroupState", 86: "DeleteShareGroupState",
              90: "DescribeShareGroupOffsets", 91: "AlterShareGroupOffsets", 92: "DeleteShareGroupOffsets"}


def test_api_versions_are_kafka_4_0s_for_what_dm_implements():
    ours = {s.key: (s.advertised_min if s.advertised_min is not None else s.min_version, s.max_version)
            for s in SPECS}
    for key, (low, high) in KAFKA_4_0.items():
        if key in NOT_IMPLEMENTED:
            assert key not in ours, f"API {key} is implemented now: take it off NOT_IMPLEMENTED"
            continue
        assert key in ours, f"Kafka 4.0 serves API {key}; dm neither serves it nor says why not"
        assert ours[key][1] == NEWER.get(key, high), f"API {key}: dm serves up to v{ours[key][1]}, Kafka 4.0 v{high}"
        assert ours[key][0] <= low, f"API {key}: dm starts at v{ours[key][0]}, Kafka 4.0 at v{low}"
    assert set(ours) - set(KAFKA_4_0) == set(LATER_APIS), f"dm serves APIs 4.0 does not: {set(ours) - set(KAFKA_4_0)}"
    for key in LATER_APIS:
        low, high = KAFKA_4_2[key]
        assert low <= ours[key][0] <= ours[key][1] <= high, f"API {key}: dm v{ours[key]}, Kafka 4.2 v{low}-{high}"


def test_kafka_python_infers_kafka_4_0(broker):
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        assert admin._client.check_version() == (4, 0)
    finally:
        admin.close()


async def test_describe_topic_partitions_pages_through_topics_with_its_cursor(broker, topic_name):
    """KIP-966 (what Kafka 3.8+ admin clients ask instead of Metadata): named topics in name order, at most
    the request's limit of partitions, a cursor where the answer stopped, the next request going on from it;
    an unknown topic is UNKNOWN_TOPIC_OR_PARTITION, and a cursor outside the named topics an invalid request."""
    from confluent_kafka.admin import AdminClient, NewTopic

    names = [f"{topic_name}-a", f"{topic_name}-b"]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(names[0], 5, 1), NewTopic(names[1], 2, 1)]).values():
        future.result(15)
    cls = request_class(75, 0)
    wanted = (nested(cls, "TopicRequest")(name=names[1]), nested(cls, "TopicRequest")(name=names[0]))
    conn = await KafkaConnection.open("127.0.0.1", broker.port)

    seen, cursor = [], None
    for _ in range(5):
        resp = await conn.request(make(cls, topics=wanted, response_partition_limit=3, cursor=cursor))
        assert all(t.error_code == ErrorCode.none for t in resp.topics), resp
        assert sum(len(t.partitions) for t in resp.topics) <= 3
        seen += [(t.name, p.partition_index, p.leader_id) for t in resp.topics for p in t.partitions]
        if resp.next_cursor is None:
            break
        cursor = nested(cls, "Cursor")(topic_name=resp.next_cursor.topic_name,
                                       partition_index=resp.next_cursor.partition_index)
    assert seen == [(names[0], i, 0) for i in range(5)] + [(names[1], i, 0) for i in range(2)]

    everything = await conn.request(make(cls, topics=(), response_partition_limit=2000, cursor=None))
    assert {names[0], names[1]} <= {t.name for t in everything.topics} and everything.next_cursor is None
    topic_ids = {t.name: t.topic_id for t in everything.topics}
    metadata = await conn.request(metadata_request(12, names[0]))
    assert topic_ids[names[0]] == metadata.topics[0].topic_id

    missing = await conn.request(make(cls, topics=(nested(cls, "TopicRequest")(name=f"{topic_name}-none"),),
                                      response_partition_limit=10, cursor=None))
    assert [t.error_code for t in missing.topics] == [ErrorCode.unknown_topic_or_partition]
    outside = await conn.request(make(cls, topics=wanted, response_partition_limit=10, cursor=nested(cls, "Cursor")(
        topic_name=f"{topic_name}-elsewhere", partition_index=0)))
    assert [t.error_code for t in outside.topics] == [ErrorCode.invalid_request] * 2
    await conn.close()
