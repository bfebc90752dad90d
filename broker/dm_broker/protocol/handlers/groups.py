"""Group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
OffsetFetch, ListGroups, DescribeGroups, DeleteGroups, OffsetDelete."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...groups.coordinator import OFFSETS_TOPIC
from ...security.acls import CLUSTER_NAME, Operation, ResourceType
from ...txn.coordinator import TXN_TOPIC
from ..build import ZERO, has, make, nested
from ..dispatch import RequestContext

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1


def _key_refusal(ctx: RequestContext, key: str, key_type: int) -> tuple[ErrorCode, str] | None:
    """Why a coordinator key is refused before anything is looked up or created, or None."""
    if key_type not in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION):
        return ErrorCode.invalid_request, (f"coordinator key type {key_type} is not served: share groups use the "
                                           "group coordinator (type 0); dm's brokers find share coordinators "
                                           "themselves")
    if key_type == KEY_TYPE_GROUP and ctx.denied(Operation.DESCRIBE, ResourceType.GROUP, key):
        return ErrorCode.group_authorization_failed, f"DESCRIBE on group {key} is not allowed"
    if key_type == KEY_TYPE_TRANSACTION and ctx.denied(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
        return ErrorCode.transactional_id_authorization_failed, f"DESCRIBE on transactional id {key} is not allowed"
    if not key:
        return ErrorCode.invalid_request, "empty group id" if key_type == KEY_TYPE_GROUP else "empty transactional id"
    return None


def _coordinator_for(ctx: RequestContext, key: str, key_type: int) -> tuple[ErrorCode, str | None, Any]:
    broker = ctx.broker
    name, coordinator = (OFFSETS_TOPIC, broker.coordinator) if key_type == KEY_TYPE_GROUP else \
        (TXN_TOPIC, broker.txn_coordinator)
    topic = broker.topic(name)
    if topic is None:
        return ErrorCode.coordinator_not_available, f"{name} is being created", None
    partition = coordinator.partition_for(key)
    leader = topic.partitions[partition].leader
    if leader == broker.node_id and partition not in coordinator.owned:
        return ErrorCode.coordinator_not_available, "the coordinator is loading", None
    endpoint = next((e for e in broker.endpoints(ctx.listener_name) if e.node_id == leader), None)
    if endpoint is None:
        return ErrorCode.coordinator_not_available, "the coordinator's broker is unknown", None
    return ErrorCode.none, None, endpoint


async def handle_find_coordinator(ctx: RequestContext, req: Any) -> Any:
    cls = ctx.response_cls
    key_type = getattr(req, "key_type", KEY_TYPE_GROUP)
    keys = list(req.coordinator_keys) if has(type(req), "coordinator_keys") else [req.key]
    # Authorized first: an internal topic is created only for a key the principal may describe.
    refusals = {}
    for key in dict.fromkeys(keys):
        await ctx.turn()
        refusals[key] = _key_refusal(ctx, key, key_type)
    if any(r is None for r in refusals.values()):
        if key_type == KEY_TYPE_TRANSACTION:
            await ctx.broker.ensure_txn_topic()
        else:
            await ctx.broker.ensure_offsets_topic()

    def answer(key: str) -> tuple[ErrorCode, str | None, Any]:
        refusal = refusals[key]
        return (*refusal, None) if refusal is not None else _coordinator_for(ctx, key, key_type)

    if has(type(req), "coordinator_keys"):
        coordinator_cls = nested(cls, "Coordinator")
        results = []
        for key in keys:
            await ctx.turn()
            error, message, endpoint = answer(key)
            results.append(coordinator_cls(
                key=key, node_id=endpoint.node_id if endpoint else -1, host=endpoint.host if endpoint else "",
                port=endpoint.port if endpoint else -1, error_code=error, error_message=message))
        return make(cls, throttle_time=ZERO, coordinators=tuple(results))
    error, message, endpoint = answer(req.key)
    return make(cls, throttle_time=ZERO, error_code=error, error_message=message,
                node_id=endpoint.node_id if endpoint else -1, host=endpoint.host if endpoint else "",
                port=endpoint.port if endpoint else -1)


def _host(ctx: RequestContext) -> str:
    return "/" + ctx.peer.rsplit(":", 1)[0]


async def handle_join_group(ctx: RequestContext, req: Any) -> Any:
    cls = ctx.response_cls
    if ctx.denied(Operation.READ, ResourceType.GROUP, req.group_id):
        return make(cls, throttle_time=ZERO, error_code=ErrorCode.group_authorization_failed, generation_id=-1,
                    protocol_type=None, protocol_name="" if ctx.version < 7 else None, leader="",
                    skip_assignment=False, member_id="", members=())
    rebalance = getattr(req, "rebalance_timeout", None)
    result = await ctx.broker.coordinator.join(
        req.group_id, req.member_id, getattr(req, "group_instance_id", None), req.protocol_type,
        [(p.name, p.metadata) for p in req.protocols], int(req.session_timeout.total_seconds() * 1000),
        int((rebalance or req.session_timeout).total_seconds() * 1000), ctx.header.client_id or "", _host(ctx),
        require_known_member_id=ctx.version >= 4, supports_skip_assignment=ctx.version >= 9,
    )
    member_cls = nested(cls, "JoinGroupResponseMember")
    members = tuple(make(member_cls, member_id=m, group_instance_id=i, metadata=md) for m, i, md in result.members)
    return make(cls, throttle_time=ZERO, error_code=ErrorCode(result.error), generation_id=result.generation,
                protocol_type=result.protocol_type, protocol_name=result.protocol_name or ("" if ctx.version < 7
                                                                                          else None),
                leader=result.leader, skip_assignment=result.skip_assignment, member_id=result.member_id,
                members=members)


async def handle_sync_group(ctx: RequestContext, req: Any) -> Any:
    if ctx.denied(Operation.READ, ResourceType.GROUP, req.group_id):
        return make(ctx.response_cls, throttle_time=ZERO, error_code=ErrorCode.group_authorization_failed,
                    protocol_type=None, protocol_name=None, assignment=b"")
    assignments = {a.member_id: a.assignment for a in req.assignments}
    code, assignment, protocol_type, protocol_name = await ctx.broker.coordinator.sync(
        req.group_id, req.generation_id, req.member_id, getattr(req, "group_instance_id", None),
        getattr(req, "protocol_type", None), getattr(req, "protocol_name", None), assignments,
    )
    return make(ctx.response_cls, throttle_time=ZERO, error_code=ErrorCode(code), protocol_type=protocol_type,
                protocol_name=protocol_name, assignment=assignment)


async def handle_heartbeat(ctx: RequestContext, req: Any) -> Any:
    if ctx.denied(Operation.READ, ResourceType.GROUP, req.group_id):
        return make(ctx.response_cls, throttle_time=ZERO, error_code=ErrorCode.group_authorization_failed)
    code = ctx.broker.coordinator.heartbeat(req.group_id, req.generation_id, req.member_id,
                                            getattr(req, "group_instance_id", None))
    return make(ctx.response_cls, throttle_time=ZERO, error_code=ErrorCode(code))


async def handle_leave_group(ctx: RequestContext, req: Any) -> Any:
    cls = ctx.response_cls
    if ctx.denied(Operation.READ, ResourceType.GROUP, req.group_id):
        return make(cls, throttle_time=ZERO, error_code=ErrorCode.group_authorization_failed, members=())
    if has(type(req), "members"):
        members = [(m.member_id, m.group_instance_id) for m in req.members]
    else:
        members = [(req.member_id, None)]
    code, results = ctx.broker.coordinator.leave(req.group_id, members)
    if not has(cls, "members"):
        single = results[0] if results else code
        return make(cls, throttle_time=ZERO, error_code=ErrorCode(code if code else single))
    member_cls = nested(cls, "MemberResponse")
    out = []
    for (m, i), r in zip(members, results, strict=False):
        await ctx.turn()
        out.append(member_cls(member_id=m, group_instance_id=i, error_code=ErrorCode(r)))
    return make(cls, throttle_time=ZERO, error_code=ErrorCode(code), members=tuple(out))


async def handle_offset_commit(ctx: RequestContext, req: Any) -> Any:
    cls = ctx.response_cls
    generation = getattr(req, "generation_id_or_member_epoch", None)
    if generation is None:
        generation = getattr(req, "generation_id", -1)
    results: dict[tuple[str, int], int] = {}
    group_denied = ctx.denied(Operation.READ, ResourceType.GROUP, req.group_id)
    offsets = {}
    for t in req.topics:
        topic_denied = not group_denied and ctx.denied(Operation.READ, ResourceType.TOPIC, t.name)
        for p in t.partitions:
            await ctx.turn()
            if group_denied or topic_denied:
                code = ErrorCode.group_authorization_failed if group_denied else ErrorCode.topic_authorization_failed
                results[(t.name, p.partition_index)] = code.value
                continue
            offsets[(t.name, p.partition_index)] = (p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                                                    p.committed_metadata)
    if offsets:
        results.update(await ctx.broker.coordinator.commit(req.group_id, generation, req.member_id,
                                                           getattr(req, "group_instance_id", None), offsets))
    topic_cls = nested(cls, "OffsetCommitResponseTopic")
    part_cls = nested(cls, "OffsetCommitResponsePartition")
    topics = []
    for t in req.topics:
        topics.append(make(topic_cls, name=t.name, partitions=await ctx.built(t.partitions, lambda p, t=t: make(
            part_cls, partition_index=p.partition_index, error_code=ErrorCode(results[(t.name, p.partition_index)])))))
    return make(cls, throttle_time=ZERO, topics=tuple(topics))


async def _offset_topics(ctx: RequestContext, group_id: str, topics: Any, topic_cls: type, part_cls: type,
                         topic_field: str = "partition_indexes",
                         require_stable: bool = False) -> tuple[ErrorCode, tuple[Any, ...]]:
    if ctx.denied(Operation.DESCRIBE, ResourceType.GROUP, group_id):
        return ErrorCode.group_authorization_failed, ()
    # Offsets of topics the principal may not describe are not disclosed: asked for, they are
    # TOPIC_AUTHORIZATION_FAILED; listing every offset of the group, they are left out.
    hidden = set()
    for t in topics or ():
        await ctx.turn(1 + len(getattr(t, topic_field)))  # for this and the comprehensions below
        if not ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, t.name):
            hidden.add(t.name)
    wanted = None if topics is None else [(t.name, p) for t in topics if t.name not in hidden
                                          for p in getattr(t, topic_field)]
    code, offsets = ctx.broker.coordinator.fetch_offsets(group_id, wanted)
    if topics is None:
        offsets = {tp: v for tp, v in offsets.items() if ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, tp[0])}
    # KIP-447: offsets committed in a transaction still open are not stable; the client asks again.
    unstable = ctx.broker.coordinator.unstable(group_id, wanted) if require_stable else set()
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), value in offsets.items():
        await ctx.turn()
        error = ErrorCode.unstable_offset_commit if (topic, partition) in unstable else ErrorCode.none
        by_topic.setdefault(topic, []).append(make(
            part_cls, partition_index=partition, committed_offset=value.offset if value and not error else -1,
            committed_leader_epoch=value.leader_epoch if value and not error else -1,
            metadata=value.metadata if value and not error else "", error_code=error))
    if code != ErrorCode.none.value and topics is not None:
        for t in topics:
            by_topic[t.name] = [make(part_cls, partition_index=p, committed_offset=-1, committed_leader_epoch=-1,
                                     metadata="", error_code=ErrorCode(code)) for p in getattr(t, topic_field)]
    for t in topics or ():
        if t.name in hidden:
            by_topic[t.name] = [make(part_cls, partition_index=p, committed_offset=-1, committed_leader_epoch=-1,
                                     metadata="", error_code=ErrorCode.topic_authorization_failed)
                                for p in getattr(t, topic_field)]
    topics_out = await ctx.built_by_key(by_topic, lambda topic, parts: make(topic_cls, name=topic, partitions=parts))
    return ErrorCode(code), topics_out


async def handle_offset_fetch(ctx: RequestContext, req: Any) -> Any:
    cls = ctx.response_cls
    if has(type(req), "groups"):
        group_cls = nested(cls, "OffsetFetchResponseGroup")
        topic_cls = nested(cls, "OffsetFetchResponseTopics")
        part_cls = nested(cls, "OffsetFetchResponsePartitions")
        groups = []
        for g in req.groups:
            await ctx.turn()
            member_error = ctx.broker.coordinator.fetch_member_error(
                g.group_id, getattr(g, "member_id", None), getattr(g, "member_epoch", -1))
            if member_error is not None:
                groups.append(group_cls(group_id=g.group_id, topics=(), error_code=member_error))
                continue
            code, topics = await _offset_topics(ctx, g.group_id, g.topics, topic_cls, part_cls,
                                                require_stable=getattr(req, "require_stable", False))
            groups.append(group_cls(group_id=g.group_id, topics=topics, error_code=code))
        return make(cls, throttle_time=ZERO, groups=tuple(groups))
    topic_cls = nested(cls, "OffsetFetchResponseTopic")
    part_cls = nested(cls, "OffsetFetchResponsePartition")
    code, topics = await _offset_topics(ctx, req.group_id, req.topics, topic_cls, part_cls,
                                        require_stable=getattr(req, "require_stable", False))
    return make(cls, throttle_time=ZERO, topics=topics, error_code=code)


async def handle_list_groups(ctx: RequestContext, req: Any) -> Any:
    cls = ctx.response_cls
    states = {s.lower() for s in getattr(req, "states_filter", ())} or None
    types = {t.lower() for t in getattr(req, "types_filter", ())} or None
    listed_cls = nested(cls, "ListedGroup")
    # DESCRIBE on the cluster lists every group; otherwise those the principal may describe.
    every = ctx.allowed(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)
    groups = tuple(make(listed_cls, group_id=g.group_id, protocol_type=g.protocol_type or "",
                        group_state=g.state_name, group_type=g.group_type)
                   for g in ctx.broker.coordinator.list_groups(states, types)
                   if every or ctx.allowed(Operation.DESCRIBE, ResourceType.GROUP, g.group_id))
    return make(cls, throttle_time=ZERO, error_code=ErrorCode.none, groups=groups)


async def handle_describe_groups(ctx: RequestContext, req: Any) -> Any:
    cls = ctx.response_cls
    group_cls = nested(cls, "DescribedGroup")
    member_cls = nested(cls, "DescribedGroupMember")
    out = []
    for group_id in req.groups:
        await ctx.turn()
        if ctx.denied(Operation.DESCRIBE, ResourceType.GROUP, group_id):
            out.append(make(group_cls, error_code=ErrorCode.group_authorization_failed, group_id=group_id,
                            group_state="", protocol_type="", protocol_data="", members=(),
                            authorized_operations=-2147483648))
            continue
        code, group = ctx.broker.coordinator.describe(group_id)
        if group is None:
            state = "Dead" if code == ErrorCode.none.value else ""
            out.append(make(group_cls, error_code=ErrorCode(code), group_id=group_id, group_state=state,
                            protocol_type="", protocol_data="", members=(), authorized_operations=-2147483648))
            continue
        if group.consumer is not None or group.share is not None:  # Kafka 4: classic groups only (KIP-1043)
            out.append(make(group_cls, error_code=ErrorCode.group_id_not_found, error_message=f"Group {group_id} "
                            "is not a classic group.", group_id=group_id, group_state="Dead", protocol_type="",
                            protocol_data="", members=(), authorized_operations=-2147483648))
            continue
        members = tuple(make(member_cls, member_id=m.member_id, group_instance_id=m.group_instance_id,
                             client_id=m.client_id, client_host=m.client_host,
                             member_metadata=m.metadata_for(group.protocol_name or ""), member_assignment=m.assignment)
                        for m in group.members.values())
        await ctx.turn(len(members))
        out.append(make(group_cls, error_code=ErrorCode.none, group_id=group_id, group_state=group.state.value,
                        protocol_type=group.protocol_type or "", protocol_data=group.protocol_name or "",
                        members=members, authorized_operations=-2147483648))
    return make(cls, throttle_time=ZERO, groups=tuple(out))


async def handle_delete_groups(ctx: RequestContext, req: Any) -> Any:
    cls = ctx.response_cls
    result_cls = nested(cls, "DeletableGroupResult")
    results = []
    for group_id in req.groups_names:
        await ctx.turn()
        if ctx.denied(Operation.DELETE, ResourceType.GROUP, group_id):
            results.append(result_cls(group_id=group_id, error_code=ErrorCode.group_authorization_failed))
            continue
        code = await ctx.broker.coordinator.delete_group(group_id)
        results.append(result_cls(group_id=group_id, error_code=ErrorCode(code)))
    return make(cls, throttle_time=ZERO, results=tuple(results))


async def handle_offset_delete(ctx: RequestContext, req: Any) -> Any:
    cls = ctx.response_cls
    if ctx.denied(Operation.DELETE, ResourceType.GROUP, req.group_id):
        return make(cls, error_code=ErrorCode.group_authorization_failed, throttle_time=ZERO, topics=())
    denied = set()
    for t in req.topics:
        await ctx.turn(1 + len(t.partitions))  # for this and the comprehensions below
        if ctx.denied(Operation.READ, ResourceType.TOPIC, t.name):
            denied.add(t.name)
    wanted = [(t.name, p.partition_index) for t in req.topics if t.name not in denied for p in t.partitions]
    code, results = await ctx.broker.coordinator.delete_offsets(req.group_id, wanted) if wanted else (0, {})
    results = {**results, **{(t.name, p.partition_index): ErrorCode.topic_authorization_failed.value
                             for t in req.topics if t.name in denied for p in t.partitions}}
    topic_cls = nested(cls, "OffsetDeleteResponseTopic")
    part_cls = nested(cls, "OffsetDeleteResponsePartition")
    topics = []
    for t in req.topics if code == 0 else ():
        topics.append(make(topic_cls, name=t.name, partitions=await ctx.built(t.partitions, lambda p, t=t: make(
            part_cls, partition_index=p.partition_index,
            error_code=ErrorCode(results.get((t.name, p.partition_index), 0))))))
    return make(cls, error_code=ErrorCode(code), throttle_time=ZERO, topics=tuple(topics))
