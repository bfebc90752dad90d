"""Every supported version of the simple APIs gets a well-formed answer (older versions lack
fields; handlers must build responses through the version-tolerant helpers)."""

from __future__ import annotations

import datetime

import pytest
from dm_broker.protocol.apis import SPECS
from dm_broker.protocol.build import make, nested
from dm_broker.protocol.client import KafkaConnection
from dm_broker.protocol.codec import request_class
from kio.schema.errors import ErrorCode

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


async def test_api_versions_list_offsets_init_producer_describe_cluster_every_version(broker, topic_name):
    conn = await KafkaConnection.open("127.0.0.1", broker.port)
    await conn.request(metadata_request(12, topic_name))  # auto-creates the topic
    for v in versions(18):
        resp = await conn.request(make(request_class(18, v), client_software_name="t", client_software_version="1"))
        assert resp.error_code == ErrorCode.none
    for v in versions(2):
        cls = request_class(2, v)
        part = make(nested(cls, "ListOffsetsPartition"), partition_index=0, timestamp=-1, current_leader_epoch=-1,
                    max_num_offsets=1)
        req = make(cls, replica_id=-1, isolation_level=0,
                   topics=(make(nested(cls, "ListOffsetsTopic"), name=topic_name, partitions=(part,)),))
        resp = await conn.request(req)
        assert resp.topics[0].partitions[0].error_code == ErrorCode.none, v
    for v in versions(22):
        resp = await conn.request(make(request_class(22, v), transactional_id=None,
                                       transaction_timeout=datetime.timedelta(seconds=10), producer_id=-1,
                                       producer_epoch=-1))
        assert resp.error_code == ErrorCode.none and resp.producer_id >= 0, v
    for v in versions(60):
        resp = await conn.request(make(request_class(60, v), include_cluster_authorized_operations=False))
        assert resp.error_code == ErrorCode.none, v
    for v in versions(10):
        cls = request_class(10, v)
        resp = await conn.request(make(cls, key="versions-group", key_type=0, coordinator_keys=("versions-group",)))
        assert resp is not None, v
    await conn.close()
