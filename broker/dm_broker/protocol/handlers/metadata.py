"""Metadata, ApiVersions and DescribeCluster: what the cluster looks like to a client."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from ...controller.models import TopicDoc
from ...endpoints import endpoint_on as _fenced_endpoint
from ...errors import KafkaError
from ...ports import LeaderVerdicts
from ...security.acls import CLUSTER_NAME, OPERATIONS, Operation, ResourceType
from ...steps import PARTITIONS_PER_STEP
from ...topics import INTERNAL_TOPICS
from ..build import ZERO, make, nested
from ..codec import EncodedResponse
from ..dispatch import CLIENT_SOFTWARE, RequestContext, api_versions_response
from ..metadata_encoder import TopicEntries, encode_metadata_response, encode_topic

NULL_UUID = uuid.UUID(int=0)


class _Turns:
    """Gives the loop its turn once a request has encoded PARTITIONS_PER_STEP partitions since the last: after
    a wave of leader or ISR changes a full Metadata request at 10,000 partitions re-encodes all of them."""

    def __init__(self, entries: TopicEntries) -> None:
        self._entries = entries
        self._mark = entries.partitions_encoded

    async def now_and_then(self) -> None:
        if self._entries.partitions_encoded - self._mark >= PARTITIONS_PER_STEP:
            await asyncio.sleep(0)
            self._mark = self._entries.partitions_encoded


async def handle_api_versions(ctx: RequestContext, req: Any) -> Any:
    name = getattr(req, "client_software_name", None)
    version = getattr(req, "client_software_version", None)
    dispatcher = ctx.broker.dispatcher
    if ctx.version >= 3 and not (CLIENT_SOFTWARE.match(name or "") and CLIENT_SOFTWARE.match(version or "")):
        return api_versions_response(ctx.response_cls, dispatcher, ErrorCode.invalid_request)
    return api_versions_response(ctx.response_cls, dispatcher)


def _authorized_operations(ctx: RequestContext, resource_type: ResourceType, name: str) -> int:
    """Kafka's bit field of what this principal may do with a resource (when a client asks; 0 for
    one it may not even describe, as Kafka answers)."""
    security = ctx.broker.security
    if not security.authorization:
        return sum(1 << op for op in OPERATIONS.get(resource_type, ()))
    if not ctx.allowed(Operation.DESCRIBE, resource_type, name):
        return 0
    return security.authorizer.operations(ctx.session.principal, ctx.session.host, resource_type, name)


def _topic_metadata(ctx: RequestContext, topic: TopicDoc, live: frozenset[int], with_operations: bool = False
                    ) -> bytes:
    """The topic's encoded entry: kept between requests while its document, the live brokers and what
    this principal may do with it stay the same."""
    operations = _authorized_operations(ctx, ResourceType.TOPIC, topic.name) if with_operations else None
    topic_cls = nested(ctx.response_cls, "MetadataResponseTopic")
    key = (topic.topic_id, topic.version, live, operations)
    return ctx.broker.metadata_entries.get(topic_cls, topic.name, key,
                                           lambda: _topic_entity(ctx, topic, live, operations))


def _topic_entity(ctx: RequestContext, topic: TopicDoc, live: frozenset[int], operations: int | None) -> Any:
    cls = ctx.response_cls
    part_cls = nested(cls, "MetadataResponsePartition")
    topic_cls = nested(cls, "MetadataResponseTopic")
    partitions = tuple(make(part_cls, **_partition_fields(i, state, live)) for i, state in enumerate(topic.partitions))
    extra = {"topic_authorized_operations": operations} if operations is not None else {}
    return make(topic_cls, error_code=ErrorCode.none, name=topic.name, topic_id=topic.uuid,
                is_internal=topic.name in INTERNAL_TOPICS, partitions=partitions, **extra)


def _partition_fields(index: int, state: Any, live: frozenset[int]) -> dict[str, Any]:
    """A partition as Metadata and DescribeTopicPartitions describe it: a leader that is not live is none."""
    led = state.leader in live
    return {"error_code": ErrorCode.none if led else ErrorCode.leader_not_available, "partition_index": index,
            "leader_id": state.leader if led else -1, "leader_epoch": state.leader_epoch,
            "replica_nodes": tuple(state.replicas), "isr_nodes": tuple(state.isr),
            "offline_replicas": tuple(r for r in state.replicas if r not in live)}


async def _wait_for_suspected_leaders(broker: LeaderVerdicts, requested: Any) -> None:
    """A leader this broker just lost its connection to is probably gone: answer once the controller
    has ruled on it (tens of milliseconds), not with the dead leader (see Broker.suspect)."""
    docs = broker.topics().values() if requested is None else \
        [t for t in (broker.topic(e.name) for e in requested if e.name) if t is not None]
    leaders = {p.leader for doc in docs for p in doc.partitions}
    if any(broker.suspected(n) for n in leaders):
        await broker.wait_for_verdict(leaders, timeout=1.0)


def _missing(ctx: RequestContext, name: str | None, topic_id: uuid.UUID | None, error: ErrorCode) -> bytes:
    topic_cls = nested(ctx.response_cls, "MetadataResponseTopic")
    return encode_topic(topic_cls, make(topic_cls, error_code=error, name=name, topic_id=topic_id or NULL_UUID,
                                        is_internal=False, partitions=()))


async def handle_metadata(ctx: RequestContext, req: Any) -> Any:
    broker = ctx.broker
    cls = ctx.response_cls
    broker_cls = nested(cls, "MetadataResponseBroker")
    requested = req.topics
    if ctx.version == 0 and requested == ():
        requested = None  # v0: an empty list means every topic
    auto_create = getattr(req, "allow_auto_topic_creation", True)
    with_ops = getattr(req, "include_topic_authorized_operations", False)
    if requested is not None and ctx.version < 12 and any(
            e.name is None or getattr(e, "topic_id", None) not in (None, NULL_UUID) for e in requested):
        # v10 and v11 have a topic id in the request's schema, but no null name in the answer and no lookup
        # by id: Kafka refuses the request (every topic INVALID_REQUEST, a null name answered as "")
        return _refused(ctx, requested, ErrorCode.invalid_request)
    await _wait_for_suspected_leaders(broker, requested)

    def describable(name: str) -> bool:
        return ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, name)

    live = frozenset(e.node_id for e in broker.endpoints())
    topics: list[bytes] = []
    turns = _Turns(broker.metadata_entries)
    if requested is None:  # every topic this principal may describe, and no word of the others
        everything = broker.topics()
        for t in everything.values():
            if describable(t.name):
                topics.append(_topic_metadata(ctx, t, live, with_ops))
                await turns.now_and_then()
        if len(broker.metadata_entries) > 2 * len(everything) + 64:
            broker.metadata_entries.forget_except(set(everything))
    else:
        for entry in requested:
            await turns.now_and_then()  # for what the entries before this one encoded
            await ctx.turn()  # for the entries themselves (named, missing or refused: no partitions)
            name = entry.name
            topic_id = getattr(entry, "topic_id", None)
            if name is None:
                found = broker.topic_by_id(topic_id) if topic_id else None
                if found is not None and ctx.denied(Operation.DESCRIBE, ResourceType.TOPIC, found.name):
                    topics.append(_missing(ctx, None, topic_id, ErrorCode.topic_authorization_failed))
                    continue
                topics.append(_topic_metadata(ctx, found, live, with_ops) if found else
                              _missing(ctx, None, topic_id, ErrorCode.unknown_topic_id))
                continue
            if ctx.denied(Operation.DESCRIBE, ResourceType.TOPIC, name):
                topics.append(_missing(ctx, name, None, ErrorCode.topic_authorization_failed))
                continue
            topic = broker.topic(name)
            if topic is None and auto_create and _may_create(ctx, name):
                try:
                    topic = await broker.auto_create(name)
                except KafkaError as exc:
                    topics.append(_missing(ctx, name, None, exc.code))
                    continue
            topics.append(_topic_metadata(ctx, topic, live, with_ops) if topic else
                          _missing(ctx, name, None, ErrorCode.unknown_topic_or_partition))
    brokers = tuple(make(broker_cls, node_id=e.node_id, host=e.host, port=e.port, rack=e.rack)
                    for e in broker.listed_endpoints(ctx.listener_name))
    extra = {}
    if getattr(req, "include_cluster_authorized_operations", False):
        extra["cluster_authorized_operations"] = _authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)
    return _answer(ctx, brokers, broker.controller_id, topics, extra)


def _answer(ctx: RequestContext, brokers: tuple[Any, ...], controller_id: int, topics: list[bytes],
            extra: dict[str, Any] | None = None) -> EncodedResponse:
    """A Metadata answer around its topics' encoded entries."""
    cls = ctx.response_cls
    response = make(cls, throttle_time=ZERO, brokers=brokers, cluster_id=ctx.broker.cluster_id,
                    controller_id=controller_id, topics=(), error_code=ErrorCode.none, **(extra or {}))
    return EncodedResponse([encode_metadata_response(ctx.header.correlation_id, response, topics, cls.__flexible__)],
                           flexible_header=cls.__flexible__, throttle_first=ctx.version >= 3)


def _refused(ctx: RequestContext, requested: Any, error: ErrorCode) -> EncodedResponse:
    """Kafka's error answer to a Metadata request: each requested topic with `error`, and no brokers."""
    return _answer(ctx, (), -1, [_missing(ctx, entry.name or "", None, error) for entry in requested])


def _may_create(ctx: RequestContext, name: str) -> bool:
    """Kafka's rule for creating a topic: CREATE on the cluster, or on the topic."""
    return ctx.allowed(Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME) or \
        ctx.allowed(Operation.CREATE, ResourceType.TOPIC, name)


async def handle_describe_cluster(ctx: RequestContext, req: Any) -> Any:
    broker = ctx.broker
    cls = ctx.response_cls
    if getattr(req, "endpoint_type", 1) != 1:
        return make(cls, throttle_time=ZERO, error_code=ErrorCode.unsupported_endpoint_type,
                    error_message="dm brokers only describe broker endpoints", endpoint_type=req.endpoint_type,
                    cluster_id=broker.cluster_id, controller_id=-1, brokers=())
    broker_cls = nested(cls, "DescribeClusterBroker")
    brokers = [make(broker_cls, broker_id=e.node_id, host=e.host, port=e.port, rack=e.rack, is_fenced=False)
               for e in broker.endpoints(ctx.listener_name)]
    if getattr(req, "include_fenced_brokers", False) and broker.metadata is not None:
        fenced = [e for e in (_fenced_endpoint(b, ctx.listener_name) for b in broker.metadata.brokers if b.fenced)
                  if e is not None]
        brokers += [make(broker_cls, broker_id=e.node_id, host=e.host, port=e.port, rack=e.rack, is_fenced=True)
                    for e in fenced]
    brokers = tuple(brokers)
    extra = {}
    if getattr(req, "include_cluster_authorized_operations", False):
        extra["cluster_authorized_operations"] = _authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)
    return make(cls, throttle_time=ZERO, error_code=ErrorCode.none, error_message=None, endpoint_type=1,
                cluster_id=broker.cluster_id, controller_id=broker.controller_id, brokers=brokers, **extra)


async def handle_describe_topic_partitions(ctx: RequestContext, req: Any) -> Any:
    """KIP-966's paginated topic description (what Kafka 3.8+ admin clients ask instead of Metadata): the
    requested topics (every describable one when none is named) in name order, from the cursor on, at most
    min(the request's limit, max.request.partition.size.limit) partitions, and the cursor to go on from."""
    broker = ctx.broker
    cls = ctx.response_cls
    topic_cls = nested(cls, "DescribeTopicPartitionsResponseTopic")
    part_cls = nested(cls, "DescribeTopicPartitionsResponsePartition")
    cursor_cls = nested(cls, "Cursor")

    def failed(name: str, error: ErrorCode) -> Any:
        return make(topic_cls, error_code=error, name=name, topic_id=NULL_UUID, is_internal=False, partitions=())

    limit = max(1, min(req.response_partition_limit, broker.config["max.request.partition.size.limit"]))
    everything = broker.topics()
    if req.topics:
        names = sorted({t.name for t in req.topics})
    else:  # every topic this principal may describe, and no word of the others
        names = sorted(n for n in everything if ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, n))
    cursor = req.cursor
    if cursor is not None:
        if (req.topics and cursor.topic_name not in names) or cursor.partition_index < 0:
            # Kafka's error answer: every requested topic INVALID_REQUEST
            return make(cls, throttle_time=ZERO, next_cursor=None,
                        topics=await ctx.built(req.topics, lambda t: failed(t.name, ErrorCode.invalid_request)))
        names = [n for n in names if n >= cursor.topic_name]
    live = frozenset(e.node_id for e in broker.endpoints())
    topics: list[Any] = []
    next_cursor = None
    room = limit
    for name in names:
        await ctx.turn()
        first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        if room == 0:
            next_cursor = cursor_cls(topic_name=name, partition_index=first)
            break
        # an all-topics request named only what the principal may describe (checked above, not again)
        if req.topics and ctx.denied(Operation.DESCRIBE, ResourceType.TOPIC, name):
            topics.append(failed(name, ErrorCode.topic_authorization_failed))
            continue
        doc = everything.get(name)
        if doc is None:
            topics.append(failed(name, ErrorCode.unknown_topic_or_partition))
            continue
        shown = doc.partitions[first:first + room]
        room -= len(shown)
        partitions = tuple(make(part_cls, **_partition_fields(first + i, state, live),
                                eligible_leader_replicas=(), last_known_elr=())  # dm keeps no ELR (KIP-966)
                           for i, state in enumerate(shown))
        topics.append(make(topic_cls, error_code=ErrorCode.none, name=name, topic_id=doc.uuid,
                           is_internal=name in INTERNAL_TOPICS, partitions=partitions,
                           topic_authorized_operations=_authorized_operations(ctx, ResourceType.TOPIC, name)))
        if first + len(shown) < len(doc.partitions):
            next_cursor = cursor_cls(topic_name=name, partition_index=first + len(shown))
            break
    return make(cls, throttle_time=ZERO, topics=tuple(topics), next_cursor=next_cursor)
