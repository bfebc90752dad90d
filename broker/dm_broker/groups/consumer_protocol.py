"""KIP-848 consumer groups on the group coordinator: ConsumerGroupHeartbeat, member expiry, the
records that persist the group in `__consumer_offsets` and their replay (ADR 0037).

The coordinator owns the partitions, the writes and the offsets; this module owns what a heartbeat
changes. State changes are made in memory, then written (acks=all) before the member is answered.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from .assignors import Assignment, MemberSpec, assign, short_name
from .consumer_group import (
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerGroupState,
    ConsumerMember,
    MemberState,
    is_subset,
    metadata_hash,
    reconcile,
    subscribed_topics,
)
from .group import Group, GroupState
from .records import (
    CONSUMER_CURRENT_MEMBER_KEY,
    CONSUMER_GROUP_KEY,
    CONSUMER_MEMBER_KEY,
    CONSUMER_TARGET_KEY,
    CONSUMER_TARGET_MEMBER_KEY,
    ConsumerCurrentValue,
    ConsumerGroupValue,
    ConsumerKey,
    ConsumerMemberValue,
    GroupKey,
    decode_consumer_group,
    decode_consumer_member,
    decode_current_member,
    decode_target_epoch,
    decode_target_member,
    encode_consumer_group,
    encode_consumer_key,
    encode_consumer_member,
    encode_current_member,
    encode_key,
    encode_target_epoch,
    encode_target_member,
)

if TYPE_CHECKING:
    from .coordinator import GroupCoordinator

log = logging.getLogger(__name__)
E = ErrorCode
Record = tuple[bytes, bytes | None]


@dataclass(frozen=True)
class ConsumerSettings:
    protocols: frozenset[str] = frozenset({"classic", "consumer"})
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 2**31 - 1
    assignors: tuple[str, ...] = ("uniform", "range")


@dataclass
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_names: tuple[str, ...] | None = None
    subscribed_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None
    client_id: str = ""
    client_host: str = ""
    version: int = 1


@dataclass
class HeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None


class InvalidHeartbeat(Exception):
    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error


@functools.lru_cache(maxsize=1024)
def compiled(regex: str) -> re.Pattern[str]:
    return re.compile(regex)


def validate(req: HeartbeatRequest, settings: ConsumerSettings) -> None:
    """Kafka's checks of a ConsumerGroupHeartbeat before any state is looked up."""
    if not req.group_id:
        raise InvalidHeartbeat(E.invalid_group_id, "GroupId can't be empty.")
    if req.member_epoch < STATIC_LEAVE_EPOCH:
        raise InvalidHeartbeat(E.invalid_request, f"MemberEpoch {req.member_epoch} is invalid.")
    if not req.member_id and not (req.version == 0 and req.member_epoch == 0):
        raise InvalidHeartbeat(E.invalid_request, "MemberId can't be empty.")
    if req.member_epoch == STATIC_LEAVE_EPOCH and not req.instance_id:
        raise InvalidHeartbeat(E.invalid_request, "InstanceId can't be null when leaving as a static member.")
    if req.member_epoch == 0:
        if req.rebalance_timeout_ms < 0:
            raise InvalidHeartbeat(E.invalid_request, "RebalanceTimeoutMs must be provided in first request.")
        if req.owned:
            raise InvalidHeartbeat(E.invalid_request, "TopicPartitions must be empty when (re-)joining.")
        if req.subscribed_names is None and req.subscribed_regex is None:
            raise InvalidHeartbeat(E.invalid_request,
                                   "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
    if req.server_assignor is not None and short_name(req.server_assignor) not in settings.assignors:
        raise InvalidHeartbeat(E.unsupported_assignor, f"ServerAssignor {req.server_assignor} is not supported. "
                               f"Supported assignors: {', '.join(settings.assignors)}.")
    if req.subscribed_regex:
        try:
            compiled(req.subscribed_regex)
        except re.error as exc:
            raise InvalidHeartbeat(E.invalid_regular_expression,
                                   f"SubscribedTopicRegex {req.subscribed_regex!r} is invalid: {exc}") from None


def as_consumer_group(group: Group) -> ConsumerGroupState:
    if group.consumer is None:
        group.consumer = ConsumerGroupState()
        group.protocol_type = "consumer"
        group.protocol_name = None
        group.leader_id = None
    return group.consumer


# -- records ---------------------------------------------------------------------------------------

def group_record(group_id: str, cg: ConsumerGroupState) -> Record:
    return (encode_consumer_key(ConsumerKey(CONSUMER_GROUP_KEY, group_id)),
            encode_consumer_group(ConsumerGroupValue(cg.group_epoch, cg.metadata_hash)))


def member_record(group_id: str, m: ConsumerMember) -> Record:
    value = ConsumerMemberValue(m.instance_id, m.rack_id, m.client_id, m.client_host, m.subscribed_names,
                                m.subscribed_regex, m.rebalance_timeout_ms, m.server_assignor)
    return encode_consumer_key(ConsumerKey(CONSUMER_MEMBER_KEY, group_id, m.member_id)), encode_consumer_member(value)


def current_record(group_id: str, m: ConsumerMember) -> Record:
    value = ConsumerCurrentValue(m.member_epoch, m.previous_member_epoch, int(m.state), m.assigned,
                                 m.pending_revocation)
    return (encode_consumer_key(ConsumerKey(CONSUMER_CURRENT_MEMBER_KEY, group_id, m.member_id)),
            encode_current_member(value))


def target_records(group_id: str, cg: ConsumerGroupState, changed: list[str]) -> list[Record]:
    records = [(encode_consumer_key(ConsumerKey(CONSUMER_TARGET_MEMBER_KEY, group_id, m)),
                encode_target_member(cg.target.get(m, {}))) for m in changed]
    records.append((encode_consumer_key(ConsumerKey(CONSUMER_TARGET_KEY, group_id)),
                    encode_target_epoch(cg.assignment_epoch)))
    return records


def member_tombstones(group_id: str, member_id: str) -> list[Record]:
    # Kafka's order: current assignment, target, then the member itself
    return [(encode_consumer_key(ConsumerKey(kind, group_id, member_id)), None)
            for kind in (CONSUMER_CURRENT_MEMBER_KEY, CONSUMER_TARGET_MEMBER_KEY, CONSUMER_MEMBER_KEY)]


def group_tombstones(group_id: str, group: Group, deleting: bool = True) -> list[Record]:
    """Records that forget the group's metadata (its offsets are the caller's). `deleting`: the group
    goes (the classic tombstone drops it on replay); otherwise only its KIP-848 records go, as when an
    empty consumer group becomes classic and keeps its offsets."""
    records: list[Record] = []
    if group.consumer is not None:
        for member_id in group.consumer.members:
            records += member_tombstones(group_id, member_id)
        records += [(encode_consumer_key(ConsumerKey(CONSUMER_TARGET_KEY, group_id)), None),
                    (encode_consumer_key(ConsumerKey(CONSUMER_GROUP_KEY, group_id)), None)]
    if deleting:
        records.append((encode_key(GroupKey(group_id)), None))
    return records


def replay(groups: dict[str, Group], key: ConsumerKey, value: bytes | None) -> None:
    """Applies one consumer-group record while a `__consumer_offsets` partition loads."""
    group = groups.get(key.group)
    if value is None:
        if group is None or group.consumer is None:
            return
        cg = group.consumer
        if key.kind == CONSUMER_GROUP_KEY:
            group.consumer = None  # the group was deleted or became classic again
            group.protocol_type = None
        elif key.kind == CONSUMER_MEMBER_KEY:
            cg.remove(key.member_id or "")
        elif key.kind == CONSUMER_TARGET_MEMBER_KEY:
            cg.target.pop(key.member_id or "", None)
        return
    if group is None:
        group = groups[key.group] = Group(key.group)
    cg = as_consumer_group(group)
    if key.kind == CONSUMER_GROUP_KEY:
        meta = decode_consumer_group(value)
        cg.group_epoch, cg.metadata_hash = meta.epoch, meta.metadata_hash
    elif key.kind == CONSUMER_TARGET_KEY:
        cg.assignment_epoch = decode_target_epoch(value)
    elif key.kind == CONSUMER_TARGET_MEMBER_KEY:
        cg.target[key.member_id or ""] = decode_target_member(value)
    elif key.kind == CONSUMER_MEMBER_KEY:
        v = decode_consumer_member(value)
        member = cg.members.get(key.member_id or "") or ConsumerMember(key.member_id or "")
        member.instance_id, member.rack_id, member.client_id, member.client_host = \
            v.instance_id, v.rack_id, v.client_id, v.client_host
        member.subscribed_names, member.subscribed_regex = v.subscribed_names, v.subscribed_regex
        member.rebalance_timeout_ms, member.server_assignor = v.rebalance_timeout_ms, v.server_assignor
        cg.add(member)
    elif key.kind == CONSUMER_CURRENT_MEMBER_KEY:
        v = decode_current_member(value)
        member = cg.members.get(key.member_id or "")
        if member is None:
            member = ConsumerMember(key.member_id or "")
            cg.members[member.member_id] = member
        member.member_epoch, member.previous_member_epoch = v.member_epoch, v.previous_member_epoch
        member.state = MemberState(v.state) if v.state in iter(MemberState) else MemberState.STABLE
        member.assigned, member.pending_revocation = v.assigned, v.pending_revocation
    sync_state(group)


def sync_state(group: Group) -> None:
    """The classic state the shared code (offset expiry, deletion, listing) reads, kept in step."""
    if group.consumer is None:
        return
    state = GroupState.STABLE if group.consumer.members else GroupState.EMPTY
    if group.state != state:
        group.transition(state)


# -- the protocol ----------------------------------------------------------------------------------

class ConsumerProtocol:
    def __init__(self, coordinator: GroupCoordinator, settings: ConsumerSettings) -> None:
        self.coordinator = coordinator
        self.settings = settings

    def _topics(self) -> dict[str, tuple[str, int]]:
        return {name: (t.topic_id, len(t.partitions)) for name, t in self.coordinator.broker.topics().items()}

    def loaded(self, group: Group) -> None:
        """A group was replayed: its members get a full session on this coordinator's clock."""
        if group.consumer is None:
            return
        deadline = time.monotonic() + self.settings.session_timeout_ms / 1000
        for member in group.consumer.members.values():
            member.session_deadline = deadline
            if member.state == MemberState.UNREVOKED_PARTITIONS:
                member.revocation_deadline = time.monotonic() + member.rebalance_timeout_ms / 1000
        group.consumer.subscribed = self._subscribed(group.consumer, self._topics())

    def _subscribed(self, cg: ConsumerGroupState, topics: dict[str, tuple[str, int]]) -> dict[str, tuple[str, int]]:
        names: set[str] = set()
        for member in cg.members.values():
            names |= subscribed_topics(member, topics, compiled)
        return {n: topics[n] for n in names}

    async def heartbeat(self, req: HeartbeatRequest) -> HeartbeatResult:
        if "consumer" not in self.settings.protocols:
            return HeartbeatResult(E.unsupported_version, "The consumer group protocol is not enabled "
                                   "(group.coordinator.rebalance.protocols).")
        try:
            validate(req, self.settings)
            return await self._heartbeat(req)
        except InvalidHeartbeat as exc:
            return HeartbeatResult(exc.error, str(exc), member_id=req.member_id or None)

    async def _heartbeat(self, req: HeartbeatRequest) -> HeartbeatResult:
        c = self.coordinator
        error = c.error_for(req.group_id)
        if error is not None:
            return HeartbeatResult(error, None)
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return await self._leave(req)
        group = c.groups.get(req.group_id)
        records: list[Record] = []
        if group is None:
            if req.member_epoch != 0:
                raise InvalidHeartbeat(E.unknown_member_id, f"Group {req.group_id} has no member {req.member_id}.")
            group = c.groups[req.group_id] = Group(req.group_id)
        if group.consumer is None:
            if group.members or group.state not in (GroupState.EMPTY, GroupState.DEAD):
                raise InvalidHeartbeat(E.group_id_not_found, f"Group {req.group_id} is a classic group with active "
                                       "members; dm does not convert a live group between protocols (ADR 0037): "
                                       "stop its classic consumers first.")
            if req.member_epoch != 0:
                raise InvalidHeartbeat(E.unknown_member_id, f"Group {req.group_id} has no member {req.member_id}.")
            # An emptied classic group converts in place, with its offsets: the consumer records written
            # below supersede its classic record when the partition is replayed.
            as_consumer_group(group)
        cg = group.consumer
        assert cg is not None
        member_id = req.member_id or f"{req.client_id or 'consumer'}-{uuid.uuid4()}"
        member, joined, records = self._member(cg, req, member_id, records)
        now = time.monotonic()
        member.session_deadline = now + self.settings.session_timeout_ms / 1000
        before = (member.member_epoch, member.previous_member_epoch, member.state, member.assigned,
                  member.pending_revocation)
        bumped = joined
        if self._update(member, req):
            records.append(member_record(req.group_id, member))
            bumped = True
        topics = self._topics()
        cg.subscribed = self._subscribed(cg, topics)
        digest = metadata_hash(cg.subscribed)
        if digest != cg.metadata_hash:
            cg.metadata_hash = digest
            bumped = True
        if bumped:
            cg.group_epoch += 1
            records.append(group_record(req.group_id, cg))
        if cg.group_epoch > cg.assignment_epoch:
            records += self._assign(req.group_id, cg, topics)
        reconcile(member, cg.assignment_epoch, cg.target.get(member.member_id, {}), cg.owners(member.member_id),
                  req.owned)
        after = (member.member_epoch, member.previous_member_epoch, member.state, member.assigned,
                 member.pending_revocation)
        if after != before or joined:
            records.append(current_record(req.group_id, member))
        if member.state == MemberState.UNREVOKED_PARTITIONS:
            if member.revocation_deadline is None:
                member.revocation_deadline = now + member.rebalance_timeout_ms / 1000
        else:
            member.revocation_deadline = None
        sync_state(group)
        if records:
            stored = await c._write(req.group_id, records)
            if stored != E.none:
                return HeartbeatResult(stored, "the group's state could not be written", member_id=member.member_id)
        if joined or bumped:
            c._notify()
        send = (req.member_epoch == 0 or before[3] != member.assigned
                or (req.owned is not None and req.owned != member.assigned))
        return HeartbeatResult(E.none, None, member.member_id, member.member_epoch,
                               self.settings.heartbeat_interval_ms, member.assigned if send else None)

    def _member(self, cg: ConsumerGroupState, req: HeartbeatRequest, member_id: str,
                records: list[Record]) -> tuple[ConsumerMember, bool, list[Record]]:
        """The heartbeating member (created, taken over from a departed static member, or found and its
        epoch checked), whether it is new, and the records that changes."""
        member = cg.members.get(member_id)
        if req.member_epoch == 0:
            if req.instance_id:
                old_id = cg.static_members.get(req.instance_id)
                if old_id is not None and old_id != member_id:
                    old = cg.members[old_id]
                    if old.member_epoch != STATIC_LEAVE_EPOCH:
                        raise InvalidHeartbeat(E.unreleased_instance_id, f"Static member {old_id} with instance id "
                                               f"{req.instance_id} is still active in group {req.group_id}.")
                    # KIP-345 in KIP-848: the restarted instance takes over the assignment, no rebalance
                    cg.remove(old_id)
                    records += member_tombstones(req.group_id, old_id)
                    old.member_id = member_id
                    old.member_epoch = old.previous_member_epoch
                    cg.add(old)
                    cg.target[member_id] = cg.target.pop(old_id, old.assigned)
                    records += [member_record(req.group_id, old), current_record(req.group_id, old)]
                    records += target_records(req.group_id, cg, [member_id])
                    return old, False, records
            if member is not None:
                return member, False, records  # rejoining after being fenced: the same id, a full answer
            if len(cg.members) >= self.settings.max_size:
                raise InvalidHeartbeat(E.group_max_size_reached,
                                       f"The consumer group has reached its maximum capacity of "
                                       f"{self.settings.max_size} members.")
            member = ConsumerMember(member_id, instance_id=req.instance_id, client_id=req.client_id,
                                    client_host=req.client_host)
            cg.add(member)
            return member, True, records
        if member is None:
            raise InvalidHeartbeat(E.unknown_member_id, f"Member {member_id} is not a member of group "
                                   f"{req.group_id}.")
        if req.instance_id and cg.static_members.get(req.instance_id) != member_id:
            raise InvalidHeartbeat(E.fenced_instance_id, f"Instance id {req.instance_id} belongs to another member.")
        if req.member_epoch > member.member_epoch:
            raise InvalidHeartbeat(E.fenced_member_epoch, f"The consumer group member has a greater member epoch "
                                   f"({req.member_epoch}) than the one known by the group coordinator "
                                   f"({member.member_epoch}). The member must abandon all its partitions and rejoin.")
        # A response with the new epoch may have been lost: the previous one is still accepted while the
        # member owns nothing it should not.
        if req.member_epoch < member.member_epoch and not (
                req.member_epoch == member.previous_member_epoch and req.owned is not None
                and is_subset(req.owned, member.assigned)):
            raise InvalidHeartbeat(E.fenced_member_epoch, f"The consumer group member has a smaller member "
                                       f"epoch ({req.member_epoch}) than the one known by the group coordinator "
                                       f"({member.member_epoch}). The member must abandon all its partitions and "
                                       "rejoin.")
        return member, False, records

    @staticmethod
    def _update(member: ConsumerMember, req: HeartbeatRequest) -> bool:
        """Applies the fields the heartbeat carries; True when the subscription changed (a new epoch)."""
        changed = False
        for name, value in (("subscribed_names", tuple(req.subscribed_names) if req.subscribed_names is not None
                             else None),
                            ("subscribed_regex", req.subscribed_regex),
                            ("server_assignor", short_name(req.server_assignor) if req.server_assignor else None),
                            ("rack_id", req.rack_id), ("instance_id", req.instance_id)):
            if value is not None:
                if name == "subscribed_regex" and value == "":
                    value = None  # an empty regex clears it
                if getattr(member, name) != value:
                    setattr(member, name, value)
                    changed = True
        if req.rebalance_timeout_ms >= 0 and member.rebalance_timeout_ms != req.rebalance_timeout_ms:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.client_id = req.client_id or member.client_id
        member.client_host = req.client_host or member.client_host
        return changed

    def _assign(self, group_id: str, cg: ConsumerGroupState, topics: dict[str, tuple[str, int]]) -> list[Record]:
        """A new target assignment for the group epoch; the records of the members whose target changed."""
        regex_topics = {m.member_id: subscribed_topics(m, topics, compiled) for m in cg.members.values()}
        specs = {mid: MemberSpec(frozenset(topics[n][0] for n in names), cg.members[mid].owned())
                 for mid, names in regex_topics.items()}
        counts = {topic_id: count for topic_id, count in cg.subscribed.values()}
        assignor = cg.preferred_assignor(list(self.settings.assignors))
        target = assign(assignor, specs, counts)
        changed = [m for m in cg.members if target.get(m, {}) != cg.target.get(m, {})]
        cg.target = target
        cg.assignment_epoch = cg.group_epoch
        log.info("group %s: epoch %d assigned by %s to %d members", group_id, cg.group_epoch, assignor,
                 len(cg.members))
        return target_records(group_id, cg, changed)

    async def _leave(self, req: HeartbeatRequest) -> HeartbeatResult:
        c = self.coordinator
        group = c.groups.get(req.group_id)
        cg = group.consumer if group is not None else None
        member = cg.members.get(req.member_id) if cg is not None else None
        if group is None or cg is None or member is None:
            raise InvalidHeartbeat(E.unknown_member_id, f"Member {req.member_id} is not a member of group "
                                   f"{req.group_id}.")
        if req.member_epoch == STATIC_LEAVE_EPOCH:
            # the instance will be back: it keeps its partitions until its session runs out
            if member.member_epoch != STATIC_LEAVE_EPOCH:
                member.previous_member_epoch = member.member_epoch
                member.member_epoch = STATIC_LEAVE_EPOCH
            stored = await c._write(req.group_id, [current_record(req.group_id, member)])
            return HeartbeatResult(stored, None, req.member_id, STATIC_LEAVE_EPOCH, 0)
        stored = await c._write(req.group_id, self.remove_member(group, member.member_id, "left the group"))
        return HeartbeatResult(stored, None, req.member_id, LEAVE_EPOCH, 0)

    def remove_member(self, group: Group, member_id: str, why: str) -> list[Record]:
        """Takes a member out (a new group epoch follows); the records to write."""
        cg = group.consumer
        assert cg is not None
        cg.remove(member_id)
        cg.group_epoch += 1
        log.info("group %s: member %s %s (epoch %d)", group.group_id, member_id, why, cg.group_epoch)
        sync_state(group)
        self.coordinator._notify()
        return [*member_tombstones(group.group_id, member_id), group_record(group.group_id, cg)]

    def expire(self, group: Group, now: float) -> None:
        """Members whose session ran out, or that did not revoke in their rebalance timeout, are removed."""
        cg = group.consumer
        if cg is None:
            return
        records: list[Record] = []
        for member in list(cg.members.values()):
            if now > member.session_deadline:
                records += self.remove_member(group, member.member_id, "session timed out")
            elif member.revocation_deadline is not None and now > member.revocation_deadline:
                records += self.remove_member(group, member.member_id, "did not revoke its partitions in time")
        if records:
            asyncio.get_running_loop().create_task(self.coordinator._write(group.group_id, records))

    # -- offsets ------------------------------------------------------------------------------------

    @staticmethod
    def commit_error(group: Group, member_id: str, epoch: int) -> ErrorCode | None:
        """OffsetCommit / TxnOffsetCommit to a consumer group: the member must exist at this epoch (admin
        commits, epoch -1 without a member, only while the group is empty)."""
        cg = group.consumer
        assert cg is not None
        if epoch < 0 and not member_id:
            return None if not cg.members else E.unknown_member_id
        member = cg.members.get(member_id)
        if member is None:
            return E.unknown_member_id
        if epoch != member.member_epoch:
            return E.stale_member_epoch
        return None


def consumer_settings(config: Mapping[str, Any]) -> ConsumerSettings:
    """The KIP-848 settings of a broker's configuration (checked together by config.py)."""
    return ConsumerSettings(
        protocols=frozenset(p.lower() for p in config["group.coordinator.rebalance.protocols"].split(",") if p),
        session_timeout_ms=config["group.consumer.session.timeout.ms"],
        heartbeat_interval_ms=config["group.consumer.heartbeat.interval.ms"],
        max_size=config["group.consumer.max.size"],
        assignors=tuple(dict.fromkeys(short_name(a) or a for a in config["group.consumer.assignors"].split(",") if a)),
    )
