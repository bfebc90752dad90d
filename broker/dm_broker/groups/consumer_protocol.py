"""KIP-848 consumer groups on the group coordinator: ConsumerGroupHeartbeat, member expiry, the
records that persist the group in `__consumer_offsets` and their replay (ADR 0037).

The coordinator owns the partitions, the writes and the offsets; this module owns what a heartbeat
changes. State changes are made in memory, then written (acks=all) before the member is answered.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ..binary import FormatError
from ..regexes import InvalidRegex, compile_topic_regex
from .assignors import Assignment, MemberSpec, assign, short_name
from .consumer_group import (
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ClassicInfo,
    ConsumerGroupState,
    ConsumerMember,
    MemberState,
    is_subset,
    metadata_hash,
    normalised,
    reconcile,
    subscribed_topics,
)
from .embedded_protocol import decode_assignment, decode_subscription, encode_assignment
from .group import Group, GroupState, JoinResult, Member
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
    encode_group,
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
    migration_policy: str = "bidirectional"


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
            compile_topic_regex(req.subscribed_regex)
        except InvalidRegex as exc:
            raise InvalidHeartbeat(E.invalid_regular_expression,
                                   f"SubscribedTopicRegex {req.subscribed_regex!r} is invalid: {exc}") from None


def as_consumer_group(group: Group) -> ConsumerGroupState:
    """The group's KIP-848 state, made from an empty one when the group was classic (its classic
    members, if any, are the caller's to carry over)."""
    if group.consumer is None:
        group.consumer = ConsumerGroupState()
        group.protocol_type = "consumer"
        group.protocol_name = None
        group.leader_id = None
        group.members.clear()
        group.static_members.clear()
        group.pending_members.clear()
        if group.rebalance_deadline is not None:
            group.rebalance_deadline.cancel()
            group.rebalance_deadline = None
    return group.consumer


# -- records ---------------------------------------------------------------------------------------

def group_record(group_id: str, cg: ConsumerGroupState) -> Record:
    return (encode_consumer_key(ConsumerKey(CONSUMER_GROUP_KEY, group_id)),
            encode_consumer_group(ConsumerGroupValue(cg.group_epoch, cg.metadata_hash)))


def member_record(group_id: str, m: ConsumerMember) -> Record:
    classic = (m.classic.session_timeout_ms, m.classic.protocols) if m.classic is not None else None
    value = ConsumerMemberValue(m.instance_id, m.rack_id, m.client_id, m.client_host, m.subscribed_names,
                                m.subscribed_regex, m.rebalance_timeout_ms, m.server_assignor, classic)
    return encode_consumer_key(ConsumerKey(CONSUMER_MEMBER_KEY, group_id, m.member_id)), encode_consumer_member(value)


def current_record(group_id: str, m: ConsumerMember) -> Record:
    value = ConsumerCurrentValue(m.member_epoch, m.previous_member_epoch, int(m.state), m.assigned,
                                 m.pending_revocation, m.assignment_epochs)
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
        member.classic = ClassicInfo(v.classic[0], v.classic[1]) if v.classic is not None else None
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
        member.assignment_epochs = v.assignment_epochs
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
        return self.coordinator.broker.topic_view.topics()

    def loaded(self, group: Group) -> None:
        """A group was replayed: its members get a full session on this coordinator's clock."""
        if group.consumer is None:
            return
        for member in group.consumer.members.values():
            member.session_deadline = time.monotonic() + self.session_ms(member, group.group_id) / 1000
            if member.state == MemberState.UNREVOKED_PARTITIONS:
                member.revocation_deadline = time.monotonic() + member.rebalance_timeout_ms / 1000
        group.consumer.subscribed = self._subscribed(group.consumer, self._topics())

    def session_ms(self, member: ConsumerMember, group_id: str = "") -> int:
        """A classic member keeps the session timeout it joined with; a KIP-848 member has its group's
        (consumer.session.timeout.ms) or the broker's."""
        if member.classic is not None:
            return member.classic.session_timeout_ms
        return self._group_setting(group_id, "consumer.session.timeout.ms", self.settings.session_timeout_ms)

    def heartbeat_ms(self, group_id: str) -> int:
        return self._group_setting(group_id, "consumer.heartbeat.interval.ms", self.settings.heartbeat_interval_ms)

    def _group_setting(self, group_id: str, name: str, default: int) -> int:
        """A group config (IncrementalAlterConfigs on the group), else the broker's setting."""
        return self.coordinator.broker.group_config(group_id, name) if group_id else default

    def _subscribed(self, cg: ConsumerGroupState, topics: dict[str, tuple[str, int]]) -> dict[str, tuple[str, int]]:
        names: set[str] = set()
        for member in cg.members.values():
            names |= subscribed_topics(member, topics, self.coordinator.broker.topic_view.matching)
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
        if group.share is not None:
            raise InvalidHeartbeat(E.group_id_not_found, f"Group {req.group_id} is a share group.")
        if group.consumer is None:
            if req.member_epoch != 0:
                raise InvalidHeartbeat(E.unknown_member_id, f"Group {req.group_id} has no member {req.member_id}.")
            if group.members:
                records += self._upgrade(group)
            # An emptied classic group converts in place, with its offsets: the consumer records written
            # below supersede its classic record when the partition is replayed.
            as_consumer_group(group)
        cg = group.consumer
        assert cg is not None
        member_id = req.member_id or f"{req.client_id or 'consumer'}-{uuid.uuid4()}"
        member, joined, records = self._member(cg, req, member_id, records)
        now = time.monotonic()
        member.session_deadline = now + self.session_ms(member, req.group_id) / 1000
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
            stored = await c.write(req.group_id, records)
            if stored != E.none:
                return HeartbeatResult(stored, "the group's state could not be written", member_id=member.member_id)
        if joined or bumped:
            c.notify()
        send = (req.member_epoch == 0 or before[3] != member.assigned
                or (req.owned is not None and req.owned != member.assigned))
        return HeartbeatResult(E.none, None, member.member_id, member.member_epoch, self.heartbeat_ms(req.group_id),
                               member.assigned if send else None)

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
                    old.cap_assignment_epochs()
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
        regex_topics = {m.member_id: subscribed_topics(m, topics, self.coordinator.broker.topic_view.matching)
                        for m in cg.members.values()}
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
            stored = await c.write(req.group_id, [current_record(req.group_id, member)])
            return HeartbeatResult(stored, None, req.member_id, STATIC_LEAVE_EPOCH, 0)
        records = self.remove_member(group, member.member_id, "left the group")
        stored = await c.write(req.group_id, records + self.maybe_downgrade(group))
        return HeartbeatResult(stored, None, req.member_id, LEAVE_EPOCH, 0)

    def remove_member(self, group: Group, member_id: str, why: str) -> list[Record]:
        """Takes a member out (a new group epoch follows); the records to write."""
        cg = group.consumer
        assert cg is not None
        cg.remove(member_id)
        cg.group_epoch += 1
        log.info("group %s: member %s %s (epoch %d)", group.group_id, member_id, why, cg.group_epoch)
        sync_state(group)
        self.coordinator.notify()
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
            records += self.maybe_downgrade(group)
            asyncio.get_running_loop().create_task(self.coordinator.write(group.group_id, records))

    # -- classic members in a KIP-848 group: online upgrade and downgrade (ADR 0037) -----------------

    def _upgrade(self, group: Group) -> list[Record]:
        """A classic consumer group with members becomes a KIP-848 group when a KIP-848 member joins:
        every member keeps its partitions and its generation as its epoch, and reconciles through the
        classic protocol (a heartbeat answered REBALANCE_IN_PROGRESS makes it rejoin)."""
        if self.settings.migration_policy not in ("upgrade", "bidirectional"):
            raise InvalidHeartbeat(E.group_id_not_found, f"Group {group.group_id} is a classic group with active "
                                   "members and group.consumer.migration.policy does not allow an online upgrade: "
                                   "stop its classic consumers first.")
        if group.protocol_type != "consumer":
            raise InvalidHeartbeat(E.group_id_not_found, f"Group {group.group_id} uses the classic protocol type "
                                   f"{group.protocol_type!r}, not consumer: it cannot take KIP-848 members.")
        if len(group.members) >= self.settings.max_size:
            raise InvalidHeartbeat(E.group_max_size_reached, f"Group {group.group_id} is too large for a KIP-848 "
                                   "group (group.consumer.max.size).")
        for member in group.members.values():  # a rebalance in progress is abandoned: they rejoin
            if member.awaiting_join:
                member.join_future.set_result(JoinResult(E.rebalance_in_progress.value, member_id=member.member_id))
            if member.awaiting_sync:
                member.sync_future.set_result((E.rebalance_in_progress.value, b""))
        topics = self._topics()
        ids = {name: topic_id for name, (topic_id, _) in topics.items()}
        classic = list(group.members.values())
        generation, protocol = group.generation, group.protocol_name or ""
        cg = as_consumer_group(group)
        for m in classic:
            try:
                names = decode_subscription(m.metadata_for(protocol)).topics
            except FormatError:
                names = ()
            owned = {ids[t]: ps for t, ps in decode_assignment(m.assignment).items() if t in ids}
            member = ConsumerMember(m.member_id, instance_id=m.group_instance_id, client_id=m.client_id,
                                    client_host=m.client_host, subscribed_names=names,
                                    rebalance_timeout_ms=m.rebalance_timeout_ms, member_epoch=generation,
                                    assigned=normalised(owned),
                                    classic=ClassicInfo(m.session_timeout_ms, tuple(m.protocols)))
            member.session_deadline = m.heartbeat_deadline
            cg.add(member)
            cg.target[member.member_id] = member.assigned
        cg.group_epoch = cg.assignment_epoch = generation
        cg.subscribed = self._subscribed(cg, topics)
        cg.metadata_hash = metadata_hash(cg.subscribed)
        log.info("group %s: upgraded online to a KIP-848 group with %d classic members (generation %d)",
                 group.group_id, len(classic), generation)
        records = [group_record(group.group_id, cg)]
        for member in cg.members.values():
            records += [member_record(group.group_id, member), current_record(group.group_id, member)]
        return records + target_records(group.group_id, cg, list(cg.members))

    def maybe_downgrade(self, group: Group) -> list[Record]:
        """When the last KIP-848 member of a group with classic members is gone, the group becomes
        classic again: the members keep their partitions and rebalance through the classic protocol."""
        cg = group.consumer
        if (cg is None or not cg.members or any(m.classic is None for m in cg.members.values())
                or self.settings.migration_policy not in ("downgrade", "bidirectional")):
            return []
        names = self.coordinator.broker.topic_view.names_by_id()
        records = group_tombstones(group.group_id, group, deleting=False)
        members = list(cg.members.values())
        group.consumer = None
        group.protocol_type = "consumer"
        group.generation = cg.group_epoch
        now = time.monotonic()
        for m in members:
            assert m.classic is not None
            version = _subscription_version(m.classic.protocols)
            by_name = {names[t]: ps for t, ps in m.assigned.items() if t in names}
            classic = Member(m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                             m.classic.session_timeout_ms, "consumer", list(m.classic.protocols),
                             assignment=encode_assignment(version, by_name))
            classic.heartbeat_deadline = now + m.classic.session_timeout_ms / 1000
            group.add(classic)
        group.protocol_name = group.select_protocol()
        group.transition(GroupState.STABLE)
        records.append((encode_key(GroupKey(group.group_id)), encode_group(group.to_value())))
        log.info("group %s: downgraded online to a classic group with %d members", group.group_id, len(members))
        self.coordinator.prepare_rebalance(group, "downgraded to the classic protocol")
        return records

    def _classic_member(self, cg: ConsumerGroupState, member_id: str, instance_id: str | None
                        ) -> ConsumerMember | ErrorCode:
        if instance_id:
            known = cg.static_members.get(instance_id)
            if known is None:
                return E.unknown_member_id
            if known != member_id:
                return E.fenced_instance_id
        member = cg.members.get(member_id)
        if member is None or member.classic is None:
            return E.unknown_member_id
        return member

    async def classic_join(self, group: Group, member_id: str, instance_id: str | None, protocol_type: str,
                           protocols: list[tuple[str, bytes]], session_timeout_ms: int, rebalance_timeout_ms: int,
                           client_id: str, client_host: str, require_known_member_id: bool) -> JoinResult:
        """JoinGroup of a classic member into a KIP-848 group: the broker assigns, the JoinGroup answer
        carries the member epoch as generation, SyncGroup the member's partitions."""
        cg = group.consumer
        assert cg is not None
        if protocol_type != "consumer" or not protocols:
            return JoinResult(E.inconsistent_group_protocol.value, member_id=member_id)
        try:
            subscription = decode_subscription(protocols[0][1])
        except FormatError:
            return JoinResult(E.inconsistent_group_protocol.value, member_id=member_id)
        if not member_id:
            member_id = f"{client_id or 'consumer'}-{uuid.uuid4()}"
            if require_known_member_id and not instance_id:
                return JoinResult(E.member_id_required.value, member_id=member_id)
        records: list[Record] = []
        member = cg.members.get(member_id)
        if instance_id and (old_id := cg.static_members.get(instance_id)) not in (None, member_id):
            old = cg.remove(old_id)  # the restarted static member takes over
            assert old is not None
            records += member_tombstones(group.group_id, old_id)
            old.member_id = member_id
            if old.member_epoch < 0:
                old.member_epoch = old.previous_member_epoch
                old.cap_assignment_epochs()
            cg.add(old)
            cg.target[member_id] = cg.target.pop(old_id, old.assigned)
            member = old
        joined = member is None
        if member is None:
            if len(cg.members) >= self.settings.max_size:
                return JoinResult(E.group_max_size_reached.value, member_id=member_id)
            member = ConsumerMember(member_id, instance_id=instance_id)
            cg.add(member)
        elif member.classic is None:
            return JoinResult(E.inconsistent_group_protocol.value, member_id=member_id)
        changed = member.subscribed_names != subscription.topics
        member.subscribed_names = subscription.topics
        member.instance_id = instance_id or member.instance_id
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.client_id, member.client_host = client_id or member.client_id, client_host or member.client_host
        member.classic = ClassicInfo(session_timeout_ms, tuple(protocols))
        records.append(member_record(group.group_id, member))
        topics = self._topics()
        cg.subscribed = self._subscribed(cg, topics)
        digest = metadata_hash(cg.subscribed)
        if joined or changed or digest != cg.metadata_hash:
            cg.metadata_hash = digest
            cg.group_epoch += 1
            records.append(group_record(group.group_id, cg))
        if cg.group_epoch > cg.assignment_epoch:
            records += self._assign(group.group_id, cg, topics)
        ids = {name: topic_id for name, (topic_id, _) in topics.items()}
        owned = normalised({ids[t]: ps for t, ps in subscription.owned.items() if t in ids})
        reconcile(member, cg.assignment_epoch, cg.target.get(member_id, {}), cg.owners(member_id), owned)
        records.append(current_record(group.group_id, member))
        now = time.monotonic()
        member.session_deadline = now + session_timeout_ms / 1000
        member.revocation_deadline = (member.revocation_deadline or now + rebalance_timeout_ms / 1000) \
            if member.state == MemberState.UNREVOKED_PARTITIONS else None
        sync_state(group)
        stored = await self.coordinator.write(group.group_id, records)
        if stored != E.none:
            return JoinResult(stored.value, member_id=member_id)
        self.coordinator.notify()
        return JoinResult(E.none.value, member.member_epoch, "consumer", protocols[0][0], "", member_id)

    def classic_sync(self, group: Group, generation: int, member_id: str, instance_id: str | None,
                     protocol_type: str | None, protocol_name: str | None) -> tuple[int, bytes, str | None, str | None]:
        cg = group.consumer
        assert cg is not None
        member = self._classic_member(cg, member_id, instance_id)
        if isinstance(member, ErrorCode):
            return member.value, b"", None, None
        assert member.classic is not None
        if generation != member.member_epoch:
            return E.illegal_generation.value, b"", None, None
        supported = [name for name, _ in member.classic.protocols]
        if (protocol_type and protocol_type != "consumer") or (protocol_name and protocol_name not in supported):
            return E.inconsistent_group_protocol.value, b"", None, None
        # A member still revoking has rejoined already: it gets its (smaller) assignment, gives the rest
        # up and rejoins; any other member behind the group epoch must rejoin first.
        if member.member_epoch < cg.group_epoch and member.state != MemberState.UNREVOKED_PARTITIONS:
            return E.rebalance_in_progress.value, b"", None, None
        member.session_deadline = time.monotonic() + member.classic.session_timeout_ms / 1000
        names = self.coordinator.broker.topic_view.names_by_id()
        by_name = {names[t]: ps for t, ps in member.assigned.items() if t in names}
        assignment = encode_assignment(_subscription_version(member.classic.protocols), by_name)
        return E.none.value, assignment, "consumer", protocol_name or supported[0]

    def classic_heartbeat(self, group: Group, generation: int, member_id: str, instance_id: str | None) -> int:
        """Kafka's rule: the member rejoins when the group moved on, when it must give partitions up, or
        when partitions it waits for are free."""
        cg = group.consumer
        assert cg is not None
        member = self._classic_member(cg, member_id, instance_id)
        if isinstance(member, ErrorCode):
            return member.value
        assert member.classic is not None
        if generation != member.member_epoch:
            return E.illegal_generation.value
        member.session_deadline = time.monotonic() + member.classic.session_timeout_ms / 1000
        if member.member_epoch < cg.group_epoch or member.state == MemberState.UNREVOKED_PARTITIONS:
            return E.rebalance_in_progress.value
        if member.state == MemberState.UNRELEASED_PARTITIONS:
            owners = cg.owners(member_id)
            waiting = any((t, p) in owners for t, ps in cg.target.get(member_id, {}).items() for p in ps
                          if p not in member.assigned.get(t, frozenset()))
            if not waiting:
                return E.rebalance_in_progress.value
        return E.none.value

    def classic_leave(self, group: Group, members: list[tuple[str, str | None]]) -> tuple[int, list[int]]:
        cg = group.consumer
        assert cg is not None
        results: list[int] = []
        records: list[Record] = []
        for member_id, instance_id in members:
            if instance_id:
                known = cg.static_members.get(instance_id)
                if known is None or (member_id and member_id != known):
                    results.append((E.unknown_member_id if known is None else E.fenced_instance_id).value)
                    continue
                member_id = known
            if member_id not in cg.members:
                results.append(E.unknown_member_id.value)
                continue
            records += self.remove_member(group, member_id, "left the group")
            results.append(E.none.value)
        if records:
            records += self.maybe_downgrade(group)
            asyncio.get_running_loop().create_task(self.coordinator.write(group.group_id, records))
        return E.none.value, results

    # -- offsets ------------------------------------------------------------------------------------

    def commit_error(self, group: Group, member_id: str, epoch: int,
                     partitions: Iterable[tuple[str, int]] | None = None) -> ErrorCode | None:
        """OffsetCommit / TxnOffsetCommit / OffsetFetch to a consumer group: the member must exist at this
        epoch (admin commits, epoch -1 without a member, only while the group is empty).

        `partitions` (by topic name): what a commit writes. A KIP-848 member may commit them with an
        older epoch than its current one if it has owned each of them since that epoch (KIP-1251): its
        commit crossed a heartbeat that raised the epoch. A classic member's generation must match
        (ILLEGAL_GENERATION, as Kafka answers classic members)."""
        cg = group.consumer
        assert cg is not None
        if epoch < 0 and not member_id:
            return None if not cg.members else E.unknown_member_id
        member = cg.members.get(member_id)
        if member is None:
            return E.unknown_member_id
        if epoch == member.member_epoch:
            return None
        if member.classic is not None:
            return E.illegal_generation
        if partitions is not None and epoch >= 0:
            topics = self._topics()
            if all(name in topics for name, _ in partitions) and member.owned_since(
                    epoch, [(topics[name][0], partition) for name, partition in partitions]):
                return None
        return E.stale_member_epoch


def _subscription_version(protocols: tuple[tuple[str, bytes], ...]) -> int:
    """The embedded protocol version a classic member speaks (its assignment is written in it)."""
    try:
        return decode_subscription(protocols[0][1]).version if protocols else 0
    except FormatError:
        return 0


def consumer_settings(config: Mapping[str, Any]) -> ConsumerSettings:
    """The KIP-848 settings of a broker's configuration (checked together by config.py)."""
    return ConsumerSettings(
        protocols=frozenset(p.lower() for p in config["group.coordinator.rebalance.protocols"].split(",") if p),
        session_timeout_ms=config["group.consumer.session.timeout.ms"],
        heartbeat_interval_ms=config["group.consumer.heartbeat.interval.ms"],
        max_size=config["group.consumer.max.size"],
        assignors=tuple(dict.fromkeys(short_name(a) or a for a in config["group.consumer.assignors"].split(",") if a)),
        migration_policy=config["group.consumer.migration.policy"],
    )
