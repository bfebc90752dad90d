"""KIP-848 consumer group APIs: ConsumerGroupHeartbeat and ConsumerGroupDescribe (ADR 0037)."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from ...groups.assignors import Assignment
from ...groups.consumer_protocol import HeartbeatRequest
from ...security.acls import Operation, ResourceType
from ..build import ZERO, make, nested
from ..dispatch import RequestContext

UNKNOWN_OPERATIONS = -2147483648
MEMBER_TYPE_CLASSIC = 0
MEMBER_TYPE_CONSUMER = 1


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000) if isinstance(value, datetime.timedelta) else int(value)


def _owned(topic_partitions: Any) -> Assignment | None:
    if topic_partitions is None:
        return None
    return {str(tp.topic_id): frozenset(tp.partitions) for tp in topic_partitions if tp.partitions}


def topic_partitions(cls: type, assignment: Assignment, names: dict[str, str] | None = None) -> tuple[Any, ...]:
    """An assignment as the TopicPartitions entities of a heartbeat or describe answer."""
    out = []
    for topic_id in sorted(assignment):
        fields = {"topic_id": uuid.UUID(topic_id), "partitions": tuple(sorted(assignment[topic_id]))}
        if names is not None:
            fields["topic_name"] = names.get(topic_id, "")
        out.append(make(cls, **fields))
    return tuple(out)


def heartbeat_answer(cls: type, error: ErrorCode, message: str | None, member_id: str | None = None,
                     epoch: int = -1, interval_ms: int = 0, assignment: Assignment | None = None) -> Any:
    """A ConsumerGroupHeartbeat or ShareGroupHeartbeat response (the same fields)."""
    assignment_obj = None if assignment is None else make(
        nested(cls, "Assignment"), topic_partitions=topic_partitions(nested(cls, "TopicPartitions"), assignment))
    return make(cls, throttle_time=ZERO, error_code=error, error_message=message, member_id=member_id,
                member_epoch=epoch, heartbeat_interval=datetime.timedelta(milliseconds=interval_ms),
                assignment=assignment_obj)


def heartbeat_refusal(ctx: RequestContext, req: Any) -> Any | None:
    """Kafka's checks of a group heartbeat: READ on the group, DESCRIBE on each subscribed topic name."""
    if ctx.denied(Operation.READ, ResourceType.GROUP, req.group_id):
        return heartbeat_answer(ctx.response_cls, ErrorCode.group_authorization_failed,
                                f"READ on group {req.group_id} is not allowed")
    denied = sorted(n for n in set(req.subscribed_topic_names or ())
                    if ctx.denied(Operation.DESCRIBE, ResourceType.TOPIC, n))
    if denied:
        return heartbeat_answer(ctx.response_cls, ErrorCode.topic_authorization_failed,
                                f"DESCRIBE on subscribed topics is not allowed: {', '.join(denied)}")
    return None


def described_failure(group_cls: type, group_id: str, error: ErrorCode, message: str | None) -> Any:
    """A ConsumerGroupDescribe or ShareGroupDescribe entry for a group that is not described."""
    return make(group_cls, error_code=error, error_message=message, group_id=group_id, group_state="",
                group_epoch=-1, assignment_epoch=-1, assignor_name="", members=(),
                authorized_operations=UNKNOWN_OPERATIONS)


async def handle_consumer_group_heartbeat(ctx: RequestContext, req: Any) -> Any:
    refusal = heartbeat_refusal(ctx, req)
    if refusal is not None:
        return refusal
    names = req.subscribed_topic_names
    result = await ctx.broker.coordinator.consumer_protocol.heartbeat(HeartbeatRequest(
        group_id=req.group_id, member_id=req.member_id, member_epoch=req.member_epoch, instance_id=req.instance_id,
        rack_id=req.rack_id, rebalance_timeout_ms=_ms(req.rebalance_timeout),
        subscribed_names=tuple(names) if names is not None else None,
        subscribed_regex=getattr(req, "subscribed_topic_regex", None), server_assignor=req.server_assignor,
        owned=_owned(req.topic_partitions), client_id=ctx.header.client_id or "",
        client_host="/" + ctx.peer.rsplit(":", 1)[0], version=ctx.version))
    return heartbeat_answer(ctx.response_cls, result.error, result.message, result.member_id, result.member_epoch,
                            result.heartbeat_interval_ms, result.assignment)


async def describe_each(ctx: RequestContext, req: Any, kind: str, state_of: Callable[[Any], Any],
                        used_topics: Callable[[Any], set[str]], build: Callable[[str, Any, Any], Any]) -> Any:
    """ConsumerGroupDescribe and ShareGroupDescribe: DESCRIBE on each group, the coordinator's answer, a
    group of `kind` (`state_of` gives its state or None), DESCRIBE on every topic it uses (Kafka's rule);
    `build` describes what passed."""
    group_cls = nested(ctx.response_cls, "DescribedGroup")
    out = []
    for group_id in req.group_ids:
        await ctx.turn()
        if ctx.denied(Operation.DESCRIBE, ResourceType.GROUP, group_id):
            out.append(described_failure(group_cls, group_id, ErrorCode.group_authorization_failed,
                                         f"DESCRIBE on group {group_id} is not allowed"))
            continue
        code, group = ctx.broker.coordinator.describe(group_id)
        state = state_of(group) if group is not None else None
        if code != ErrorCode.none.value or state is None:
            error, message = (ErrorCode(code), None) if code != ErrorCode.none.value else (
                ErrorCode.group_id_not_found,
                f"Group {group_id} not found." if group is None else f"Group {group_id} is not a {kind} group.")
            out.append(described_failure(group_cls, group_id, error, message))
        elif any(ctx.denied(Operation.DESCRIBE, ResourceType.TOPIC, n) for n in sorted(used_topics(state))):
            out.append(described_failure(group_cls, group_id, ErrorCode.topic_authorization_failed,
                                         "The described group uses topics that the client is not authorized to "
                                         "describe."))
        else:
            await ctx.turn(len(state.members))
            out.append(build(group_id, group, state))
    return make(ctx.response_cls, throttle_time=ZERO, groups=tuple(out))


async def handle_consumer_group_describe(ctx: RequestContext, req: Any) -> Any:
    cls = ctx.response_cls
    group_cls, member_cls = nested(cls, "DescribedGroup"), nested(cls, "Member")
    assignment_cls, tp_cls = nested(cls, "Assignment"), nested(cls, "TopicPartitions")
    assignors = list(ctx.broker.coordinator.settings.consumer.assignors)
    names = ctx.broker.topic_view.names_by_id()

    def used(cg: Any) -> set[str]:
        topics = {n for m in cg.members.values() for n in m.subscribed_names}
        return topics | ({names.get(t, "") for m in cg.members.values() for t in m.owned()} - {""})

    def build(group_id: str, group: Any, cg: Any) -> Any:
        members = tuple(make(
            member_cls, member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
            member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
            subscribed_topic_names=tuple(sorted(m.subscribed_names)), subscribed_topic_regex=m.subscribed_regex,
            assignment=make(assignment_cls, topic_partitions=topic_partitions(tp_cls, m.assigned, names)),
            target_assignment=make(assignment_cls, topic_partitions=topic_partitions(
                tp_cls, cg.target.get(m.member_id, {}), names)),
            member_type=MEMBER_TYPE_CLASSIC if m.classic is not None else MEMBER_TYPE_CONSUMER)
            for m in cg.members.values())
        return make(group_cls, error_code=ErrorCode.none, error_message=None, group_id=group_id,
                    group_state=group.state_name, group_epoch=cg.group_epoch, assignment_epoch=cg.assignment_epoch,
                    assignor_name=cg.preferred_assignor(assignors), members=members,
                    authorized_operations=UNKNOWN_OPERATIONS)

    return await describe_each(ctx, req, "consumer", lambda g: g.consumer, used, build)
