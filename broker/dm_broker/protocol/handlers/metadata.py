"""Metadata, ApiVersions and DescribeCluster: what the cluster looks like to a client."""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from ...controller.models import TopicDoc
from ...endpoints import endpoint_on as _fenced_endpoint
from ...errors import KafkaError
from ...topics import INTERNAL_TOPICS
from ..build import ZERO, make, nested
from ..dispatch import CLIENT_SOFTWARE, RequestContext, api_versions_response

NULL_UUID = uuid.UUID(int=0)


async def handle_api_versions(ctx: RequestContext, req: Any) -> Any:
    name = getattr(req, "client_software_name", None)
    version = getattr(req, "client_software_version", None)
    dispatcher = ctx.broker.dispatcher
    if ctx.version >= 3 and not (CLIENT_SOFTWARE.match(name or "") and CLIENT_SOFTWARE.match(version or "")):
        return api_versions_response(ctx.response_cls, dispatcher, ErrorCode.invalid_request)
    return api_versions_response(ctx.response_cls, dispatcher)


def _topic_metadata(ctx: RequestContext, topic: TopicDoc) -> Any:
    cls = ctx.response_cls
    part_cls = nested(cls, "MetadataResponsePartition")
    topic_cls = nested(cls, "MetadataResponseTopic")
    live = {e.node_id for e in ctx.broker.endpoints()}
    partitions = []
    for i, state in enumerate(topic.partitions):
        error = ErrorCode.none if state.leader in live else ErrorCode.leader_not_available
        partitions.append(make(
            part_cls, error_code=error, partition_index=i, leader_id=state.leader if state.leader in live else -1,
            leader_epoch=state.leader_epoch, replica_nodes=tuple(state.replicas), isr_nodes=tuple(state.isr),
            offline_replicas=tuple(r for r in state.replicas if r not in live),
        ))
    return make(topic_cls, error_code=ErrorCode.none, name=topic.name, topic_id=topic.uuid,
                is_internal=topic.name in INTERNAL_TOPICS, partitions=tuple(partitions))


async def _wait_for_suspected_leaders(broker: Any, requested: Any) -> None:
    """A leader this broker just lost its connection to is probably gone: answer once the controller
    has ruled on it (tens of milliseconds), not with the dead leader (see Broker.suspect)."""
    docs = broker.topics().values() if requested is None else \
        [t for t in (broker.topic(e.name) for e in requested if e.name) if t is not None]
    leaders = {p.leader for doc in docs for p in doc.partitions}
    if any(broker.suspected(n) for n in leaders):
        await broker.wait_for_verdict(leaders, timeout=1.0)


def _missing(ctx: RequestContext, name: str | None, topic_id: uuid.UUID | None, error: ErrorCode) -> Any:
    topic_cls = nested(ctx.response_cls, "MetadataResponseTopic")
    return make(topic_cls, error_code=error, name=name, topic_id=topic_id or NULL_UUID, is_internal=False,
                partitions=())


async def handle_metadata(ctx: RequestContext, req: Any) -> Any:
    broker = ctx.broker
    cls = ctx.response_cls
    broker_cls = nested(cls, "MetadataResponseBroker")
    requested = req.topics
    if ctx.version == 0 and requested == ():
        requested = None  # v0: an empty list means every topic
    auto_create = getattr(req, "allow_auto_topic_creation", True)
    await _wait_for_suspected_leaders(broker, requested)
    topics = []
    if requested is None:
        topics = [_topic_metadata(ctx, t) for t in broker.topics().values()]
    else:
        for entry in requested:
            name = entry.name
            topic_id = getattr(entry, "topic_id", None)
            if name is None:
                found = broker.topic_by_id(topic_id) if topic_id else None
                topics.append(_topic_metadata(ctx, found) if found else
                              _missing(ctx, None, topic_id, ErrorCode.unknown_topic_id))
                continue
            topic = broker.topic(name)
            if topic is None and auto_create:
                try:
                    topic = await broker.auto_create(name)
                except KafkaError as exc:
                    topics.append(_missing(ctx, name, None, exc.code))
                    continue
            topics.append(_topic_metadata(ctx, topic) if topic else
                          _missing(ctx, name, None, ErrorCode.unknown_topic_or_partition))
    brokers = tuple(make(broker_cls, node_id=e.node_id, host=e.host, port=e.port, rack=e.rack)
                    for e in broker.listed_endpoints(ctx.listener_name))
    return make(cls, throttle_time=ZERO, brokers=brokers, cluster_id=broker.cluster_id,
                controller_id=broker.controller_id, topics=tuple(topics), error_code=ErrorCode.none)


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
    return make(cls, throttle_time=ZERO, error_code=ErrorCode.none, error_message=None, endpoint_type=1,
                cluster_id=broker.cluster_id, controller_id=broker.controller_id, brokers=brokers)
