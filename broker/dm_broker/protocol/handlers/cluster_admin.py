"""Cluster administration: DeleteRecords, ElectLeaders (KIP-460), AlterPartitionReassignments and
ListPartitionReassignments (KIP-455), DescribeLogDirs and AlterReplicaLogDirs (JBOD)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from ...controller.models import PartitionResult, ReassignmentRequest
from ...errors import KafkaError
from ...ports import TopicLookup
from ...security.acls import Operation, ResourceType
from ..build import ZERO, make, nested
from ..dispatch import RequestContext

ELECTION_PREFERRED, ELECTION_UNCLEAN = 0, 1


def _code(result: PartitionResult) -> ErrorCode:
    if result.error is None:
        return ErrorCode.none
    try:
        return ErrorCode[result.error]
    except KeyError:
        return ErrorCode.unknown_server_error


async def _by_topic(ctx: RequestContext, results: list[PartitionResult],
                    entry: Callable[[PartitionResult], Any]) -> dict[str, list[Any]]:
    """Per-partition results grouped under their topics, in order, as the responses nest them."""
    grouped: dict[str, list[Any]] = {}
    for r in results:
        await ctx.turn()
        grouped.setdefault(r.topic, []).append(entry(r))
    return grouped


async def handle_delete_records(ctx: RequestContext, req: Any) -> Any:
    """Moves the log start on the leaders, then answers once the low watermark (the lowest log start
    over the live replicas) has followed, or at the request's timeout with REQUEST_TIMED_OUT."""
    broker = ctx.broker
    cls = ctx.response_cls
    topic_cls = nested(cls, "DeleteRecordsTopicResult")
    part_cls = nested(cls, "DeleteRecordsPartitionResult")
    timeout_s = max(req.timeout.total_seconds(), 0)

    # The log starts are moved first, then waited for one after another against one deadline: the wait takes
    # as long as the slowest partition, without a task (each polling) per partition of the request.
    moved: list[tuple[str, Any, ErrorCode, int]] = []
    for topic in req.topics:
        refused = ctx.denied(Operation.DELETE, ResourceType.TOPIC, topic.name)
        for p in topic.partitions:
            await ctx.turn()
            try:
                if refused:
                    raise KafkaError(ErrorCode.topic_authorization_failed,
                                     f"DELETE on topic {topic.name} is not allowed")
                moved.append((topic.name, p, ErrorCode.none, broker.delete_records(topic.name, p.partition_index,
                                                                                   p.offset)))
            except KafkaError as exc:
                moved.append((topic.name, p, exc.code, -1))
    deadline = time.monotonic() + timeout_s
    topics: dict[str, list[Any]] = {}
    for name, p, error, start in moved:
        await ctx.turn()
        low = -1
        if error == ErrorCode.none:
            try:
                low = await broker.wait_low_watermark(name, p.partition_index, start,
                                                      max(deadline - time.monotonic(), 0))
            except KafkaError as exc:
                error = exc.code
        topics.setdefault(name, []).append(make(part_cls, partition_index=p.partition_index, low_watermark=low,
                                                error_code=error))
    return make(cls, throttle_time=ZERO, topics=await ctx.built_by_key(
        topics, lambda name, parts: make(topic_cls, name=name, partitions=parts)))


async def handle_elect_leaders(ctx: RequestContext, req: Any) -> Any:
    cls = ctx.response_cls
    result_cls = nested(cls, "ReplicaElectionResult")
    part_cls = nested(cls, "PartitionResult")
    election = getattr(req, "election_type", ELECTION_PREFERRED)
    if election not in (ELECTION_PREFERRED, ELECTION_UNCLEAN):
        return make(cls, throttle_time=ZERO, error_code=ErrorCode.invalid_request, replica_election_results=())
    partitions = None if req.topic_partitions is None else [
        (t.topic, p) for t in req.topic_partitions for p in t.partitions]
    try:
        results = await ctx.broker.elect_leaders(election == ELECTION_UNCLEAN, partitions)
    except KafkaError as exc:
        return make(cls, throttle_time=ZERO, error_code=exc.code, replica_election_results=())
    by_topic = await _by_topic(ctx, results, lambda r: make(part_cls, partition_id=r.partition, error_code=_code(r),
                                                 error_message=r.message))
    return make(cls, throttle_time=ZERO, error_code=ErrorCode.none, replica_election_results=await ctx.built_by_key(
        by_topic, lambda topic, parts: make(result_cls, topic=topic, partition_result=parts)))


async def handle_alter_partition_reassignments(ctx: RequestContext, req: Any) -> Any:
    cls = ctx.response_cls
    topic_cls = nested(cls, "ReassignableTopicResponse")
    part_cls = nested(cls, "ReassignablePartitionResponse")
    requests = []
    for t in req.topics:
        for p in t.partitions:
            await ctx.turn(1 + len(p.replicas or ()))
            requests.append(ReassignmentRequest(topic=t.name, partition=p.partition_index,
                                                replicas=None if p.replicas is None else list(p.replicas)))
    refused: list[PartitionResult] = []
    if not getattr(req, "allow_replication_factor_change", True):  # v1 (KIP-860)
        keeps = [not _changes_replication_factor(ctx.broker, r) for r in requests]
        refused = [PartitionResult(topic=r.topic, partition=r.partition, error="invalid_replication_factor",
                                   message="the reassignment changes the replication factor")
                   for r, keep in zip(requests, keeps, strict=True) if not keep]
        requests = [r for r, keep in zip(requests, keeps, strict=True) if keep]
    try:
        results = refused + (await ctx.broker.alter_reassignments(requests) if requests else [])
    except KafkaError as exc:
        return make(cls, throttle_time=ZERO, error_code=exc.code, error_message=exc.message, responses=())
    by_topic = await _by_topic(ctx, results, lambda r: make(part_cls, partition_index=r.partition, error_code=_code(r),
                                                 error_message=r.message))
    responses = await ctx.built_by_key(by_topic, lambda topic, parts: make(topic_cls, name=topic, partitions=parts))
    return make(cls, throttle_time=ZERO, error_code=ErrorCode.none, error_message=None, responses=responses)


def _changes_replication_factor(broker: TopicLookup, r: ReassignmentRequest) -> bool:
    doc = broker.topic(r.topic)
    if r.replicas is None or doc is None or not 0 <= r.partition < len(doc.partitions):
        return False
    return len(r.replicas) != len(doc.partitions[r.partition].original_replicas)


async def handle_list_partition_reassignments(ctx: RequestContext, req: Any) -> Any:
    broker = ctx.broker
    cls = ctx.response_cls
    topic_cls = nested(cls, "OngoingTopicReassignment")
    part_cls = nested(cls, "OngoingPartitionReassignment")
    wanted = None if req.topics is None else {(t.name, p) for t in req.topics for p in t.partition_indexes}
    topics = []
    for name, doc in sorted(broker.topics().items()):
        parts = [make(part_cls, partition_index=i, replicas=tuple(p.replicas), adding_replicas=tuple(p.adding_replicas),
                      removing_replicas=tuple(p.removing_replicas))
                 for i, p in enumerate(doc.partitions)
                 if p.reassigning and (wanted is None or (name, i) in wanted)]
        if parts:
            topics.append(make(topic_cls, name=name, partitions=tuple(parts)))
    return make(cls, throttle_time=ZERO, error_code=ErrorCode.none, error_message=None, topics=tuple(topics))


async def handle_describe_log_dirs(ctx: RequestContext, req: Any) -> Any:
    broker = ctx.broker
    cls = ctx.response_cls
    result_cls = nested(cls, "DescribeLogDirsResult")
    topic_cls = nested(cls, "DescribeLogDirsTopic")
    part_cls = nested(cls, "DescribeLogDirsPartition")
    wanted = None if req.topics is None else {(t.topic, p) for t in req.topics for p in t.partitions}
    results = []
    for directory in broker.logs.dirs:
        by_topic: dict[str, list[Any]] = {}
        for (topic, index), plog in sorted(broker.logs.logs.items()):
            if plog.directory.parent != directory or (wanted is not None and (topic, index) not in wanted):
                continue
            part = broker.partition(topic, index)
            lag = 0 if part is None or part.is_leader else max(part.high_watermark - plog.log_end_offset, 0)
            by_topic.setdefault(topic, []).append(make(part_cls, partition_index=index, partition_size=plog.size_bytes,
                                                       offset_lag=lag, is_future_key=False))
        for (topic, index), size in broker.logs.moving_into(directory):
            if wanted is None or (topic, index) in wanted:
                by_topic.setdefault(topic, []).append(make(part_cls, partition_index=index, partition_size=size,
                                                           offset_lag=0, is_future_key=True))
        total, usable = broker.logs.disk_usage(directory)
        results.append(make(result_cls, error_code=ErrorCode.none, log_dir=str(directory), total_bytes=total,
                            usable_bytes=usable, topics=tuple(make(topic_cls, name=t, partitions=tuple(ps))
                                                               for t, ps in by_topic.items())))
    return make(cls, throttle_time=ZERO, error_code=ErrorCode.none, results=tuple(results))


async def handle_alter_replica_log_dirs(ctx: RequestContext, req: Any) -> Any:
    broker = ctx.broker
    cls = ctx.response_cls
    topic_cls = nested(cls, "AlterReplicaLogDirTopicResult")
    part_cls = nested(cls, "AlterReplicaLogDirPartitionResult")
    by_topic: dict[str, list[Any]] = {}
    for target in req.dirs:
        for topic in target.topics:
            for index in topic.partitions:
                await ctx.turn()
                error = ErrorCode.none
                try:
                    await broker.logs.move(topic.name, index, target.path, broker.partition(topic.name, index))
                except KafkaError as exc:
                    error = exc.code
                by_topic.setdefault(topic.name, []).append(make(part_cls, partition_index=index, error_code=error))
    return make(cls, throttle_time=ZERO, results=await ctx.built_by_key(
        by_topic, lambda topic, parts: make(topic_cls, topic_name=topic, partitions=parts)))


# Refusals of a whole request (the dispatcher answers them when the cluster permission is missing).

def refuse_elect_leaders(req: Any, cls: type, error: ErrorCode, message: str) -> Any:
    result_cls, part_cls = nested(cls, "ReplicaElectionResult"), nested(cls, "PartitionResult")
    results = () if req.topic_partitions is None else tuple(
        make(result_cls, topic=t.topic, partition_result=tuple(
            make(part_cls, partition_id=p, error_code=error, error_message=message) for p in t.partitions))
        for t in req.topic_partitions)
    return make(cls, throttle_time=ZERO, error_code=error, replica_election_results=results)


def refuse_alter_replica_log_dirs(req: Any, cls: type, error: ErrorCode, message: str) -> Any:
    topic_cls, part_cls = nested(cls, "AlterReplicaLogDirTopicResult"), nested(cls, "AlterReplicaLogDirPartitionResult")
    return make(cls, throttle_time=ZERO, results=tuple(
        make(topic_cls, topic_name=t.name, partitions=tuple(make(part_cls, partition_index=p, error_code=error)
                                                             for p in t.partitions))
        for d in req.dirs for t in d.topics))
