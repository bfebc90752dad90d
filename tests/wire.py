"""Helpers building raw requests with kio for protocol-level tests."""

from __future__ import annotations

import datetime
import struct
import time

from dm_broker.log.records import build_batch
from dm_broker.protocol.build import make, nested
from dm_broker.protocol.codec import request_class

PRODUCE_VERSION = 9


def produce_request(topic: str, partition: int, records: bytes, acks: int = -1, version: int = PRODUCE_VERSION):
    cls = request_class(0, version)
    topic_cls = nested(cls, "TopicProduceData")
    part_cls = nested(cls, "PartitionProduceData")
    return make(cls, transactional_id=None, acks=acks, timeout=datetime.timedelta(seconds=5),
                topic_data=(topic_cls(name=topic, partition_data=(part_cls(index=partition, records=records),)),))


def fetch_request(topic: str, partition: int, offset: int, max_wait_ms: int = 0, min_bytes: int = 0,
                  version: int = 12):
    cls = request_class(1, version)
    topic_cls = nested(cls, "FetchTopic")
    part_cls = nested(cls, "FetchPartition")
    return make(cls, replica_id=-1, max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=min_bytes,
                max_bytes=50 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                topics=(topic_cls(topic=topic, partitions=(make(part_cls, partition=partition, fetch_offset=offset,
                                                                    partition_max_bytes=10 << 20),)),),
                forgotten_topics_data=(), rack_id="")


def list_offsets_request(topic: str, partition: int, timestamp: int, version: int = 7):
    """ListOffsets of one partition at `timestamp` (-1 latest, -2 earliest), asked as a client (replica -1)."""
    cls = request_class(2, version)
    part = make(nested(cls, "ListOffsetsPartition"), partition_index=partition, timestamp=timestamp,
                current_leader_epoch=-1, max_num_offsets=1)
    return make(cls, replica_id=-1, isolation_level=0, timeout=datetime.timedelta(seconds=5),
                topics=(make(nested(cls, "ListOffsetsTopic"), name=topic, partitions=(part,)),))


def create_topics_request(name: str | list[str], partitions: int = 1, configs: dict[str, str] | None = None,
                          version: int = 7):
    """CreateTopics for one topic, or for several (`name` a list, duplicates kept) in one request."""
    cls = request_class(19, version)
    topic_cls = nested(cls, "CreatableTopic")
    config_cls = nested(cls, "CreatableTopicConfig")
    names = [name] if isinstance(name, str) else name
    return make(cls, topics=tuple(topic_cls(name=n, num_partitions=partitions, replication_factor=1, assignments=(),
                                            configs=tuple(config_cls(name=k, value=v)
                                                          for k, v in (configs or {}).items()))
                                  for n in names),
                timeout=datetime.timedelta(seconds=10), validate_only=False)


def batch(values: list[bytes], producer_id: int = -1, epoch: int = -1, sequence: int = -1, codec: int = 0) -> bytes:
    return build_batch([(None, v, []) for v in values], timestamp_ms=int(time.time() * 1000), codec=codec,
                       producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence)


def raw_frame(api_key: int, version: int, correlation_id: int, body: bytes, client_id: bytes = b"raw") -> bytes:
    header = struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


async def find_group_coordinator(conn, group: str, attempts: int = 100) -> None:
    """FindCoordinator for a group until it answers (the first one creates __consumer_offsets), as a client
    does before its first group request."""
    import asyncio

    from kio.schema.errors import ErrorCode

    for _ in range(attempts):
        found = await conn.request(make(request_class(10, 4), key_type=0, coordinator_keys=(group,)))
        if found.coordinators[0].error_code == ErrorCode.none:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"no coordinator for group {group}")
