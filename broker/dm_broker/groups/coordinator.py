"""The classic group coordinator (Kafka's GroupCoordinator, JoinGroup/SyncGroup protocol).

A group lives in partition `murmur2(group id) % n` of `__consumer_offsets`; this broker
coordinates the groups of the partitions it leads and has loaded. Group metadata and committed
offsets are records in that partition, written before the request is answered, and replayed when
the partition is loaded (at start, or when leadership moves here).

Rebalance: Empty → PreparingRebalance (members rejoin; the first rebalance of an empty group
waits group.initial.rebalance.delay.ms for more members) → CompletingRebalance (the leader
computes the assignment client-side) → Stable (SyncGroup delivered it). Members that miss their
session timeout are removed and the group rebalances.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from ..log.producer_state import InvalidProducerEpochError, InvalidTxnStateError
from ..log.records import NO_PRODUCER_ID, TRANSACTIONAL_BIT, build_batch, control_marker, decode_records, parse_header
from ..partitioners import murmur2_partition
from ..replication.partition import NotEnoughReplicasError
from ..tasks import stop_tasks
from .consumer_protocol import ConsumerProtocol, ConsumerSettings, group_tombstones, replay
from .group import Group, GroupState, JoinResult, Member
from .records import (
    ConsumerKey,
    GroupKey,
    OffsetKey,
    OffsetValue,
    RecordFormatError,
    decode_group,
    decode_key,
    decode_offset,
    encode_group,
    encode_key,
    encode_offset,
)
from .share_protocol import ShareProtocol, ShareSettings

if TYPE_CHECKING:
    from ..broker import Broker

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
SWEEP_SECONDS = 0.1

E = ErrorCode


@dataclass
class CoordinatorSettings:
    partitions: int = 50
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    max_metadata_bytes: int = 4096
    max_group_size: int = 2**31 - 1
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    retention_check_interval_ms: int = 600_000
    consumer: ConsumerSettings = field(default_factory=ConsumerSettings)
    share: ShareSettings = field(default_factory=ShareSettings)


def now_ms() -> int:
    return int(time.time() * 1000)


class GroupCoordinator:
    def __init__(self, broker: Broker, settings: CoordinatorSettings) -> None:
        self.broker = broker
        self.settings = settings
        self.groups: dict[str, Group] = {}
        self.owned: set[int] = set()
        self.loading: set[int] = set()
        self._pending_deadlines: dict[tuple[str, str], float] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._expirer: asyncio.Task[None] | None = None
        self._expire_now = asyncio.Event()  # an expiry pass before the next interval (a topic deleted)
        self._deleted_topics: dict[str, int] = {}  # topic -> when (ms) this broker saw it deleted
        self.on_change: Callable[[], None] | None = None
        self.consumer_protocol = ConsumerProtocol(self, settings.consumer)
        self.share_protocol = ShareProtocol(self, settings.share)

    # -- ownership -------------------------------------------------------------------------

    def partition_for(self, group_id: str) -> int:
        return murmur2_partition(group_id.encode(), self.settings.partitions)

    def start(self) -> None:
        self._sweeper = asyncio.create_task(self._sweep())
        self._expirer = asyncio.create_task(self._expire_periodically())

    async def close(self) -> None:
        await stop_tasks(self._sweeper, self._expirer)
        for partition in list(self.owned):
            self.unload(partition)

    def error_for(self, group_id: str) -> ErrorCode | None:
        """NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS when this broker cannot serve the group."""
        partition = self.partition_for(group_id)
        if partition in self.loading:
            return E.coordinator_load_in_progress
        if partition not in self.owned:
            return E.not_coordinator
        return None

    def load(self, partition: int) -> None:
        """Replays one __consumer_offsets partition (blocking; called when it becomes ours)."""
        self.loading.add(partition)
        try:
            part = self.broker.partition(OFFSETS_TOPIC, partition)
            if part is None:
                return
            loaded: dict[str, Group] = {}
            plog = part.log
            # The whole log of the new leader (what followers do not have yet they will take from it).
            # Offsets of transactions not ended yet: applied at their COMMIT marker, dropped at ABORT.
            pending: dict[int, list[tuple[bytes, bytes | None]]] = {}
            for batch in plog.batches(plog.log_start_offset, part.log.log_end_offset):
                header = parse_header(batch)
                if header.is_control:
                    committed, _ = control_marker(batch)
                    for key, value in pending.pop(header.producer_id, []) if committed else []:
                        self._replay(loaded, key, value)
                    continue
                for record in decode_records(batch):
                    try:
                        if header.is_transactional:
                            pending.setdefault(header.producer_id, []).append((record.key, record.value))
                        else:
                            self._replay(loaded, record.key, record.value)
                    except (RecordFormatError, UnicodeDecodeError) as exc:
                        log.warning("skipping unreadable %s-%d record at %d: %s", OFFSETS_TOPIC, partition,
                                    record.offset, exc)
            for pid, records in pending.items():
                for key_bytes, value in records:
                    self._replay_pending(loaded, pid, key_bytes, value)
            deadline = time.monotonic()
            for group in loaded.values():
                for member in group.members.values():
                    member.heartbeat_deadline = deadline + member.session_timeout_ms / 1000
                self.consumer_protocol.loaded(group)
                self.groups[group.group_id] = group
            self.owned.add(partition)
            if loaded:
                log.info("loaded %d groups from %s-%d", len(loaded), OFFSETS_TOPIC, partition)
        finally:
            self.loading.discard(partition)

    def _replay(self, groups: dict[str, Group], key_bytes: bytes | None, value: bytes | None) -> None:
        if key_bytes is None:
            return
        key = decode_key(key_bytes)
        if isinstance(key, ConsumerKey):
            replay(groups, key, value)
            return
        group = groups.get(key.group)
        if isinstance(key, OffsetKey):
            if value is None:
                if group is not None:
                    group.offsets.pop((key.topic, key.partition), None)
                return
            if group is None:
                group = groups[key.group] = Group(key.group)
            group.offsets[(key.topic, key.partition)] = decode_offset(value)
            return
        if value is None:
            groups.pop(key.group, None)
            return
        meta = decode_group(value)
        offsets = group.offsets if group is not None else {}
        group = groups[key.group] = Group(key.group, offsets=offsets)
        group.protocol_type = meta.protocol_type or None
        group.generation = meta.generation
        group.protocol_name = meta.protocol
        group.leader_id = meta.leader
        for m in meta.members:
            member = Member(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout,
                            m.session_timeout, meta.protocol_type, [(meta.protocol or "", m.subscription)],
                            assignment=m.assignment)
            group.members[m.member_id] = member
            if m.group_instance_id:
                group.static_members[m.group_instance_id] = m.member_id
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY
        if meta.state_timestamp >= 0:
            group.state_timestamp = meta.state_timestamp

    def _replay_pending(self, groups: dict[str, Group], producer_id: int, key_bytes: bytes | None,
                        value: bytes | None) -> None:
        if key_bytes is None or value is None:
            return
        key = decode_key(key_bytes)
        if isinstance(key, OffsetKey):
            group = groups.setdefault(key.group, Group(key.group))
            group.pending_txn.setdefault(producer_id, {})[(key.topic, key.partition)] = decode_offset(value)

    def unload(self, partition: int) -> None:
        """Leadership of the partition moved away: drop its groups, fail waiting members."""
        self.owned.discard(partition)
        for group_id in [g for g in self.groups if self.partition_for(g) == partition]:
            group = self.groups.pop(group_id)
            for member in group.members.values():
                if member.awaiting_join:
                    member.join_future.set_result(JoinResult(E.not_coordinator.value))
                if member.awaiting_sync:
                    member.sync_future.set_result((E.not_coordinator.value, b""))
            if group.rebalance_deadline is not None:
                group.rebalance_deadline.cancel()

    # -- persistence -----------------------------------------------------------------------

    async def write(self, group_id: str, records: list[tuple[bytes, bytes | None]],
                     producer: tuple[int, int] | None = None) -> ErrorCode:
        """Appends records to the group's partition (acks=all); `producer`: as a transactional batch
        of that producer id and epoch (without a sequence: the broker writes it, not the client)."""
        partition = self.broker.partition(OFFSETS_TOPIC, self.partition_for(group_id))
        if partition is None or self.partition_for(group_id) not in self.owned:
            return E.not_coordinator
        pid, epoch = producer if producer is not None else (NO_PRODUCER_ID, -1)
        batch = bytearray(build_batch([(k, v, []) for k, v in records], timestamp_ms=now_ms(), producer_id=pid,
                                      producer_epoch=epoch,
                                      attributes_extra=TRANSACTIONAL_BIT if producer is not None else 0))
        try:
            await partition.append_internal(batch)
        except TimeoutError:
            log.warning("group %s: the ISR of %s did not confirm the write in time", group_id, OFFSETS_TOPIC)
            return E.request_timed_out
        except NotEnoughReplicasError as exc:
            # Kafka's mapping for an offsets-topic append below min.insync.replicas: the client retries
            log.warning("group %s: %s", group_id, exc)
            return E.coordinator_not_available
        except InvalidProducerEpochError:
            return E.producer_fenced
        except InvalidTxnStateError:
            return E.invalid_txn_state
        except Exception as exc:  # not leader any more, or the log refused it: the client retries
            log.warning("cannot write group %s to %s: %s", group_id, OFFSETS_TOPIC, exc)
            return E.not_coordinator
        return E.none

    async def _store_group(self, group: Group) -> ErrorCode:
        record = (encode_key(GroupKey(group.group_id)), encode_group(group.to_value()))
        return await self.write(group.group_id, [record])

    # -- JoinGroup -------------------------------------------------------------------------

    async def join(
        self, group_id: str, member_id: str, instance_id: str | None, protocol_type: str,
        protocols: list[tuple[str, bytes]], session_timeout_ms: int, rebalance_timeout_ms: int,
        client_id: str, client_host: str, require_known_member_id: bool, supports_skip_assignment: bool,
    ) -> JoinResult:
        if not group_id:
            return JoinResult(E.invalid_group_id.value, member_id=member_id)
        error = self.error_for(group_id)
        if error is not None:
            return JoinResult(error.value, member_id=member_id)
        s = self.settings
        if not s.min_session_timeout_ms <= session_timeout_ms <= s.max_session_timeout_ms:
            return JoinResult(E.invalid_session_timeout.value, member_id=member_id)
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return JoinResult(E.unknown_member_id.value, member_id=member_id)
            group = self.groups[group_id] = Group(group_id)
        if group.state == GroupState.DEAD:
            return JoinResult(E.coordinator_not_available.value, member_id=member_id)
        if group.share is not None:
            return JoinResult(E.inconsistent_group_protocol.value, member_id=member_id)
        if group.consumer is not None and group.consumer.members:
            return await self.consumer_protocol.classic_join(
                group, member_id, instance_id, protocol_type, protocols, session_timeout_ms, rebalance_timeout_ms,
                client_id, client_host, require_known_member_id)
        if group.consumer is not None:
            error = await self._to_classic(group)
            if error is not None:
                return JoinResult(error.value, member_id=member_id)
        if not group.supports(protocol_type, protocols):
            return JoinResult(E.inconsistent_group_protocol.value, member_id=member_id)
        if len(group.members) >= s.max_group_size and member_id not in group.members:
            return JoinResult(E.group_max_size_reached.value, member_id=member_id)
        new = Member(member_id, instance_id, client_id, client_host, rebalance_timeout_ms, session_timeout_ms,
                     protocol_type, protocols)
        if not member_id:
            return await self._join_new_member(group, new, require_known_member_id, supports_skip_assignment)
        return await self._join_known_member(group, new)

    async def _to_classic(self, group: Group) -> ErrorCode | None:
        """A classic member joins an empty KIP-848 group: the group becomes classic, with its offsets."""
        assert group.consumer is not None and not group.consumer.members
        stored = await self.write(group.group_id, group_tombstones(group.group_id, group, deleting=False))
        if stored != E.none:
            return stored
        group.consumer = None
        group.protocol_type = None
        return None

    async def _join_new_member(self, group: Group, new: Member, require_known: bool, skip_ok: bool) -> JoinResult:
        new.member_id = f"{new.client_id or 'member'}-{uuid.uuid4()}"
        if new.group_instance_id:
            old_id = group.static_members.get(new.group_instance_id)
            if old_id is not None and old_id in group.members:
                return await self._replace_static_member(group, group.members[old_id], new, skip_ok)
        elif require_known:
            # KIP-394: hand out the id first so a member that times out here is not a ghost.
            group.pending_members.add(new.member_id)
            self._pending_deadlines[(group.group_id, new.member_id)] = \
                time.monotonic() + new.session_timeout_ms / 1000
            return JoinResult(E.member_id_required.value, member_id=new.member_id)
        return await self._add_and_join(group, new)

    async def _join_known_member(self, group: Group, new: Member) -> JoinResult:
        member_id = new.member_id
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self._pending_deadlines.pop((group.group_id, member_id), None)
            return await self._add_and_join(group, new)
        known = group.static_members.get(new.group_instance_id) if new.group_instance_id else None
        if known is not None and known != member_id:
            # Checked before "unknown member", as Kafka does: a replaced static member told only that its
            # id is unknown would join afresh with the same instance id and fence its successor in turn.
            return JoinResult(E.fenced_instance_id.value, member_id=member_id)
        member = group.members.get(member_id)
        if member is None:
            return JoinResult(E.unknown_member_id.value, member_id=member_id)
        if new.group_instance_id and member.group_instance_id != new.group_instance_id:
            return JoinResult(E.fenced_instance_id.value, member_id=member_id)
        changed = not member.same_protocols(new.protocols)
        self._update_member(member, new)
        if group.state == GroupState.PREPARING_REBALANCE:
            return await self._await_join(group, member)
        if group.state == GroupState.COMPLETING_REBALANCE and not changed:
            return self._current_generation(group, member, include_members=group.is_leader(member_id))
        if group.state == GroupState.STABLE and not changed and not group.is_leader(member_id):
            return self._current_generation(group, member, include_members=False)
        self.prepare_rebalance(group, f"member {member_id} rejoined")
        return await self._await_join(group, member)

    async def _replace_static_member(self, group: Group, old: Member, new: Member, skip_ok: bool) -> JoinResult:
        """KIP-345: a restarted static member takes over its old identity without a rebalance
        when its subscription is unchanged."""
        if old.awaiting_join:
            old.join_future.set_result(JoinResult(E.fenced_instance_id.value, member_id=old.member_id))
        if old.awaiting_sync:
            old.sync_future.set_result((E.fenced_instance_id.value, b""))
        was_leader = group.is_leader(old.member_id)
        unchanged = old.same_protocols(new.protocols)
        del group.members[old.member_id]
        new.assignment = old.assignment
        group.members[new.member_id] = new
        group.static_members[new.group_instance_id] = new.member_id
        if was_leader:
            group.leader_id = new.member_id
        # A rejoining static leader gets the member list; with JoinGroup v9 it is told to skip the
        # assignment (KIP-814), before that its SyncGroup in Stable just returns the current one.
        if group.state == GroupState.STABLE and unchanged:
            error = await self._store_group(group)
            if error != E.none:
                return JoinResult(error.value, member_id=new.member_id)
            new.heartbeat_deadline = time.monotonic() + new.session_timeout_ms / 1000
            return self._current_generation(group, new, include_members=was_leader,
                                            skip_assignment=was_leader and skip_ok)
        self.prepare_rebalance(group, f"static member {new.group_instance_id} rejoined")
        return await self._await_join(group, new)

    async def _add_and_join(self, group: Group, member: Member) -> JoinResult:
        group.add(member)
        if group.state in (GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self.prepare_rebalance(group, f"member {member.member_id} joined")
        elif group.initial_delay_until is not None:
            group.new_member_added = True
        return await self._await_join(group, member)

    @staticmethod
    def _update_member(member: Member, new: Member) -> None:
        member.protocols = new.protocols
        member.session_timeout_ms = new.session_timeout_ms
        member.rebalance_timeout_ms = new.rebalance_timeout_ms
        member.client_id = new.client_id or member.client_id
        member.client_host = new.client_host or member.client_host

    async def _await_join(self, group: Group, member: Member) -> JoinResult:
        member.join_future = asyncio.get_running_loop().create_future()
        future = member.join_future
        self._maybe_complete_join(group)
        return await future

    def _current_generation(self, group: Group, member: Member, include_members: bool,
                            skip_assignment: bool = False) -> JoinResult:
        member.heartbeat_deadline = time.monotonic() + member.session_timeout_ms / 1000
        members = []
        if include_members:
            members = [(m.member_id, m.group_instance_id, m.metadata_for(group.protocol_name or ""))
                       for m in group.members.values()]
        return JoinResult(E.none.value, group.generation, group.protocol_type, group.protocol_name,
                          group.leader_id or "", member.member_id, members, skip_assignment)

    # -- rebalance -------------------------------------------------------------------------

    def prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.state == GroupState.COMPLETING_REBALANCE:
            for m in group.members.values():
                m.assignment = b""
                if m.awaiting_sync:
                    m.sync_future.set_result((E.rebalance_in_progress.value, b""))
        was_empty = group.state == GroupState.EMPTY
        group.transition(GroupState.PREPARING_REBALANCE)
        log.info("group %s rebalancing (generation %d): %s", group.group_id, group.generation, reason)
        loop = asyncio.get_running_loop()
        if group.rebalance_deadline is not None:
            group.rebalance_deadline.cancel()
        rebalance_s = max((m.rebalance_timeout_ms for m in group.members.values()), default=0) / 1000
        delay_s = self.settings.initial_rebalance_delay_ms / 1000
        if was_empty and delay_s > 0:
            group.new_member_added = False
            group.initial_delay_until = loop.time() + delay_s
            started = loop.time()
            group.rebalance_deadline = loop.call_later(
                delay_s, self._initial_delay_expired, group, started, delay_s, rebalance_s)
        else:
            group.initial_delay_until = None
            group.rebalance_deadline = loop.call_later(rebalance_s, self._complete_join, group)
        self.notify()

    def _initial_delay_expired(self, group: Group, started: float, delay_s: float, rebalance_s: float) -> None:
        loop = asyncio.get_running_loop()
        elapsed = loop.time() - started
        if group.new_member_added and elapsed + delay_s < rebalance_s:
            group.new_member_added = False
            group.rebalance_deadline = loop.call_later(
                delay_s, self._initial_delay_expired, group, started, delay_s, rebalance_s)
            return
        group.initial_delay_until = None
        if group.all_rejoined() and not group.pending_members:
            self._complete_join(group)
        else:
            group.rebalance_deadline = loop.call_later(max(0.0, rebalance_s - elapsed), self._complete_join, group)

    def _maybe_complete_join(self, group: Group) -> None:
        if (group.state == GroupState.PREPARING_REBALANCE and group.initial_delay_until is None
                and group.all_rejoined() and not group.pending_members):
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        if group.state != GroupState.PREPARING_REBALANCE or self.groups.get(group.group_id) is not group:
            return
        if group.rebalance_deadline is not None:
            group.rebalance_deadline.cancel()
            group.rebalance_deadline = None
        for member in [m for m in group.members.values() if not m.awaiting_join]:
            log.info("group %s: removing member %s that did not rejoin in time", group.group_id, member.member_id)
            group.remove(member.member_id)
        for pending in group.pending_members:
            self._pending_deadlines.pop((group.group_id, pending), None)
        group.pending_members.clear()
        group.generation += 1
        if not group.members:
            group.protocol_name = None
            group.leader_id = None
            group.transition(GroupState.EMPTY)
            asyncio.get_running_loop().create_task(self._store_group(group))
            self.notify()
            return
        group.protocol_name = group.select_protocol()
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.transition(GroupState.COMPLETING_REBALANCE)
        deadline = time.monotonic()
        for member in group.members.values():
            member.heartbeat_deadline = deadline + member.session_timeout_ms / 1000
            result = self._current_generation(group, member, include_members=group.is_leader(member.member_id))
            member.join_future.set_result(result)
        log.info("group %s: generation %d with %d members, protocol %s", group.group_id, group.generation,
                 len(group.members), group.protocol_name)
        self.notify()

    # -- SyncGroup / Heartbeat / LeaveGroup ------------------------------------------------

    def _member_error(self, group: Group | None, member_id: str, instance_id: str | None,
                      generation: int | None) -> ErrorCode | None:
        if group is None or group.state == GroupState.DEAD:
            return E.unknown_member_id if group is None else E.coordinator_not_available
        member = group.members.get(member_id)
        if instance_id:
            known = group.static_members.get(instance_id)
            if known is not None and known != member_id:
                return E.fenced_instance_id
        if member is None:
            return E.unknown_member_id
        if generation is not None and generation != group.generation:
            return E.illegal_generation
        return None

    async def sync(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
                   protocol_type: str | None, protocol_name: str | None,
                   assignments: dict[str, bytes]) -> tuple[int, bytes, str | None, str | None]:
        error = self.error_for(group_id)
        if error is not None:
            return error.value, b"", None, None
        group = self.groups.get(group_id)
        if group is not None and group.consumer is not None:
            return self.consumer_protocol.classic_sync(group, generation, member_id, instance_id, protocol_type,
                                                       protocol_name)
        error = self._member_error(group, member_id, instance_id, generation)
        if error is not None:
            return error.value, b"", None, None
        assert group is not None
        if (protocol_type and protocol_type != group.protocol_type) or (
                protocol_name and protocol_name != group.protocol_name):
            return E.inconsistent_group_protocol.value, b"", None, None
        member = group.members[member_id]
        member.heartbeat_deadline = time.monotonic() + member.session_timeout_ms / 1000
        if group.state == GroupState.PREPARING_REBALANCE:
            return E.rebalance_in_progress.value, b"", None, None
        if group.state == GroupState.STABLE:
            return E.none.value, member.assignment, group.protocol_type, group.protocol_name
        if group.state != GroupState.COMPLETING_REBALANCE:
            return E.unknown_member_id.value, b"", None, None
        member.sync_future = asyncio.get_running_loop().create_future()
        future = member.sync_future
        if group.is_leader(member_id):
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            gen = group.generation
            stored = await self._store_group(group)
            if group.state == GroupState.COMPLETING_REBALANCE and group.generation == gen:
                if stored != E.none:
                    for m in group.members.values():
                        m.assignment = b""
                        if m.awaiting_sync:
                            m.sync_future.set_result((stored.value, b""))
                else:
                    group.transition(GroupState.STABLE)
                    for m in group.members.values():
                        if m.awaiting_sync:
                            m.sync_future.set_result((E.none.value, m.assignment))
                    self.notify()
        code, assignment = await future
        return code, assignment, group.protocol_type, group.protocol_name

    def heartbeat(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> int:
        error = self.error_for(group_id)
        if error is not None:
            return error.value
        group = self.groups.get(group_id)
        if group is not None and group.consumer is not None:
            return self.consumer_protocol.classic_heartbeat(group, generation, member_id, instance_id)
        if group is not None and group.state == GroupState.EMPTY:
            return E.unknown_member_id.value
        error = self._member_error(group, member_id, instance_id, generation)
        if error is not None:
            return error.value
        assert group is not None
        member = group.members[member_id]
        member.heartbeat_deadline = time.monotonic() + member.session_timeout_ms / 1000
        if group.state == GroupState.PREPARING_REBALANCE:
            return E.rebalance_in_progress.value
        return E.none.value

    def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> tuple[int, list[int]]:
        error = self.error_for(group_id)
        if error is not None:
            return error.value, []
        group = self.groups.get(group_id)
        if group is None:
            return E.unknown_member_id.value, [E.unknown_member_id.value] * len(members)
        if group.consumer is not None:
            return self.consumer_protocol.classic_leave(group, members)
        results = []
        removed = False
        for member_id, instance_id in members:
            if instance_id:
                known = group.static_members.get(instance_id)
                if known is None:
                    results.append(E.unknown_member_id.value)
                    continue
                if member_id and member_id != known:
                    results.append(E.fenced_instance_id.value)
                    continue
                member_id = known
            if member_id in group.pending_members:
                group.pending_members.discard(member_id)
                results.append(E.none.value)
                continue
            member = group.remove(member_id)
            if member is None:
                results.append(E.unknown_member_id.value)
                continue
            if member.awaiting_join:
                member.join_future.set_result(JoinResult(E.unknown_member_id.value, member_id=member_id))
            if member.awaiting_sync:
                member.sync_future.set_result((E.unknown_member_id.value, b""))
            log.info("group %s: member %s left", group_id, member_id)
            results.append(E.none.value)
            removed = True
        if removed:
            self._after_removal(group, "member left")
        return E.none.value, results

    def _after_removal(self, group: Group, reason: str) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self.prepare_rebalance(group, reason)
        elif group.state == GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group)

    async def _sweep(self) -> None:
        """Expires members whose session timed out and pending members that never rejoined."""
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            now = time.monotonic()
            for group in list(self.groups.values()):
                self.consumer_protocol.expire(group, now)
                self.share_protocol.expire(group, now)
                expired = [m for m in group.members.values()
                           if not m.awaiting_join and not m.awaiting_sync and now > m.heartbeat_deadline]
                for member in expired:
                    log.info("group %s: member %s session timed out after %d ms", group.group_id, member.member_id,
                             member.session_timeout_ms)
                    group.remove(member.member_id)
                if expired:
                    self._after_removal(group, "member session expired")
            for key, deadline in list(self._pending_deadlines.items()):
                if now > deadline:
                    del self._pending_deadlines[key]
                    group = self.groups.get(key[0])
                    if group is not None:
                        group.pending_members.discard(key[1])
                        self._maybe_complete_join(group)

    # -- offsets ---------------------------------------------------------------------------

    async def commit(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
                     offsets: dict[tuple[str, int], tuple[int, int, str | None]]) -> dict[tuple[str, int], int]:
        def all_error(code: ErrorCode) -> dict[tuple[str, int], int]:
            return dict.fromkeys(offsets, code.value)

        error = self.error_for(group_id)
        if error is not None:
            return all_error(error)
        group = self.groups.get(group_id)
        if group is None:
            if generation >= 0:
                return all_error(E.unknown_member_id if member_id else E.illegal_generation)
            group = self.groups[group_id] = Group(group_id)  # offsets-only group (assign() consumers)
        if group.state == GroupState.DEAD:
            return all_error(E.coordinator_not_available)
        if group.share is not None:  # a share group's progress is its share-partitions' start offsets
            return all_error(E.group_id_not_found)
        classic = group.consumer is None
        if not classic or not (generation < 0 and group.state == GroupState.EMPTY):  # else: an offsets-only commit
            if classic and group.state == GroupState.COMPLETING_REBALANCE:
                return all_error(E.rebalance_in_progress)
            error = self._commit_error(group, member_id, instance_id, generation, offsets)
            if error is not None:
                return all_error(error)
            if classic:
                member = group.members[member_id]
                member.heartbeat_deadline = time.monotonic() + member.session_timeout_ms / 1000
        return await self._store_offsets(group_id, offsets, group)

    def _commit_error(self, group: Group, member_id: str, instance_id: str | None, generation: int,
                      offsets: dict[tuple[str, int], tuple[int, int, str | None]]) -> ErrorCode | None:
        """Whether the member may commit at this generation: KIP-848's member epoch for a consumer group, the
        classic protocol's member and generation otherwise (for OffsetCommit and, KIP-447, TxnOffsetCommit)."""
        if group.consumer is not None:
            return self.consumer_protocol.commit_error(group, member_id, generation, offsets)
        return self._member_error(group, member_id, instance_id, generation)

    async def _store_offsets(self, group_id: str, offsets: dict[tuple[str, int], tuple[int, int, str | None]],
                             group: Group | None = None, producer: tuple[int, int] | None = None
                             ) -> dict[tuple[str, int], int]:
        """The one path committed offsets are written by: OffsetCommit's into its `group`, pending until stored (what
        revocations wait for); TxnOffsetCommit's with its `producer`, counted once the transaction's marker commits
        (complete_txn), the group made if it was not there only once they are stored."""
        results, values, records = self._offset_records(group_id, offsets)
        if not records:
            return results
        if group is not None:
            group.pending_commits.update(list(values))
        try:
            stored = await self.write(group_id, records, producer=producer)
        finally:
            if group is not None:
                group.pending_commits.subtract(list(values))
                group.pending_commits = +group.pending_commits
        if stored == E.none:
            if producer is None:
                assert group is not None
                group.offsets.update(values)
            else:
                self.groups.setdefault(group_id, Group(group_id)).pending_txn.setdefault(producer[0], {}).update(values)
        results.update(dict.fromkeys(values, stored.value))
        return results

    def _offset_records(self, group_id: str, offsets: dict[tuple[str, int], tuple[int, int, str | None]]
                        ) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], OffsetValue],
                                   list[tuple[bytes, bytes | None]]]:
        """The offsets a commit may store, as values and as the records of the offsets topic; the
        others are answered at once (unknown partition, metadata over offset.metadata.max.bytes)."""
        refused: dict[tuple[str, int], int] = {}
        values: dict[tuple[str, int], OffsetValue] = {}
        records: list[tuple[bytes, bytes | None]] = []
        timestamp = now_ms()
        for (topic, partition), (offset, epoch, metadata) in offsets.items():
            if not self._exists(topic, partition):
                refused[(topic, partition)] = E.unknown_topic_or_partition.value
                continue
            if metadata is not None and len(metadata.encode()) > self.settings.max_metadata_bytes:
                refused[(topic, partition)] = E.offset_metadata_too_large.value
                continue
            value = OffsetValue(offset, epoch, metadata or "", timestamp)
            values[(topic, partition)] = value
            records.append((encode_key(OffsetKey(group_id, topic, partition)), encode_offset(value)))
        return refused, values, records

    def _exists(self, topic: str, partition: int) -> bool:
        info = self.broker.topic(topic)
        return info is not None and 0 <= partition < len(info.partitions)

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None
                      ) -> tuple[int, dict[tuple[str, int], OffsetValue | None]]:
        error = self.error_for(group_id)
        if error is not None:
            return error.value, {}
        group = self.groups.get(group_id)
        committed = group.offsets if group is not None else {}
        if partitions is None:
            return E.none.value, dict(committed)
        return E.none.value, {tp: committed.get(tp) for tp in partitions}

    def fetch_member_error(self, group_id: str, member_id: str | None, member_epoch: int) -> ErrorCode | None:
        """OffsetFetch v9 by a KIP-848 member: it must be in the group at that epoch (Kafka's check)."""
        group = self.groups.get(group_id)
        if not member_id or group is None or group.consumer is None or self.error_for(group_id) is not None:
            return None
        return self.consumer_protocol.commit_error(group, member_id, member_epoch)

    def unstable(self, group_id: str, partitions: list[tuple[str, int]] | None) -> set[tuple[str, int]]:
        """Partitions with offsets committed in a transaction that has not ended (require_stable)."""
        group = self.groups.get(group_id)
        if group is None:
            return set()
        pending = {tp for offsets in group.pending_txn.values() for tp in offsets}
        return pending if partitions is None else pending & set(partitions)

    # -- offsets committed in transactions ---------------------------------------------------------

    async def commit_txn(self, group_id: str, producer_id: int, producer_epoch: int, generation: int,
                         member_id: str, instance_id: str | None,
                         offsets: dict[tuple[str, int], tuple[int, int, str | None]]) -> dict[tuple[str, int], int]:
        """TxnOffsetCommit: the offsets are written as a transactional batch of the producer and count
        only once its transaction commits (the marker on this partition, complete_txn)."""
        def all_error(code: ErrorCode) -> dict[tuple[str, int], int]:
            return dict.fromkeys(offsets, code.value)

        error = self.error_for(group_id)
        if error is not None:
            return all_error(error)
        group = self.groups.get(group_id)
        if group is not None and generation >= 0 and member_id:
            # KIP-447: a zombie consumer of an older generation cannot commit in a transaction either.
            error = self._commit_error(group, member_id, instance_id, generation, offsets)
            if error is not None:
                return all_error(error)
        return await self._store_offsets(group_id, offsets, producer=(producer_id, producer_epoch))

    def complete_txn(self, partition: int, producer_id: int, committed: bool) -> None:
        """A marker for the producer was written on this __consumer_offsets partition."""
        for group_id, group in self.groups.items():
            if self.partition_for(group_id) != partition:
                continue
            offsets = group.pending_txn.pop(producer_id, None)
            if offsets and committed:
                group.offsets.update(offsets)

    async def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]
                             ) -> tuple[int, dict[tuple[str, int], int]]:
        error = self.error_for(group_id)
        if error is not None:
            return error.value, {}
        group = self.groups.get(group_id)
        if group is None or group.state == GroupState.DEAD:
            return E.group_id_not_found.value, {}
        subscribed = group.subscribed_topics() if group.state != GroupState.EMPTY else set()
        if subscribed is None:
            return E.non_empty_group.value, {}
        results: dict[tuple[str, int], int] = {}
        records = []
        for tp in partitions:
            if not self._exists(*tp):  # as Kafka: named as such, whatever the group holds
                results[tp] = E.unknown_topic_or_partition.value
            elif tp[0] in subscribed:
                results[tp] = E.group_subscribed_to_topic.value
            else:
                results[tp] = E.none.value
                if tp in group.offsets:
                    records.append((encode_key(OffsetKey(group_id, tp[0], tp[1])), None))
        if records:
            stored = await self.write(group_id, records)
            if stored != E.none:
                return stored.value, {}
        for tp, code in results.items():
            if code == E.none.value:
                group.offsets.pop(tp, None)
        return E.none.value, results

    # -- offset retention (KIP-211, KIP-496) -------------------------------------------------

    def forget_topics(self, names: set[str]) -> None:
        """Topics that were deleted (or deleted and created again): their committed offsets are removed
        from every group this broker coordinates, with tombstones, as Kafka does. Kept, they would make
        a group resume a new topic of the same name at the old topic's positions, skipping its first
        records, and `dm groups describe` would list offsets of a topic that is gone."""
        now = now_ms()
        for name in names:
            self._deleted_topics[name] = now
        self._expire_now.set()

    def _gone(self, topic: str, value: OffsetValue) -> bool:
        """An offset of a topic that no longer exists, or of a deleted one whose name was given again
        (committed before the deletion). The first also covers a deletion seen by a previous
        coordinator of the group that failed before writing its tombstones."""
        deleted_at = self._deleted_topics.get(topic)
        return (deleted_at is not None and value.commit_timestamp <= deleted_at) or self.broker.topic(topic) is None

    async def _expire_periodically(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._expire_now.wait(), self.settings.retention_check_interval_ms / 1000)
            except TimeoutError:
                pass
            self._expire_now.clear()
            try:
                await self.expire_offsets()
            except Exception:  # the next round tries again; a failed write changed nothing
                log.exception("expiring committed offsets failed")

    def _expired(self, group: Group, now: int) -> list[tuple[str, int]]:
        """Offsets of deleted topics (forget_topics), and Kafka's retention rules: an empty consumer
        group loses its offsets `retention` after it became empty; a group that only commits (no
        protocol) loses each offset `retention` after its commit; a stable consumer group loses
        offsets of topics it no longer subscribes to."""
        candidates = [(tp, v) for tp, v in group.offsets.items() if tp not in group.pending_commits]
        gone = [tp for tp, v in candidates if self._gone(tp[0], v)]
        if gone:
            removed = set(gone)
            candidates = [(tp, v) for tp, v in candidates if tp not in removed]
        return gone + self._past_retention(group, candidates, now)

    def _past_retention(self, group: Group, candidates: list[tuple[tuple[str, int], OffsetValue]],
                        now: int) -> list[tuple[str, int]]:
        retention = self.settings.offsets_retention_ms
        if group.state == GroupState.EMPTY:
            if group.protocol_type:
                return [tp for tp, _ in candidates] if group.state_timestamp + retention <= now else []
            return [tp for tp, v in candidates if v.commit_timestamp + retention <= now]
        if group.state == GroupState.STABLE:
            subscribed = group.subscribed_topics()
            if subscribed is not None:
                return [tp for tp, v in candidates if tp[0] not in subscribed and v.commit_timestamp + retention <= now]
        return []

    async def expire_offsets(self, now: int | None = None) -> int:
        """Deletes expired offsets (tombstones in __consumer_offsets) and empty groups left with no
        offsets; returns how many offsets were deleted."""
        now = now_ms() if now is None else now
        # A deleted topic's name is kept as long as offsets are: any offset of the old topic is gone by then.
        self._deleted_topics = {t: at for t, at in self._deleted_topics.items()
                                if at + self.settings.offsets_retention_ms > now}
        deleted = 0
        for group in list(self.groups.values()):
            if self.partition_for(group.group_id) not in self.owned or group.state == GroupState.DEAD:
                continue
            expired = self._expired(group, now)
            decided = {tp: group.offsets[tp] for tp in expired}
            drop_group = (group.state == GroupState.EMPTY and len(expired) == len(group.offsets)
                          and not group.pending_commits)
            if not expired and not drop_group:
                continue
            records: list[tuple[bytes, bytes | None]] = [
                (encode_key(OffsetKey(group.group_id, t, p)), None) for t, p in expired]
            if drop_group:
                records += group_tombstones(group.group_id, group)
            if await self.write(group.group_id, records) != E.none:
                continue
            if self.groups.get(group.group_id) is not group:
                continue  # unloaded or replaced while the write waited
            for tp, value in decided.items():
                if group.offsets.get(tp) is value:  # a commit that landed meanwhile came after the tombstone
                    group.offsets.pop(tp)
            deleted += len(expired)
            log.info("group %s: %d committed offsets expired or of deleted topics%s", group.group_id, len(expired),
                     "; group removed" if drop_group else "")
            if drop_group and group.state == GroupState.EMPTY and not group.offsets:
                group.transition(GroupState.DEAD)
                self.groups.pop(group.group_id, None)
                self.notify()
        return deleted

    # -- admin -----------------------------------------------------------------------------

    def list_groups(self, states: set[str] | None, types: set[str] | None) -> list[Group]:
        out = []
        for group in self.groups.values():
            if group.state == GroupState.DEAD:
                continue
            if states and group.state_name.lower() not in states:
                continue
            if types and group.group_type not in types:
                continue
            out.append(group)
        return out

    def describe(self, group_id: str) -> tuple[int, Group | None]:
        error = self.error_for(group_id)
        if error is not None:
            return error.value, None
        return E.none.value, self.groups.get(group_id)

    async def delete_group(self, group_id: str) -> int:
        error = self.error_for(group_id)
        if error is not None:
            return error.value
        group = self.groups.get(group_id)
        if group is None or group.state == GroupState.DEAD:
            return E.group_id_not_found.value
        if group.state != GroupState.EMPTY:
            return E.non_empty_group.value
        if group.share is not None:
            # Its delivery state goes first (a new group of that id must not resume it): leaders reload
            # a share-partition whose stored state is gone when a member next opens a session.
            error = await self._delete_share_state(group)
            if error != E.none:
                return error.value
        records = group_tombstones(group_id, group)
        records += [(encode_key(OffsetKey(group_id, t, p)), None) for t, p in group.offsets]
        stored = await self.write(group_id, records)
        if stored != E.none:
            return stored.value
        group.transition(GroupState.DEAD)
        self.groups.pop(group_id, None)
        self.notify()
        return E.none.value

    async def _delete_share_state(self, group: Group) -> ErrorCode:
        assert group.share is not None
        store = self.broker.share.store
        if store is None:
            return E.none
        for name in sorted(group.share.used):
            topic = self.broker.topic(name)
            for index in range(len(topic.partitions) if topic is not None else 0):
                error = await store.delete(group.group_id, topic.topic_id, index)
                if error != E.none:
                    log.warning("share group %s: the state of %s-%d could not be deleted: %s", group.group_id, name,
                                index, error.name)
                    return error
        return E.none

    def notify(self) -> None:
        if self.on_change is not None:
            self.on_change()
