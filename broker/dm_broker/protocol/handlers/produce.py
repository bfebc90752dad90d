"""Produce: validate each partition's batch, append it as leader, answer per partition."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...errors import KafkaError
from ...log.producer_state import InvalidProducerEpochError, OutOfOrderSequenceError
from ...log.records import (
    CorruptRecordError,
    InvalidRecordError,
    RecordTooLargeError,
    decode_records,
    validate_batches,
)
from ...replication.partition import NotLeaderError
from ...topics import INTERNAL_TOPICS
from ..build import ZERO, make, ms_to_datetime, nested, nested_optional
from ..dispatch import RequestContext


async def handle(ctx: RequestContext, req: Any) -> Any:
    broker = ctx.broker
    cls = ctx.response_cls
    topic_cls = nested(cls, "TopicProduceResponse")
    part_cls = nested(cls, "PartitionProduceResponse")
    batch_error_cls = nested_optional(cls, "BatchIndexAndErrorMessage")
    metrics = broker.metrics
    topics = []
    for topic in req.topic_data:
        results = []
        for pdata in topic.partition_data:
            error, message, base_offset, append_time, start = ErrorCode.none, None, -1, -1, -1
            record_errors: tuple[Any, ...] = ()
            try:
                if req.transactional_id is not None:
                    raise KafkaError(ErrorCode.transactional_id_authorization_failed,
                                     "transactions are not supported by dm")
                if req.acks not in (0, 1, -1):
                    raise KafkaError(ErrorCode.invalid_required_acks, f"acks must be 0, 1 or -1, got {req.acks}")
                part = broker.partition(topic.name, pdata.index)
                if part is None:
                    raise KafkaError(broker.missing_partition_error(topic.name, pdata.index),
                                     f"{topic.name}-{pdata.index} is not on broker {broker.node_id}")
                if not part.is_leader:
                    raise KafkaError(ErrorCode.not_leader_or_follower,
                                     f"broker {broker.node_id} does not lead {topic.name}-{pdata.index}")
                if topic.name in INTERNAL_TOPICS:
                    raise KafkaError(ErrorCode.invalid_topic_exception,
                                     f"{topic.name} is internal; clients cannot write to it")
                records = pdata.records
                if not records:
                    raise KafkaError(ErrorCode.invalid_record, "no records")
                settings = part.log.settings
                headers = validate_batches(records, settings["max.message.bytes"])
                if len(headers) != 1:
                    raise KafkaError(ErrorCode.invalid_record, "a produce request carries exactly one batch "
                                     "per partition")
                if headers[0].is_transactional or headers[0].is_control:
                    raise KafkaError(ErrorCode.invalid_record, "transactional batches are not supported by dm")
                if settings.compacted and any(r.key is None for r in decode_records(records)):
                    raise KafkaError(ErrorCode.invalid_record, "compacted topics only accept records with a key")
                if req.acks == -1 and len(part.isr) < settings["min.insync.replicas"]:
                    raise KafkaError(ErrorCode.not_enough_replicas,
                                     f"ISR {part.isr} is smaller than min.insync.replicas="
                                     f"{settings['min.insync.replicas']}")
                result = await part.append_as_leader(records, headers)
                if req.acks == -1:
                    # also for a retried batch: its first attempt may not be committed yet
                    try:
                        await part.wait_for_hw(result.last_offset + 1, req.timeout.total_seconds())
                    except TimeoutError:
                        raise KafkaError(ErrorCode.request_timed_out, "the ISR did not confirm the batch in "
                                         "time; it may still be committed") from None
                base_offset, append_time = result.base_offset, result.log_append_time
                start = part.log.log_start_offset
                if not result.duplicate:
                    metrics.bytes_in.labels(topic.name).inc(len(records))
                    metrics.messages_in.labels(topic.name).inc(headers[0].records_count)
            except KafkaError as exc:
                error, message = exc.code, exc.message
            except NotLeaderError as exc:
                error, message = ErrorCode.not_leader_or_follower, str(exc)
            except RecordTooLargeError as exc:
                error, message = ErrorCode.message_too_large, str(exc)
            except CorruptRecordError as exc:
                error, message = ErrorCode.corrupt_message, str(exc)
            except InvalidRecordError as exc:
                error, message = ErrorCode.invalid_record, str(exc)
                if batch_error_cls is not None:
                    record_errors = (batch_error_cls(batch_index=0, batch_index_error_message=str(exc)),)
            except OutOfOrderSequenceError as exc:
                error, message = ErrorCode.out_of_order_sequence_number, str(exc)
            except InvalidProducerEpochError as exc:
                error, message = ErrorCode.invalid_producer_epoch, str(exc)
            if error != ErrorCode.none:
                metrics.request_errors.labels("produce", error.name).inc()
            results.append(make(
                part_cls, index=pdata.index, error_code=error, base_offset=base_offset,
                log_append_time=ms_to_datetime(append_time), log_start_offset=start,
                record_errors=record_errors, error_message=message,
            ))
        topics.append(make(topic_cls, name=topic.name, partition_responses=tuple(results)))
    if req.acks == 0:
        return None
    return make(cls, responses=tuple(topics), throttle_time=ZERO)
