"""Produce: validate each partition's batch, append it as leader, answer per partition."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from ...errors import KafkaError
from ...log import inflate, recompress, timestamps
from ...log.dir_failure import LogDirFailure
from ...log.producer_state import InvalidProducerEpochError, InvalidTxnStateError, OutOfOrderSequenceError
from ...log.record_check import RecordSummary, check_records
from ...log.records import (
    MAX_DECOMPRESSED_BYTES,
    CorruptRecordError,
    DecompressedTooLargeError,
    InvalidRecordError,
    RecordTooLargeError,
    parse_header,
    renumbered,
    set_max_timestamp,
    validate_batches,
)
from ...quotas.entities import PRODUCER_BYTE_RATE
from ...replication.partition import NotEnoughReplicasError, NotLeaderError, Partition
from ...security.acls import Operation, ResourceType
from ...topics import INTERNAL_TOPICS
from ..build import ZERO, make, ms_to_datetime, nested, nested_optional
from ..dispatch import RequestContext

# What a batch compressed with snappy, lz4 or zstd may decompress to for its records to be checked on the
# event loop (about 1 ms of lz4 at most); larger ones, zip bombs among them, and gzip go to a thread.
INLINE_DECOMPRESSED_BYTES = 1 << 20

TV2_PRODUCE = 12  # Produce from this version on: the client sends no AddPartitionsToTxn (KIP-890)
# How long a batch after a gap in its producer's sequence waits for the batches before it (ADR 0060), and how often
# it looks: the earlier batch is asked again of this leader once the old leader refused it (a round trip and a
# metadata refresh of the client's).
SEQUENCE_GAP_WAIT_S = 3.0
SEQUENCE_GAP_POLL_S = 0.005


@dataclass(slots=True)
class _Outcome:
    """One partition's answer, filled in as the request proceeds."""

    index: int
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    record_errors: tuple[Any, ...] = ()
    base_offset: int = -1
    append_time: int = -1
    log_start: int = -1
    commit: tuple[Partition, int] | None = None  # acks=all: the offset the partition's ISR must reach


async def handle(ctx: RequestContext, req: Any) -> Any:
    """Appends every partition's batch first, then (acks=all) waits for the ISR on all of them
    at once; once the appends are done the connection may read its next request (ADR 0003)."""
    cls = ctx.response_cls
    topic_cls = nested(cls, "TopicProduceResponse")
    part_cls = nested(cls, "PartitionProduceResponse")
    batch_error_cls = nested_optional(cls, "BatchIndexAndErrorMessage")
    # Authorized once per request and topic, as Kafka does, not for every partition.
    txn_refusal = KafkaError(ErrorCode.transactional_id_authorization_failed,
                             f"WRITE on transactional id {req.transactional_id} is not allowed") \
        if req.transactional_id is not None and ctx.denied(Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                                           req.transactional_id) else None
    outcomes = []
    for topic in req.topic_data:
        refusal = txn_refusal or (KafkaError(ErrorCode.topic_authorization_failed,
                                             f"WRITE on topic {topic.name} is not allowed")
                                  if ctx.denied(Operation.WRITE, ResourceType.TOPIC, topic.name) else None)
        parts = []
        for pdata in topic.partition_data:
            await ctx.turn()
            parts.append(await _append(ctx, req, topic.name, pdata, batch_error_cls, refusal))
        outcomes.append((topic.name, parts))
    # Kafka counts the request's size against producer_byte_rate, appended or not; the throttle
    # mutes the connection before its next request is read.
    ctx.record_quota(PRODUCER_BYTE_RATE, ctx.size)
    ctx.release_order()
    # One after another against one deadline: every batch is already appended, so this takes as
    # long as the slowest partition, without a task per partition.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + req.timeout.total_seconds()
    for outcome in (o for _, parts in outcomes for o in parts if o.commit is not None):
        part, offset = outcome.commit
        try:
            await part.wait_committed(offset, max(deadline - loop.time(), 0))
        except Exception as exc:
            _fail(ctx, outcome, exc, batch_error_cls)
    if req.acks == 0:
        return None
    return make(cls, responses=tuple(make(topic_cls, name=name, partition_responses=tuple(make(
        part_cls, index=o.index, error_code=o.error, base_offset=o.base_offset,
        log_append_time=ms_to_datetime(o.append_time), log_start_offset=o.log_start,
        record_errors=o.record_errors, error_message=o.message,
    ) for o in parts)) for name, parts in outcomes), throttle_time=ZERO)


async def _append(ctx: RequestContext, req: Any, topic: str, pdata: Any, batch_error_cls: type | None,
                  refusal: KafkaError | None) -> _Outcome:
    broker = ctx.broker
    outcome = _Outcome(pdata.index)
    if refusal is not None:
        # Not raised: one refusal shared by a topic's partitions, raised for each, would chain a traceback (and
        # with it a frame) per partition onto itself: a reference cycle of 140,000 objects for 20,000 partitions
        # that only a collection of the old generations frees, 50-100 ms with the loop stopped (issue 65).
        _fail(ctx, outcome, refusal, batch_error_cls)
        return outcome
    try:
        if req.acks not in (0, 1, -1):
            raise KafkaError(ErrorCode.invalid_required_acks, f"acks must be 0, 1 or -1, got {req.acks}")
        part = broker.partition(topic, pdata.index)
        if part is None:
            raise KafkaError(broker.missing_partition_error(topic, pdata.index),
                             f"{topic}-{pdata.index} is not on broker {broker.node_id}")
        if not part.is_leader:
            raise KafkaError(ErrorCode.not_leader_or_follower,
                             f"broker {broker.node_id} does not lead {topic}-{pdata.index}")
        if topic in INTERNAL_TOPICS:
            raise KafkaError(ErrorCode.invalid_topic_exception, f"{topic} is internal; clients cannot write to it")
        records = pdata.records
        if not records:
            raise KafkaError(ErrorCode.invalid_record, "no records")
        settings = part.log.settings
        headers = validate_batches(records, settings["max.message.bytes"])
        if len(headers) != 1:
            raise KafkaError(ErrorCode.invalid_record, "a produce request carries exactly one batch per partition")
        header = headers[0]
        if header.is_control:
            raise KafkaError(ErrorCode.invalid_record, "clients cannot write control batches (transaction markers)")
        if (req.transactional_id is not None) != header.is_transactional:
            raise KafkaError(ErrorCode.invalid_record, "transactional batches come with a transactional id, and only "
                                                       "they do")
        if header.is_transactional:
            if header.producer_id < 0:
                raise KafkaError(ErrorCode.invalid_record, "a transactional batch needs a producer id")
            await _verify(ctx, req.transactional_id, topic, part, header)
        limits = timestamps.window(settings)
        summary = await _checked(header, records, details=settings.compacted or limits is not None)  # ADR 0048
        if summary.renumber:  # a compressed batch whose inner offsets do not run on: renumbered, as Kafka does
            records = await recompress.rewritten(renumbered, records, summary.inflated)
            headers = validate_batches(records, settings["max.message.bytes"])
            header = headers[0]
        if summary.largest_timestamp != header.max_timestamp and settings["message.timestamp.type"] == "CreateTime":
            # As Kafka's LogValidator: the batch's max timestamp is its records' (the time index and time
            # retention go by it), whatever the producer wrote there.
            records = bytearray(records)
            set_max_timestamp(records, 0, summary.largest_timestamp)
            header = parse_header(records)
            headers = [header]
        if limits is not None:
            refused = timestamps.refused_records(summary.timestamps, header.base_offset, limits,
                                                 int(time.time() * 1000))
            if refused:
                raise KafkaError(ErrorCode.invalid_timestamp, refused[0][1], refused)
        if settings.compacted and summary.keyless:
            # KIP-467: which records were refused, so the client fails those and sends the others again.
            message = f"Compacted topic cannot accept message without key in topic partition {topic}-{pdata.index}."
            raise KafkaError(ErrorCode.invalid_record, message, [(i, message) for i in summary.keyless])
        stored_as = recompress.target(settings)
        if stored_as is not None and header.compression != stored_as[0]:
            records = await recompress.recompress(records, summary.inflated, *stored_as)
            headers = validate_batches(records, settings["max.message.bytes"])
            header = headers[0]
        if req.acks == -1:
            part.check_min_isr()
        refused = broker.free_space.refusal(part.log.log_dir, len(records))
        if refused is not None:  # ADR 0043: the producer retries until there is room again
            raise KafkaError(ErrorCode.kafka_storage_error, refused)
        if part.log.producers.ahead_of(header):
            await _wait_for_the_gap(ctx, part, header)
        result = await part.append_as_leader(records, headers)
        if req.acks == -1:
            # also for a retried batch: its first attempt may not be committed yet
            outcome.commit = (part, result.last_offset + 1)
        outcome.base_offset, outcome.append_time = result.base_offset, result.log_append_time
        outcome.log_start = part.log.log_start_offset
        if not result.duplicate:
            broker.metrics.bytes_in.labels(topic).inc(len(records))
            broker.metrics.messages_in.labels(topic).inc(headers[0].records_count)
    except Exception as exc:
        _fail(ctx, outcome, exc, batch_error_cls)
    return outcome


async def _wait_for_the_gap(ctx: RequestContext, part: Partition, header: Any) -> None:
    """ADR 0060: a batch of an idempotent producer that comes after a gap in its sequence waits, up to
    SEQUENCE_GAP_WAIT_S, for the batches before it. librdkafka, when a partition's leadership moves, may send a
    later batch to the new leader while an earlier one is still on its way to the old leader, which answers it
    NOT_LEADER_OR_FOLLOWER; the new leader answered the later one OUT_OF_ORDER_SEQUENCE_NUMBER, and librdkafka
    then bumped its producer epoch and sent every batch it had not seen acknowledged again under the new epoch,
    where no leader can recognise them: 50 records written twice (issue 65). Waiting, the earlier batch arrives
    (asked again of this leader), is appended, and the later one follows it. Meanwhile the connection's next
    requests are read, since the earlier batch may come on this very connection. A gap that stays is answered
    OUT_OF_ORDER_SEQUENCE_NUMBER as before."""
    ctx.release_order()
    deadline = time.monotonic() + SEQUENCE_GAP_WAIT_S
    while part.log.producers.ahead_of(header) and part.is_leader and time.monotonic() < deadline:
        await asyncio.sleep(SEQUENCE_GAP_POLL_S)


async def _checked(header: Any, records: Any, details: bool) -> RecordSummary:
    """check_records on the loop when the batch is not compressed, or is compressed with a fast codec and
    decompresses to at most INLINE_DECOMPRESSED_BYTES; in a thread otherwise, since what a batch
    decompresses to (up to MAX_DECOMPRESSED_BYTES) is not known before and would stall every connection.
    A hop costs 50-100 µs, and a connection reads its next request only after the check: with every
    compressed batch checked in a thread, lz4 produce ran 15 % slower than with this."""
    if header.compression == 0:
        return check_records(records, details=details)
    # gzip inflates at a fifth of lz4's speed: 4 ms for a 1 MB batch
    if header.compression != recompress.CODECS["gzip"]:
        try:
            return check_records(records, INLINE_DECOMPRESSED_BYTES, details)
        except DecompressedTooLargeError:
            pass
    return await inflate.off_loop(check_records, bytes(records), MAX_DECOMPRESSED_BYTES, details)


async def _verify(ctx: RequestContext, tid: str, topic: str, part: Partition, header: Any) -> None:
    """KIP-890: the first write of a transaction in this partition belongs to the producer's ongoing
    transaction, as its coordinator says (which adds the partition for a client of Produce v12+)."""
    broker = ctx.broker
    pid, epoch = header.producer_id, header.producer_epoch
    if part.log.producers.in_transaction(pid, epoch) or not broker.dynamic("transaction.partition.verification.enable"):
        return
    guard = part.marker_count(pid)
    error = await broker.txn_verifier.check(tid, pid, epoch, topic, part.index, add=ctx.version >= TV2_PRODUCE)
    if error == ErrorCode.none and part.marker_count(pid) != guard:
        error = ErrorCode.transaction_abortable  # a marker ended a transaction of the producer meanwhile
    if error == ErrorCode.none:
        return
    if error in (ErrorCode.transaction_abortable, ErrorCode.invalid_producer_id_mapping):
        code = ErrorCode.transaction_abortable if ctx.version >= TV2_PRODUCE else ErrorCode.invalid_txn_state
        raise KafkaError(code, f"producer {pid} epoch {epoch} has no ongoing transaction with {topic}-{part.index}")
    if error == ErrorCode.producer_fenced:
        raise KafkaError(ErrorCode.invalid_producer_epoch, f"producer {pid} epoch {epoch} is fenced")
    # The coordinator could not answer (moving, loading, busy): a retriable error the producer knows.
    raise KafkaError(ErrorCode.not_enough_replicas, f"the transaction coordinator cannot verify the write yet: "
                                                    f"{error.name}")


def _fail(ctx: RequestContext, outcome: _Outcome, exc: BaseException, batch_error_cls: type | None) -> None:
    """Maps an append or commit failure to the partition's error code; anything else is a bug
    and propagates."""
    if isinstance(exc, KafkaError):
        outcome.error, outcome.message = exc.code, exc.message
        if exc.record_errors and batch_error_cls is not None:
            outcome.record_errors = tuple(batch_error_cls(batch_index=i, batch_index_error_message=m)
                                          for i, m in exc.record_errors)
    elif isinstance(exc, LogDirFailure):  # the broker is stopping (ADR 0041): the client retries elsewhere
        outcome.error, outcome.message = ErrorCode.kafka_storage_error, str(exc)
    elif isinstance(exc, TimeoutError):
        outcome.error = ErrorCode.request_timed_out
        outcome.message = "the ISR did not confirm the batch in time; it may still be committed"
    elif isinstance(exc, NotLeaderError):
        outcome.error, outcome.message = ErrorCode.not_leader_or_follower, str(exc)
    elif isinstance(exc, NotEnoughReplicasError):
        outcome.error = ErrorCode.not_enough_replicas_after_append if exc.after_append else \
            ErrorCode.not_enough_replicas
        outcome.message = str(exc)
    elif isinstance(exc, RecordTooLargeError):
        outcome.error, outcome.message = ErrorCode.message_too_large, str(exc)
    elif isinstance(exc, CorruptRecordError):
        outcome.error, outcome.message = ErrorCode.corrupt_message, str(exc)
    elif isinstance(exc, InvalidRecordError):
        outcome.error, outcome.message = ErrorCode.invalid_record, str(exc)
        if batch_error_cls is not None:
            outcome.record_errors = (batch_error_cls(batch_index=0, batch_index_error_message=str(exc)),)
    elif isinstance(exc, OutOfOrderSequenceError):
        outcome.error, outcome.message = ErrorCode.out_of_order_sequence_number, str(exc)
    elif isinstance(exc, InvalidProducerEpochError):
        outcome.error, outcome.message = ErrorCode.invalid_producer_epoch, str(exc)
    elif isinstance(exc, InvalidTxnStateError):
        outcome.error, outcome.message = ErrorCode.invalid_txn_state, str(exc)
    else:
        raise exc
    outcome.base_offset = outcome.append_time = outcome.log_start = -1
    ctx.broker.metrics.request_errors.labels("produce", outcome.error.name).inc()
