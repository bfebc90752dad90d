"""Transaction APIs: InitProducerId (with a transactional id), AddPartitionsToTxn (clients, v0-3; and
brokers verifying or adding a partition, v4-5), AddOffsetsToTxn, EndTxn, TxnOffsetCommit,
WriteTxnMarkers (broker to broker), DescribeTransactions, ListTransactions, DescribeProducers."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from kio.schema.errors import ErrorCode as E

from ...groups.coordinator import OFFSETS_TOPIC
from ...security.acls import CLUSTER_NAME, Operation, ResourceType
from ...txn.metadata import TV2
from ..access import UNKNOWN_TIME
from ..build import ZERO, make, ms_to_datetime, nested
from ..dispatch import RequestContext

END_TXN_TV2 = 5  # EndTxn from this version on: the epoch is bumped at every transaction end (KIP-890)


async def init_transactional_producer(ctx: RequestContext, req: Any, expected: tuple[int, int] | None) -> Any:
    """InitProducerId with a transactional id: the coordinator's answer. `expected`: the producer id and epoch
    the request names (KIP-360), if it names one."""
    timeout_ms = int(req.transaction_timeout.total_seconds() * 1000)
    error, pid, epoch = await ctx.broker.txn_coordinator.init_producer_id(req.transactional_id, timeout_ms, expected)
    if error == E.producer_fenced and ctx.version < 4:
        error = E.invalid_producer_epoch  # PRODUCER_FENCED is unknown before v4
    return make(ctx.response_cls, throttle_time=ZERO, error_code=error, producer_id=pid, producer_epoch=epoch)


def _fenced_for(ctx: RequestContext, error: E, fenced_from: int) -> E:
    """PRODUCER_FENCED only for the versions that know it; INVALID_PRODUCER_EPOCH before."""
    return E.invalid_producer_epoch if error == E.producer_fenced and ctx.version < fenced_from else error


async def handle_add_partitions_to_txn(ctx: RequestContext, req: Any) -> Any:
    cls = ctx.response_cls
    broker = ctx.broker
    coordinator = broker.txn_coordinator
    part_cls = nested(cls, "AddPartitionsToTxnPartitionResult")
    topic_cls = nested(cls, "AddPartitionsToTxnTopicResult")

    async def topic_results(errors: dict[tuple[str, int], E]) -> tuple:
        by_topic: dict[str, list] = {}
        for (topic, p), error in errors.items():
            await ctx.turn()
            by_topic.setdefault(topic, []).append(part_cls(partition_index=p, partition_error_code=error))
        return await ctx.built_by_key(by_topic, lambda t, ps: topic_cls(name=t, results_by_partition=ps))

    if ctx.version <= 3:  # a client adds the partitions it is about to write to
        partitions = {(t.name, p) for t in req.v3_and_below_topics for p in t.partitions}
        if ctx.denied(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, req.v3_and_below_transactional_id):
            errors = dict.fromkeys(partitions, E.transactional_id_authorization_failed)
            return make(cls, throttle_time=ZERO, results_by_topic_v3_and_below=await topic_results(errors))
        refused: dict[tuple[str, int], E] = {}
        for t, p in partitions:
            await ctx.turn()
            if ctx.denied(Operation.WRITE, ResourceType.TOPIC, t):
                refused[(t, p)] = E.topic_authorization_failed
            elif (doc := broker.topic(t)) is None or not 0 <= p < len(doc.partitions):
                refused[(t, p)] = E.unknown_topic_or_partition
        if refused:
            errors = {tp: refused.get(tp, E.operation_not_attempted) for tp in partitions}
        else:
            error = await coordinator.add_partitions(req.v3_and_below_transactional_id, req.v3_and_below_producer_id,
                                                     req.v3_and_below_producer_epoch, partitions)
            errors = dict.fromkeys(partitions, _fenced_for(ctx, error, 3))
        return make(cls, throttle_time=ZERO, results_by_topic_v3_and_below=await topic_results(errors))
    # v4+: brokers verifying (or adding) a partition for a transactional write, batched by transaction.
    result_cls = nested(cls, "AddPartitionsToTxnResult")
    if ctx.denied(Operation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
        return make(cls, throttle_time=ZERO, error_code=E.cluster_authorization_failed, results_by_transaction=())
    results = []
    for t in req.transactions:
        partitions = {(topic.name, p) for topic in t.topics for p in topic.partitions}
        if t.verify_only:
            errors = coordinator.verify(t.transactional_id, t.producer_id, t.producer_epoch, partitions)
        else:
            error = await coordinator.add_partitions(t.transactional_id, t.producer_id, t.producer_epoch, partitions,
                                                     client_version=TV2)
            errors = dict.fromkeys(partitions, error)
        results.append(result_cls(transactional_id=t.transactional_id, topic_results=await topic_results(errors)))
    return make(cls, throttle_time=ZERO, error_code=E.none, results_by_transaction=tuple(results))


async def handle_add_offsets_to_txn(ctx: RequestContext, req: Any) -> Any:
    broker = ctx.broker
    if ctx.denied(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
        return make(ctx.response_cls, throttle_time=ZERO, error_code=E.transactional_id_authorization_failed)
    if ctx.denied(Operation.READ, ResourceType.GROUP, req.group_id):
        return make(ctx.response_cls, throttle_time=ZERO, error_code=E.group_authorization_failed)
    await broker.ensure_offsets_topic()
    partition = broker.coordinator.partition_for(req.group_id)
    error = await broker.txn_coordinator.add_partitions(req.transactional_id, req.producer_id, req.producer_epoch,
                                                        {(OFFSETS_TOPIC, partition)})
    return make(ctx.response_cls, throttle_time=ZERO, error_code=_fenced_for(ctx, error, 3))


async def handle_end_txn(ctx: RequestContext, req: Any) -> Any:
    if ctx.denied(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
        return make(ctx.response_cls, throttle_time=ZERO, error_code=E.transactional_id_authorization_failed,
                    producer_id=-1, producer_epoch=-1)
    client_version = TV2 if ctx.version >= END_TXN_TV2 else 0
    error, pid, epoch = await ctx.broker.txn_coordinator.end_txn(req.transactional_id, req.producer_id,
                                                                 req.producer_epoch, req.committed, client_version)
    return make(ctx.response_cls, throttle_time=ZERO, error_code=_fenced_for(ctx, error, 3), producer_id=pid,
                producer_epoch=epoch)


async def handle_txn_offset_commit(ctx: RequestContext, req: Any) -> Any:
    broker = ctx.broker
    offsets = {(t.name, p.partition_index): (p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                                             p.committed_metadata)
               for t in req.topics for p in t.partitions}
    # Kafka's checks: WRITE on the transactional id, READ on the group, READ on each topic.
    refusal = E.transactional_id_authorization_failed \
        if ctx.denied(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id) else \
        E.group_authorization_failed if ctx.denied(Operation.READ, ResourceType.GROUP, req.group_id) else None
    if refusal is not None:
        return await _txn_offset_answer(ctx, dict.fromkeys(offsets, refusal.value))
    denied = set()
    for tp in offsets:
        await ctx.turn()
        if ctx.denied(Operation.READ, ResourceType.TOPIC, tp[0]):
            denied.add(tp)
    results: dict[tuple[str, int], int] = dict.fromkeys(denied, E.topic_authorization_failed.value)
    offsets = {tp: v for tp, v in offsets.items() if tp not in denied}
    if not offsets:
        return await _txn_offset_answer(ctx, results)
    group_partition = broker.coordinator.partition_for(req.group_id)
    # The offsets partition must be in the producer's transaction (AddOffsetsToTxn): KIP-890 as for data.
    error = await broker.txn_verifier.check(req.transactional_id, req.producer_id, req.producer_epoch, OFFSETS_TOPIC,
                                            group_partition, add=False) \
        if broker.dynamic("transaction.partition.verification.enable") else E.none
    if error != E.none:
        code = E.invalid_txn_state if error == E.transaction_abortable else \
            E.coordinator_not_available if error in (E.not_coordinator, E.coordinator_load_in_progress) else error
        results.update(dict.fromkeys(offsets, _fenced_for(ctx, code, 3).value))
    else:
        committed = await broker.coordinator.commit_txn(req.group_id, req.producer_id, req.producer_epoch,
                                                        getattr(req, "generation_id", -1),
                                                        getattr(req, "member_id", ""),
                                                        getattr(req, "group_instance_id", None), offsets)
        results.update({tp: _fenced_for(ctx, E(code), 3).value for tp, code in committed.items()})
    return await _txn_offset_answer(ctx, results)


async def _txn_offset_answer(ctx: RequestContext, results: dict[tuple[str, int], int]) -> Any:
    cls = ctx.response_cls
    part_cls = nested(cls, "TxnOffsetCommitResponsePartition")
    topic_cls = nested(cls, "TxnOffsetCommitResponseTopic")
    by_topic: dict[str, list] = {}
    for (topic, p), code in results.items():
        await ctx.turn()
        by_topic.setdefault(topic, []).append(part_cls(partition_index=p, error_code=E(code)))
    return make(cls, throttle_time=ZERO, topics=tuple(topic_cls(name=t, partitions=tuple(ps))
                                                       for t, ps in by_topic.items()))


async def handle_write_txn_markers(ctx: RequestContext, req: Any) -> Any:
    cls = ctx.response_cls
    broker = ctx.broker
    part_cls = nested(cls, "WritableTxnMarkerPartitionResult")
    topic_cls = nested(cls, "WritableTxnMarkerTopicResult")
    result_cls = nested(cls, "WritableTxnMarkerResult")
    # Brokers only: ALTER or CLUSTER_ACTION on the cluster, as Kafka asks.
    if not ctx.allowed(Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME) and \
            ctx.denied(Operation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
        refused = []
        for m in req.markers:
            topics = []
            for t in m.topics:
                topics.append(topic_cls(name=t.name, partitions=await ctx.built(
                    t.partition_indexes, lambda p: part_cls(partition_index=p,
                                                            error_code=E.cluster_authorization_failed))))
            refused.append(result_cls(producer_id=m.producer_id, topics=tuple(topics)))
        return make(cls, markers=tuple(refused))
    out = []
    for marker in req.markers:
        targets = [(topic.name, p) for topic in marker.topics for p in topic.partition_indexes]
        # Every marker appended first, then waited for together (acks=all); started a step's worth at a time.
        writes: list[asyncio.Future[E]] = []
        for t, p in targets:
            await ctx.turn()
            writes.append(asyncio.ensure_future(broker.write_marker(t, p, marker.producer_id, marker.producer_epoch,
                                                                    marker.transaction_result,
                                                                    marker.coordinator_epoch)))
        errors = await asyncio.gather(*writes)
        by_topic: dict[str, list] = {}
        for (t, p), error in zip(targets, errors, strict=True):
            await ctx.turn()
            by_topic.setdefault(t, []).append(part_cls(partition_index=p, error_code=error))
        out.append(result_cls(producer_id=marker.producer_id,
                              topics=await ctx.built_by_key(by_topic, lambda t, ps: topic_cls(name=t, partitions=ps))))
    return make(cls, markers=tuple(out))


async def handle_describe_transactions(ctx: RequestContext, req: Any) -> Any:
    cls = ctx.response_cls
    state_cls = nested(cls, "TransactionState")
    topic_cls = nested(cls, "TopicData")
    states = []
    for tid in req.transactional_ids:
        await ctx.turn()
        if ctx.denied(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid):
            error, meta = E.transactional_id_authorization_failed, None
        else:
            error, meta = ctx.broker.txn_coordinator.describe(tid)
        if meta is None:
            states.append(state_cls(error_code=error, transactional_id=tid, transaction_state="",
                                    transaction_timeout=ZERO, transaction_start_time=UNKNOWN_TIME, producer_id=-1,
                                    producer_epoch=-1, topics=()))
            continue
        by_topic: dict[str, list[int]] = {}
        await ctx.turn(len(meta.partitions))
        for topic, p in sorted(meta.partitions):  # only the partitions of topics the principal may describe
            if ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, topic):
                by_topic.setdefault(topic, []).append(p)
        states.append(state_cls(error_code=E.none, transactional_id=tid, transaction_state=meta.state.kafka_name,
                                transaction_timeout=datetime.timedelta(milliseconds=meta.timeout_ms),
                                transaction_start_time=ms_to_datetime(meta.start_ms) or UNKNOWN_TIME,
                                producer_id=meta.producer_id, producer_epoch=meta.producer_epoch,
                                topics=await ctx.built_by_key(by_topic,
                                                              lambda t, ps: topic_cls(topic=t, partitions=ps))))
    return make(cls, throttle_time=ZERO, transaction_states=tuple(states))


KNOWN_STATES = {"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort",
                "PrepareEpochFence", "Dead"}


async def handle_list_transactions(ctx: RequestContext, req: Any) -> Any:
    cls = ctx.response_cls
    state_cls = nested(cls, "TransactionState")
    wanted = set(req.state_filters)
    listed = ctx.broker.txn_coordinator.listing(wanted & KNOWN_STATES if wanted else set(),
                                                set(req.producer_id_filters), getattr(req, "duration_filter", -1))
    if wanted and not wanted & KNOWN_STATES:
        listed = []
    listed = [m for m in listed if ctx.allowed(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, m.transactional_id)]
    return make(cls, throttle_time=ZERO, error_code=E.none, unknown_state_filters=tuple(sorted(wanted - KNOWN_STATES)),
                transaction_states=tuple(state_cls(transactional_id=m.transactional_id, producer_id=m.producer_id,
                                                   transaction_state=m.state.kafka_name) for m in listed))


async def handle_describe_producers(ctx: RequestContext, req: Any) -> Any:
    cls = ctx.response_cls
    broker = ctx.broker
    producer_cls = nested(cls, "ProducerState")
    partition_cls = nested(cls, "PartitionResponse")
    topic_cls = nested(cls, "TopicResponse")
    topics = []
    for topic in req.topics:
        partitions = []
        denied = ctx.denied(Operation.READ, ResourceType.TOPIC, topic.name)
        for index in topic.partition_indexes:
            await ctx.turn()
            if denied:
                partitions.append(partition_cls(partition_index=index, error_code=E.topic_authorization_failed,
                                                active_producers=()))
                continue
            part = broker.partition(topic.name, index)
            if part is None or not part.is_leader:
                error = broker.missing_partition_error(topic.name, index) if part is None else \
                    E.not_leader_or_follower
                partitions.append(partition_cls(partition_index=index, error_code=error, active_producers=()))
                continue
            producers = tuple(
                producer_cls(producer_id=pid, producer_epoch=e.epoch,
                             last_sequence=e.batches[-1].last_seq if e.batches else -1,
                             last_timestamp=e.last_timestamp, coordinator_epoch=e.coordinator_epoch,
                             current_txn_start_offset=e.txn_first_offset if e.txn_first_offset is not None else -1)
                for pid, e in sorted(part.log.producers.producers.items()))
            await ctx.turn(len(producers))
            partitions.append(partition_cls(partition_index=index, error_code=E.none, active_producers=producers))
        topics.append(topic_cls(name=topic.name, partitions=tuple(partitions)))
    return make(cls, throttle_time=ZERO, topics=tuple(topics))
