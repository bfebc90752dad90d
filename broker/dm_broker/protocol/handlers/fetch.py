"""Fetch: long-poll until min_bytes are available or max_wait passes, then return raw batches.

Batches go out exactly as stored; the last one may be cut at max_bytes (clients drop a partial
trailing batch, as with Kafka). Reads never go past the high watermark, and for read_committed not
past the last stable offset, with the aborted transactions in the range listed for the client to
drop. Fetch sessions (KIP-227) are not kept: session id 0 tells clients to send full fetches.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from kio.schema.errors import ErrorCode

from ...log.segment import FileSlice
from ...replication.partition import Partition
from ...replication.throttle import ByteRateQuota
from ...security.acls import CLUSTER_NAME, Operation, ResourceType
from ..codec import EncodedResponse
from ..dispatch import RequestContext
from ..fetch_encoder import TOPIC_IDS_FROM, PartitionResult, TopicResult, encode_fetch_response

READ_COMMITTED = 1


class _PartitionRead:
    __slots__ = ("error", "partition", "request", "size", "slices", "throttled")

    def __init__(self, request: Any, partition: Partition | None, error: ErrorCode) -> None:
        self.request = request
        self.partition = partition
        self.error = error
        self.slices: list[FileSlice] = []
        self.size = 0
        self.throttled = False  # a replica fetch counted against leader.replication.throttled.rate


def _check_epoch(part: Partition, current_leader_epoch: int) -> ErrorCode:
    if current_leader_epoch < 0 or current_leader_epoch == part.leader_epoch:
        return ErrorCode.none
    if current_leader_epoch < part.leader_epoch:
        return ErrorCode.fenced_leader_epoch
    return ErrorCode.unknown_leader_epoch


def _read_all(reads: list[list[_PartitionRead]], max_bytes: int, committed: bool, replica: bool,
              quota: ByteRateQuota | None = None) -> int:
    total = 0
    first = True
    allowance = quota.available() if quota is not None else 0
    for topic_reads in reads:
        for r in topic_reads:
            part = r.partition
            if part is None or r.error != ErrorCode.none:
                continue
            if part.closed:
                r.error = ErrorCode.unknown_topic_or_partition
                continue
            if not part.is_leader:
                r.error = ErrorCode.not_leader_or_follower
                continue
            offset = r.request.fetch_offset
            log = part.log
            # Followers replicate everything; consumers see only what the ISR has (the HW).
            limit = log.log_end_offset if replica else part.last_stable_offset if committed else part.high_watermark
            if offset < log.log_start_offset or offset > log.log_end_offset:
                r.error = ErrorCode.offset_out_of_range
                continue
            budget = min(r.request.partition_max_bytes, max_bytes - total)
            if r.throttled:
                if allowance <= 0:  # over quota: the replica gets nothing of it this time (as Kafka)
                    r.slices, r.size = [], 0
                    continue
                budget = min(budget, allowance)
            if budget <= 0 and not first:
                r.slices, r.size = [], 0
                continue
            result = log.read(offset, max(budget, 0), limit, min_one_batch=first)
            r.slices, r.size = result.slices, result.size
            if result.size:
                total += result.size
                first = False
                if r.throttled:
                    allowance -= result.size
    return total


async def handle(ctx: RequestContext, req: Any) -> Any:
    broker = ctx.broker
    committed = getattr(req, "isolation_level", 0) == READ_COMMITTED

    if getattr(req, "session_id", 0) != 0 or getattr(req, "session_epoch", -1) > 0:
        return EncodedResponse(encode_fetch_response(ctx.version, ctx.header.correlation_id,
                                                     ErrorCode.fetch_session_id_not_found.value, 0, []))

    # A follower says who it is in replica_id, or from v15 on in the replica_state tagged field.
    replica_id = req.replica_id if hasattr(req, "replica_id") else req.replica_state.replica_id
    replica = replica_id >= 0
    # Kafka's checks: a follower needs CLUSTER_ACTION on the cluster, a consumer READ on each topic.
    follower_denied = replica and ctx.denied(Operation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)
    reads: list[list[_PartitionRead]] = []
    names: list[str] = []
    for topic in req.topics:
        topic_reads = []
        # From v13 on a topic is named by its id: an id the metadata does not know is UNKNOWN_TOPIC_ID.
        name = topic.topic if ctx.version < TOPIC_IDS_FROM else getattr(broker.topic_by_id(topic.topic_id), "name", "")
        names.append(name)
        denied = name and (follower_denied or (not replica and ctx.denied(Operation.READ, ResourceType.TOPIC, name)))
        for p in topic.partitions:
            if denied:
                topic_reads.append(_PartitionRead(p, None, ErrorCode.topic_authorization_failed))
                continue
            part = broker.partition(name, p.partition) if name else None
            if part is None:
                error = ErrorCode.unknown_topic_id if not name else broker.missing_partition_error(name, p.partition)
                topic_reads.append(_PartitionRead(p, None, error))
                continue
            error = _check_epoch(part, getattr(p, "current_leader_epoch", -1))
            topic_reads.append(_PartitionRead(p, part, error))
        reads.append(topic_reads)

    max_bytes = req.max_bytes if req.max_bytes > 0 else 0x7FFFFFFF
    # Throttling only matters under a rate limit: without one no partition is looked at for it.
    quota = broker.leader_quota if replica and not broker.leader_quota.unlimited() else None
    if replica:
        _track_follower(broker, replica_id, reads, quota is not None)
    total = _read_all(reads, max_bytes, committed, replica, quota)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + req.max_wait.total_seconds()
    while total < req.min_bytes and not _has_errors(reads):
        remaining = deadline - loop.time()
        if remaining <= 0:
            break
        await _wait_for_data(reads, remaining)
        total = _read_all(reads, max_bytes, committed, replica, quota)

    metrics = broker.metrics
    topics = []
    for topic, name, topic_reads in zip(req.topics, names, reads, strict=True):
        topic_id = topic.topic_id.bytes if ctx.version >= TOPIC_IDS_FROM and topic.topic_id else bytes(16)
        result = TopicResult(name, topic_id=topic_id)
        for r in topic_reads:
            part = r.partition
            hw = lso = start = -1
            if part is not None and r.error == ErrorCode.none:
                hw, lso, start = part.high_watermark, part.last_stable_offset, part.log.log_start_offset
            if r.size and replica:
                metrics.replication_bytes_out.labels(name).inc(r.size)
                if r.throttled:
                    quota.record(r.size)
            elif r.size:
                metrics.bytes_out.labels(name).inc(r.size)
                metrics.messages_out.labels(name).inc(sum(s.record_count() for s in r.slices))
            elif r.error != ErrorCode.none:
                metrics.request_errors.labels("fetch", r.error.name).inc()
            aborted = None
            if committed:
                # read_committed: the aborted transactions with records in what is returned, so the
                # client drops them (it reads up to the last stable offset, control batches included).
                aborted = [(t.producer_id, t.first_offset)
                           for t in part.log.aborted_transactions(r.request.fetch_offset, lso)] \
                    if part is not None and r.size else []
            result.partitions.append(PartitionResult(
                r.request.partition, r.error.value, hw, lso, start, r.slices, aborted=aborted,
            ))
        topics.append(result)
    return EncodedResponse(encode_fetch_response(ctx.version, ctx.header.correlation_id, 0, 0, topics))


def _track_follower(broker, replica_id: int, reads: list[list[_PartitionRead]], throttling: bool) -> None:
    """A follower's fetch offset is its log end offset: the leader's view of its progress."""
    for topic_reads in reads:
        for r in topic_reads:
            part = r.partition
            if part is None or r.error != ErrorCode.none or not part.is_leader:
                continue
            if replica_id not in part.replicas:
                r.error = ErrorCode.not_leader_or_follower
                continue
            if part.update_follower(replica_id, r.request.fetch_offset, getattr(r.request, "log_start_offset", -1)):
                broker.replicas.maybe_expand(part, replica_id)
            r.throttled = throttling and broker.leader_throttled(part, replica_id)


def _has_errors(reads: list[list[_PartitionRead]]) -> bool:
    return any(r.error != ErrorCode.none for topic_reads in reads for r in topic_reads)


async def _wait_for_data(reads: list[list[_PartitionRead]], timeout: float) -> None:
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()
    parts = {r.partition for topic_reads in reads for r in topic_reads if r.partition is not None}
    for part in parts:
        part.add_waiter(fut)
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(fut, timeout)
    finally:
        for part in parts:
            part.remove_waiter(fut)
