"""ListOffsets and OffsetForLeaderEpoch."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from ...log import inflate
from ...log.leader_epochs import UNDEFINED_EPOCH, UNDEFINED_OFFSET
from ...log.records import first_record_at, parse_header, record_with_max_timestamp
from ...security.acls import CLUSTER_NAME, Operation, ResourceType
from ..build import ZERO, make, nested
from ..dispatch import RequestContext
from .fetch import READ_COMMITTED, _check_epoch

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
EARLIEST_PENDING_UPLOAD = -5  # tiered storage (KIP-1023): dm keeps every segment local, none waits for upload

T = TypeVar("T")


async def handle_list_offsets(ctx: RequestContext, req: Any) -> Any:
    broker = ctx.broker
    cls = ctx.response_cls
    topic_cls = nested(cls, "ListOffsetsTopicResponse")
    part_cls = nested(cls, "ListOffsetsPartitionResponse")
    committed = getattr(req, "isolation_level", 0) == READ_COMMITTED
    from_client = getattr(req, "replica_id", -1) < 0
    # Kafka answers OFFSET_NOT_AVAILABLE from ListOffsets v5 (KIP-207), LEADER_NOT_AVAILABLE before it
    lagging = ErrorCode.offset_not_available if ctx.version >= 5 else ErrorCode.leader_not_available
    topics = []
    duplicates = _named_twice((topic.name, p.partition_index) for topic in req.topics for p in topic.partitions)
    for topic in req.topics:
        results = []
        denied = ctx.denied(Operation.DESCRIBE, ResourceType.TOPIC, topic.name)
        for p in topic.partitions:
            await ctx.turn()
            part = broker.partition(topic.name, p.partition_index)
            error, offset, timestamp, epoch = ErrorCode.none, -1, -1, -1
            if denied:
                part, error = None, ErrorCode.topic_authorization_failed
            elif (topic.name, p.partition_index) in duplicates:
                part, error = None, ErrorCode.invalid_request  # Kafka's answer to a partition named twice
            elif part is None:
                error = broker.missing_partition_error(topic.name, p.partition_index)
            elif not part.is_leader:
                error = ErrorCode.not_leader_or_follower
            else:
                error = _check_epoch(part, getattr(p, "current_leader_epoch", -1))
                if error == ErrorCode.none and from_client and part.high_watermark_lags:
                    error = lagging
            if part is not None and error == ErrorCode.none:
                log = part.log
                epoch = part.leader_epoch
                # Kafka's "last fetchable offset": what a consumer of this isolation level may read.
                fetchable = part.last_stable_offset if committed else part.high_watermark
                if p.timestamp == LATEST:
                    offset = fetchable
                elif p.timestamp in (EARLIEST, EARLIEST_LOCAL):
                    offset = log.log_start_offset
                elif p.timestamp == EARLIEST_PENDING_UPLOAD:
                    offset = -1
                elif p.timestamp == MAX_TIMESTAMP:
                    batch = log.max_timestamp_batch(fetchable)
                    if batch is not None:
                        offset, timestamp = await _decoded(record_with_max_timestamp, batch, fetchable)
                elif p.timestamp < 0:
                    error = ErrorCode.invalid_request
                else:
                    found = await _offset_for_timestamp(log, p.timestamp)
                    if found is not None and found[0] < fetchable:
                        offset, timestamp = found
            results.append(make(part_cls, partition_index=p.partition_index, error_code=error,
                                timestamp=timestamp, offset=offset, leader_epoch=epoch))
        topics.append(make(topic_cls, name=topic.name, partitions=tuple(results)))
    return make(cls, throttle_time=ZERO, topics=tuple(topics))


async def _decoded(read: Callable[[bytes, int], T], batch: bytes, arg: int) -> T:
    """read(batch, arg) for a batch's records: on the loop when the batch is small and not compressed, else
    on an inflating thread (a compressed batch may inflate to MAX_DECOMPRESSED_BYTES, and decoding one such
    batch took 859 ms of the loop)."""
    header = parse_header(batch)
    if not header.compression and len(batch) < inflate.INLINE_BYTES:
        return read(batch, arg)
    return await inflate.off_loop(read, batch, arg)


async def _offset_for_timestamp(log: Any, timestamp: int) -> tuple[int, int] | None:
    """The first record at or after `timestamp`: batches found from the indexes, decoded one at a time."""
    after = -1
    while (batch := log.batch_at_timestamp(timestamp, after)) is not None:
        found = await _decoded(first_record_at, batch, timestamp)
        if found is not None:
            return found
        after = parse_header(batch).last_offset
    return None


def _named_twice(partitions: Iterable[tuple[str, int]]) -> set[tuple[str, int]]:
    seen: set[tuple[str, int]] = set()
    twice: set[tuple[str, int]] = set()
    for tp in partitions:
        (twice if tp in seen else seen).add(tp)
    return twice


async def handle_offset_for_leader_epoch(ctx: RequestContext, req: Any) -> Any:
    broker = ctx.broker
    cls = ctx.response_cls
    topic_cls = nested(cls, "OffsetForLeaderTopicResult")
    part_cls = nested(cls, "EpochEndOffset")
    follower = getattr(req, "replica_id", -1) >= 0
    cluster_denied = follower and ctx.denied(Operation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)
    topics = []
    for topic in req.topics:
        results = []
        denied = cluster_denied or (not follower and ctx.denied(Operation.DESCRIBE, ResourceType.TOPIC, topic.topic))
        for p in topic.partitions:
            await ctx.turn()
            part = broker.partition(topic.topic, p.partition)
            epoch, end = UNDEFINED_EPOCH, UNDEFINED_OFFSET
            if denied:
                part, error = None, ErrorCode.topic_authorization_failed
            elif part is None:
                error = broker.missing_partition_error(topic.topic, p.partition)
            elif not part.is_leader:
                error = ErrorCode.not_leader_or_follower
            else:
                error = _check_epoch(part, getattr(p, "current_leader_epoch", -1))
            if part is not None and error == ErrorCode.none:
                epoch, end = part.log.leader_epochs.end_offset_for(p.leader_epoch, part.log.log_end_offset)
            results.append(make(part_cls, error_code=error, partition=p.partition, leader_epoch=epoch,
                                end_offset=end))
        topics.append(make(topic_cls, topic=topic.topic, partitions=tuple(results)))
    return make(cls, throttle_time=ZERO, topics=tuple(topics))
