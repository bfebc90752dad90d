"""Share group APIs (KIP-932, ADR 0038): ShareGroupHeartbeat and ShareGroupDescribe on the group
coordinator, ShareFetch and ShareAcknowledge on the partition leaders."""

from __future__ import annotations

import contextlib
import datetime
import time
import uuid
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from ...security.acls import Operation, ResourceType
from ...share.partition_state import InvalidRecordState, RecordState, StateBatch
from ...share.partitions import FINAL_EPOCH, INITIAL_EPOCH, ShareSession, ShareSessionError
from ...share.state_store import ShareStateUnavailable, Snapshot
from ..build import ZERO, make, nested
from ..dispatch import RequestContext
from .consumer_groups import (
    UNKNOWN_OPERATIONS,
    describe_each,
    heartbeat_answer,
    heartbeat_refusal,
    topic_partitions,
)
from .fetch import wait_for_partitions

RENEW_FROM = 2  # ShareFetch and ShareAcknowledge v2 (Kafka 4.2): acknowledge type RENEW, is_renew_ack

ASSIGNOR = "simple"


async def handle_share_group_heartbeat(ctx: RequestContext, req: Any) -> Any:
    refusal = heartbeat_refusal(ctx, req)
    if refusal is not None:
        return refusal
    names = req.subscribed_topic_names
    result = ctx.broker.coordinator.share_protocol.heartbeat(
        req.group_id, req.member_id, req.member_epoch, req.rack_id, tuple(names) if names is not None else None,
        ctx.header.client_id or "", "/" + ctx.peer.rsplit(":", 1)[0])
    return heartbeat_answer(ctx.response_cls, result.error, result.message, result.member_id, result.member_epoch,
                            result.heartbeat_interval_ms, result.assignment)


async def handle_share_group_describe(ctx: RequestContext, req: Any) -> Any:
    cls = ctx.response_cls
    group_cls, member_cls = nested(cls, "DescribedGroup"), nested(cls, "Member")
    assignment_cls, tp_cls = nested(cls, "Assignment"), nested(cls, "TopicPartitions")
    names = ctx.broker.topic_view.names_by_id()

    def build(group_id: str, group: Any, sg: Any) -> Any:
        members = tuple(make(member_cls, member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
                             client_id=m.client_id, client_host=m.client_host,
                             subscribed_topic_names=tuple(sorted(m.subscribed_names)),
                             assignment=make(assignment_cls, topic_partitions=topic_partitions(
                                 tp_cls, m.assigned, names)))
                        for m in sg.members.values())
        return make(group_cls, error_code=ErrorCode.none, error_message=None, group_id=group_id,
                    group_state=group.state_name, group_epoch=sg.group_epoch, assignment_epoch=sg.group_epoch,
                    assignor_name=ASSIGNOR, members=members, authorized_operations=UNKNOWN_OPERATIONS)

    return await describe_each(ctx, req, "share", lambda g: g.share,
                         lambda sg: {n for m in sg.members.values() for n in m.subscribed_names}, build)


# -- ShareFetch / ShareAcknowledge ---------------------------------------------------------------------

class _Outcome:
    """What one partition's answer carries."""

    __slots__ = ("ack_error", "ack_message", "acquired", "error", "message", "records")

    def __init__(self) -> None:
        self.error = ErrorCode.none
        self.message: str | None = None
        self.ack_error = ErrorCode.none
        self.ack_message: str | None = None
        self.records = b""
        self.acquired: list[Any] = []


class _ShareRequest:
    def __init__(self, ctx: RequestContext, group: str, member: str) -> None:
        self.ctx = ctx
        self.broker = ctx.broker
        self.share = ctx.broker.share
        self.group = group
        self.member = member
        self.ids = ctx.broker.topic_view.names_by_id()  # cached per metadata version
        self.outcomes: dict[tuple[str, str, int], _Outcome] = {}  # (topic id, name, partition)

    def outcome(self, topic_id: str, partition: int) -> _Outcome:
        key = (topic_id, self.ids.get(topic_id, ""), partition)
        return self.outcomes.setdefault(key, _Outcome())

    def _leader(self, topic_id: str, partition: int, out: _Outcome) -> Any:
        name = self.ids.get(topic_id)
        if name is None:
            out.error = ErrorCode.unknown_topic_id
            return None
        if self.ctx.denied(Operation.READ, ResourceType.TOPIC, name):
            out.error = ErrorCode.topic_authorization_failed
            return None
        part = self.broker.partition(name, partition)
        if part is None or part.closed:
            out.error = ErrorCode.unknown_topic_or_partition
            return None
        if not part.is_leader:
            out.error = ErrorCode.not_leader_or_follower
            return None
        return part

    async def acknowledge(self, topic_id: str, partition: int, batches: Any) -> None:
        out = self.outcome(topic_id, partition)
        probe = _Outcome()
        part = self._leader(topic_id, partition, probe)
        if part is None:
            out.ack_error = probe.error
            return
        name = self.ids[topic_id]
        try:
            state = await self.share.state(self.group, name, topic_id, part)
        except ShareStateUnavailable as exc:
            out.ack_error, out.ack_message = ErrorCode.coordinator_not_available, str(exc)
            return
        renewed_until = time.monotonic() + self.share.lock_ms(self.group) / 1000 if self.ctx.version >= RENEW_FROM \
            else None
        try:
            for b in batches:
                state.acknowledge(self.member, b.first_offset, b.last_offset, list(b.acknowledge_types), renewed_until)
        except InvalidRecordState as exc:
            out.ack_error, out.ack_message = ErrorCode.invalid_record_state, str(exc)
        stored = await self.share.persist(self.group, name, topic_id, part, state)
        if stored != ErrorCode.none and out.ack_error == ErrorCode.none:
            out.ack_error, out.ack_message = stored, "the share-partition state could not be written"
        part.notify_changed()  # released records may be waited for

    async def acquire(self, session: ShareSession, max_records: int, max_bytes: int) -> int:
        taken = 0
        lock_s = self.share.lock_ms(self.group) / 1000
        for name, partition in sorted(session.partitions):
            if taken >= max_records or max_bytes <= 0:
                break
            topic = self.broker.topic(name)
            if topic is None:
                continue
            out = self.outcome(topic.topic_id, partition)
            part = self._leader(topic.topic_id, partition, out)
            if part is None:
                continue
            try:
                state = await self.share.state(self.group, name, topic.topic_id, part)
            except ShareStateUnavailable as exc:  # not started afresh: that would redeliver acknowledged records
                out.error, out.message = ErrorCode.coordinator_not_available, str(exc)
                continue
            acquired = state.acquire(self.member, max_records - taken, part.high_watermark, time.monotonic(), lock_s,
                                     part.log.log_start_offset)
            if not acquired:
                continue
            first, last = acquired[0].first, acquired[-1].last
            data = b"".join(part.log.read_batches(first, last + 1, max_bytes))
            max_bytes -= len(data)
            out.records += data
            out.acquired += acquired
            taken += sum(a.last - a.first + 1 for a in acquired)
        return taken

    async def revalidate(self, topic_id: str, partition: int) -> None:
        part = self._leader(topic_id, partition, _Outcome())
        if part is not None:
            with contextlib.suppress(ShareStateUnavailable):  # the fetch reports it when it loads the state
                await self.share.revalidate(self.group, self.ids[topic_id], topic_id, part)

    def waiting_parts(self, session: ShareSession) -> list[Any]:
        parts = []
        for name, partition in session.partitions:
            part = self.broker.partition(name, partition)
            if part is not None and part.is_leader:
                parts.append(part)
        return parts


async def _answer(ctx: RequestContext, req_ctx: _ShareRequest, error: ErrorCode = ErrorCode.none,
                  message: str | None = None, fetch: bool = True) -> Any:
    cls = ctx.response_cls
    topic_cls = nested(cls, "ShareFetchableTopicResponse" if fetch else "ShareAcknowledgeTopicResponse")
    part_cls, leader_cls = nested(cls, "PartitionData"), nested(cls, "LeaderIdAndEpoch")
    by_topic: dict[str, list[Any]] = {}
    for (topic_id, name, partition), out in sorted(req_ctx.outcomes.items()):
        await ctx.turn(1 + len(out.acquired))
        part = ctx.broker.partition(name, partition) if name else None
        leader = make(leader_cls, leader_id=part.leader_id if part is not None else -1,
                      leader_epoch=part.leader_epoch if part is not None else -1)
        acquired_cls = nested(cls, "AcquiredRecords") if fetch else None
        fields = {"partition_index": partition, "error_code": out.error if fetch else (out.ack_error or out.error),
                  "error_message": out.message if fetch else (out.ack_message or out.message),
                  "acknowledge_error_code": out.ack_error, "acknowledge_error_message": out.ack_message,
                  "current_leader": leader, "records": out.records,
                  "acquired_records": tuple(make(acquired_cls, first_offset=a.first, last_offset=a.last,
                                                 delivery_count=a.delivery_count) for a in out.acquired)
                  if acquired_cls is not None else ()}
        by_topic.setdefault(topic_id, []).append(make(part_cls, **fields))
    responses = await ctx.built_by_key(by_topic, lambda t, ps: make(topic_cls, topic_id=uuid.UUID(t), partitions=ps))
    return make(cls, throttle_time=ZERO, error_code=error, error_message=message,
                acquisition_lock_timeout=datetime.timedelta(milliseconds=ctx.broker.share.lock_ms(req_ctx.group)),
                responses=responses, node_endpoints=())


async def _open(ctx: RequestContext, req: Any, fetch: bool) -> tuple[_ShareRequest, ShareSession | None, Any]:
    """The checks ShareFetch and ShareAcknowledge share: ids present, READ on the group, the member's
    share session at the request's epoch (only ShareFetch opens one). The answer is set when refused."""
    r = _ShareRequest(ctx, req.group_id or "", req.member_id or "")
    if not req.group_id or not req.member_id:
        return r, None, await _answer(ctx, r, ErrorCode.invalid_request, "GroupId and MemberId are required",
                                      fetch=fetch)
    if ctx.denied(Operation.READ, ResourceType.GROUP, req.group_id):
        return r, None, await _answer(ctx, r, ErrorCode.group_authorization_failed,
                                f"READ on group {req.group_id} is not allowed", fetch=fetch)
    if fetch and req.share_session_epoch == INITIAL_EPOCH:
        # Only a member of the group opens a share session (its coordinator says so), and only for its own
        # connection: another principal naming the member's id neither acquires nor releases its records.
        joined = await ctx.broker.share_membership.check(r.group, r.member)
        if joined != ErrorCode.none:
            return r, None, await _answer(ctx, r, joined, f"{r.member} is not a member of share group {r.group}"
                                          if joined == ErrorCode.unknown_member_id else None, fetch=fetch)
    try:
        session = r.share.session_for(r.group, r.member, req.share_session_epoch, opening_allowed=fetch,
                                      owner=str(ctx.session.principal), connection=ctx.session)
    except ShareSessionError as exc:
        return r, None, await _answer(ctx, r, exc.error, str(exc), fetch=fetch)
    share = r.share
    ctx.session.at_close("share sessions", lambda: share.connection_closed(ctx.session))
    return r, session, None


async def handle_share_fetch(ctx: RequestContext, req: Any) -> Any:
    r, session, refusal = await _open(ctx, req, fetch=True)
    if session is None:
        return refusal
    epoch = req.share_session_epoch
    if epoch == FINAL_EPOCH and any(p for t in req.topics for p in t.partitions if not p.acknowledgement_batches):
        return await _answer(ctx, r, ErrorCode.invalid_request, "a final ShareFetch (epoch -1) only acknowledges")
    for t in req.topics:
        name = r.ids.get(str(t.topic_id))
        for p in t.partitions:
            await ctx.turn(1 + len(p.acknowledgement_batches))
            if name is None:  # a topic deleted (or never there): said, not silently skipped
                r.outcome(str(t.topic_id), p.partition_index).error = ErrorCode.unknown_topic_id
            else:
                if epoch != FINAL_EPOCH:
                    session.partitions.add((name, p.partition_index))
                if epoch == INITIAL_EPOCH:
                    await r.revalidate(str(t.topic_id), p.partition_index)
            if p.acknowledgement_batches:
                await r.acknowledge(str(t.topic_id), p.partition_index, p.acknowledgement_batches)
    for t in req.forgotten_topics_data:
        name = r.ids.get(str(t.topic_id))
        await ctx.turn(len(t.partitions))
        for p in t.partitions:
            session.partitions.discard((name or "", p))
    if epoch == FINAL_EPOCH:
        r.share.close(r.group, r.member)
        return await _answer(ctx, r)
    r.share.advance(session, epoch)
    if getattr(req, "is_renew_ack", False):  # v2: only acknowledgements (renewals): no records are acquired
        return await _answer(ctx, r)
    max_records = req.max_records if req.max_records > 0 else 500
    taken = await r.acquire(session, max_records, req.max_bytes)
    wait_s = req.max_wait.total_seconds() if isinstance(req.max_wait, datetime.timedelta) else req.max_wait / 1000
    if taken == 0 and wait_s > 0:
        await wait_for_partitions(r.waiting_parts(session), wait_s)
        await r.acquire(session, max_records, req.max_bytes)
    return await _answer(ctx, r)


async def handle_share_acknowledge(ctx: RequestContext, req: Any) -> Any:
    r, session, refusal = await _open(ctx, req, fetch=False)
    if session is None:
        return refusal
    epoch = req.share_session_epoch
    for t in req.topics:
        for p in t.partitions:
            await ctx.turn(1 + len(p.acknowledgement_batches))
            await r.acknowledge(str(t.topic_id), p.partition_index, p.acknowledgement_batches)
    if epoch == FINAL_EPOCH:
        r.share.close(r.group, r.member)
    else:
        r.share.advance(session, epoch)
    return await _answer(ctx, r, fetch=False)


# -- the share coordinator's inter-broker APIs (ReadShareGroupState 84, WriteShareGroupState 85) ------

def _state_results(req: Any, cls: type, result_cls: str, answer: Any) -> Any:
    topic_cls = nested(cls, result_cls)
    return make(cls, results=tuple(
        make(topic_cls, topic_id=t.topic_id, partitions=tuple(answer(t, p) for p in t.partitions)) for t in req.topics))


async def _stepped_state_results(ctx: RequestContext, req: Any, result_cls: str, answer: Any) -> Any:
    """_state_results, giving the loop its turn as it goes (RequestContext.turn)."""
    topic_cls = nested(ctx.response_cls, result_cls)
    topics = []
    for t in req.topics:
        await ctx.turn()  # a topic of no partitions is an item too
        topics.append(make(topic_cls, topic_id=t.topic_id, partitions=await ctx.built(t.partitions,
                                                                                     lambda p, t=t: answer(t, p))))
    return make(ctx.response_cls, results=tuple(topics))


def refuse_read_share_group_state(req: Any, cls: type, error: ErrorCode, message: str) -> Any:
    part_cls = nested(cls, "PartitionResult")
    return _state_results(req, cls, "ReadStateResult", lambda _t, p: make(
        part_cls, partition=p.partition, error_code=error, error_message=message, state_epoch=-1, start_offset=-1,
        state_batches=()))


def _refusal_per_partition(result_cls: str) -> Callable[[Any, type, ErrorCode, str], Any]:
    def refuse(req: Any, cls: type, error: ErrorCode, message: str) -> Any:
        part_cls = nested(cls, "PartitionResult")
        return _state_results(req, cls, result_cls, lambda _t, p: make(
            part_cls, partition=p.partition, error_code=error, error_message=message))
    return refuse


refuse_write_share_group_state = _refusal_per_partition("WriteStateResult")


async def handle_read_share_group_state(ctx: RequestContext, req: Any) -> Any:
    cls = ctx.response_cls
    part_cls, batch_cls = nested(cls, "PartitionResult"), nested(cls, "StateBatch")
    coordinator = ctx.broker.share_coordinator

    def answer(t: Any, p: Any) -> Any:
        error, snapshot = coordinator.read((req.group_id, str(t.topic_id), p.partition))
        if snapshot is None:  # nothing stored: state epoch -1 says so
            return make(part_cls, partition=p.partition, error_code=error, state_epoch=-1, start_offset=-1,
                        state_batches=())
        return make(part_cls, partition=p.partition, error_code=error, state_epoch=snapshot.state_epoch,
                    start_offset=snapshot.start, state_batches=tuple(
                        make(batch_cls, first_offset=b.first, last_offset=b.last, delivery_state=int(b.state),
                             delivery_count=b.delivery_count) for b in snapshot.batches))

    return await _stepped_state_results(ctx, req, "ReadStateResult", answer)


async def handle_write_share_group_state(ctx: RequestContext, req: Any) -> Any:
    cls = ctx.response_cls
    part_cls = nested(cls, "PartitionResult")
    coordinator = ctx.broker.share_coordinator
    errors: dict[tuple[str, int], ErrorCode] = {}
    for t in req.topics:
        for p in t.partitions:
            await ctx.turn(1 + len(p.state_batches))
            try:
                batches = tuple(StateBatch(b.first_offset, b.last_offset, RecordState(b.delivery_state),
                                           b.delivery_count) for b in p.state_batches)
            except ValueError:
                errors[(str(t.topic_id), p.partition)] = ErrorCode.invalid_request
                continue
            snapshot = Snapshot(p.state_epoch, p.leader_epoch, p.start_offset, batches)
            errors[(str(t.topic_id), p.partition)] = await coordinator.write(
                (req.group_id, str(t.topic_id), p.partition), snapshot)
    return await _stepped_state_results(ctx, req, "WriteStateResult", lambda t, p: make(
        part_cls, partition=p.partition, error_code=errors[(str(t.topic_id), p.partition)]))


refuse_delete_share_group_state = _refusal_per_partition("DeleteStateResult")


async def handle_delete_share_group_state(ctx: RequestContext, req: Any) -> Any:
    cls = ctx.response_cls
    part_cls = nested(cls, "PartitionResult")
    errors = {}
    for t in req.topics:
        for p in t.partitions:
            await ctx.turn()
            errors[(str(t.topic_id), p.partition)] = await ctx.broker.share_coordinator.delete(
                (req.group_id, str(t.topic_id), p.partition))
    return await _stepped_state_results(ctx, req, "DeleteStateResult", lambda t, p: make(
        part_cls, partition=p.partition, error_code=errors[(str(t.topic_id), p.partition)]))


# -- share-group offsets (DescribeShareGroupOffsets 90, AlterShareGroupOffsets 91, DeleteShareGroupOffsets 92) --

def _share_group(ctx: RequestContext, group_id: str, empty: bool) -> tuple[ErrorCode, str | None, Any]:
    """The share group on this coordinator; `empty`: it must have no members (Kafka's rule for altering
    and deleting its offsets)."""
    code, group = ctx.broker.coordinator.describe(group_id)
    if code != ErrorCode.none.value:
        return ErrorCode(code), None, None
    if group is None:
        return ErrorCode.group_id_not_found, f"Group {group_id} not found.", None
    if group.share is None:
        return ErrorCode.group_id_not_found, f"Group {group_id} is not a share group.", None
    if empty and group.share.members:
        return ErrorCode.non_empty_group, f"Share group {group_id} has members: stop its consumers first.", None
    return ErrorCode.none, None, group


def _empty_share_group(ctx: RequestContext, req: Any, operation: Operation) -> tuple[Any, Any]:
    """Alter/DeleteShareGroupOffsets: `operation` on the group, which must be an empty share group; the
    group, or None and the refusal."""
    if ctx.denied(operation, ResourceType.GROUP, req.group_id):
        return None, make(ctx.response_cls, throttle_time=ZERO, error_code=ErrorCode.group_authorization_failed,
                          error_message=f"{operation.name} on group {req.group_id} is not allowed", responses=())
    error, message, group = _share_group(ctx, req.group_id, empty=True)
    if group is None:
        return None, make(ctx.response_cls, throttle_time=ZERO, error_code=error, error_message=message, responses=())
    return group, None


async def handle_describe_share_group_offsets(ctx: RequestContext, req: Any) -> Any:
    cls = ctx.response_cls
    group_cls = nested(cls, "DescribeShareGroupOffsetsResponseGroup")
    topic_cls = nested(cls, "DescribeShareGroupOffsetsResponseTopic")
    part_cls = nested(cls, "DescribeShareGroupOffsetsResponsePartition")
    store = ctx.broker.share.store
    out = []
    for g in req.groups:
        if ctx.denied(Operation.DESCRIBE, ResourceType.GROUP, g.group_id):
            out.append(make(group_cls, group_id=g.group_id, topics=(), error_code=ErrorCode.group_authorization_failed,
                            error_message=f"DESCRIBE on group {g.group_id} is not allowed"))
            continue
        error, message, group = _share_group(ctx, g.group_id, empty=False)
        if group is None:
            out.append(make(group_cls, group_id=g.group_id, topics=(), error_code=error, error_message=message))
            continue
        wanted = [(t.topic_name, list(t.partitions)) for t in g.topics] if g.topics is not None else [
            (name, None) for name in sorted(group.share.used)]
        topics = []
        for name, partitions in wanted:
            await ctx.turn(1 + len(partitions or ()))
            topic = ctx.broker.topic(name)
            denied = ctx.denied(Operation.DESCRIBE, ResourceType.TOPIC, name)
            if denied or topic is None:
                if g.topics is not None:  # asked for: refused; listing all: left out
                    error = ErrorCode.topic_authorization_failed if denied else ErrorCode.unknown_topic_or_partition
                    topics.append(make(topic_cls, topic_name=name, topic_id=None, partitions=tuple(
                        make(part_cls, partition_index=p, start_offset=-1, leader_epoch=-1, error_code=error)
                        for p in partitions or ())))
                continue
            rows = []
            for p in partitions if partitions is not None else range(len(topic.partitions)):
                await ctx.turn()
                try:
                    snapshot = await store.read(g.group_id, topic.topic_id, p) if store is not None else None
                    rows.append(make(part_cls, partition_index=p, start_offset=snapshot.start if snapshot else -1,
                                     leader_epoch=-1, lag=-1, error_code=ErrorCode.none))
                except ShareStateUnavailable as exc:
                    rows.append(make(part_cls, partition_index=p, start_offset=-1, leader_epoch=-1,
                                     error_code=ErrorCode.coordinator_not_available, error_message=str(exc)))
            topics.append(make(topic_cls, topic_name=name, topic_id=uuid.UUID(topic.topic_id), partitions=tuple(rows)))
        out.append(make(group_cls, group_id=g.group_id, topics=tuple(topics), error_code=ErrorCode.none))
    return make(cls, throttle_time=ZERO, groups=tuple(out))


async def handle_alter_share_group_offsets(ctx: RequestContext, req: Any) -> Any:
    cls = ctx.response_cls
    topic_cls = nested(cls, "AlterShareGroupOffsetsResponseTopic")
    part_cls = nested(cls, "AlterShareGroupOffsetsResponsePartition")
    group, refusal = _empty_share_group(ctx, req, Operation.READ)
    if group is None:
        return refusal
    store = ctx.broker.share.store
    responses = []
    for t in req.topics:
        topic = ctx.broker.topic(t.topic_name)
        rows = []
        for p in t.partitions:
            await ctx.turn()
            if ctx.denied(Operation.READ, ResourceType.TOPIC, t.topic_name):
                code, why = ErrorCode.topic_authorization_failed, None
            elif topic is None or not 0 <= p.partition_index < len(topic.partitions):
                code, why = ErrorCode.unknown_topic_or_partition, None
            elif p.start_offset < 0:
                code, why = ErrorCode.invalid_request, "start_offset must be 0 or more"
            else:
                code, why = await _set_start(store, req.group_id, topic.topic_id, p.partition_index, p.start_offset)
                if code == ErrorCode.none:
                    group.share.used.add(t.topic_name)
            rows.append(make(part_cls, partition_index=p.partition_index, error_code=code, error_message=why))
        responses.append(make(topic_cls, topic_name=t.topic_name,
                              topic_id=uuid.UUID(topic.topic_id) if topic else None, partitions=tuple(rows)))
    return make(cls, throttle_time=ZERO, error_code=ErrorCode.none, responses=tuple(responses))


async def _set_start(store: Any, group: str, topic_id: str, partition: int, start: int) -> tuple[ErrorCode, str | None]:
    """A new start offset with nothing in flight, under a new state epoch (leaders reload it)."""
    try:
        current = await store.read(group, topic_id, partition)
    except ShareStateUnavailable as exc:
        return ErrorCode.coordinator_not_available, str(exc)
    epoch = current.state_epoch + 1 if current is not None else 1
    return await store.write(group, topic_id, partition, Snapshot(epoch, -1, start, ())), None


async def handle_delete_share_group_offsets(ctx: RequestContext, req: Any) -> Any:
    cls = ctx.response_cls
    topic_cls = nested(cls, "DeleteShareGroupOffsetsResponseTopic")
    group, refusal = _empty_share_group(ctx, req, Operation.DELETE)
    if group is None:
        return refusal
    store = ctx.broker.share.store
    responses = []
    for t in req.topics:
        await ctx.turn()
        topic = ctx.broker.topic(t.topic_name)
        code, why = ErrorCode.none, None
        if ctx.denied(Operation.READ, ResourceType.TOPIC, t.topic_name):
            code = ErrorCode.topic_authorization_failed
        elif topic is None:
            code = ErrorCode.unknown_topic_or_partition
        else:
            for p in range(len(topic.partitions)):
                code = await store.delete(req.group_id, topic.topic_id, p)
                if code != ErrorCode.none:
                    why = f"partition {p}: the share coordinator did not confirm the deletion"
                    break
            if code == ErrorCode.none:
                group.share.used.discard(t.topic_name)
        responses.append(make(topic_cls, topic_name=t.topic_name,
                              topic_id=uuid.UUID(topic.topic_id) if topic else None, error_code=code,
                              error_message=why))
    return make(cls, throttle_time=ZERO, error_code=ErrorCode.none, responses=tuple(responses))
