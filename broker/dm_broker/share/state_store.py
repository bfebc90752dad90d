"""Where share-partition state survives its leader (KIP-932, ADR 0038): the internal compacted topic
`__share_group_state`, as Kafka keeps it.

The state of (group, topic id, partition) lives in partition `murmur2("group:topicId:partition") % n`
of that topic; the broker leading that partition is the share coordinator for it. It replays the
partition when it becomes leader, holds the latest snapshot per key, and answers
ReadShareGroupState / WriteShareGroupState (Kafka's inter-broker APIs 84 and 85). A partition leader
reads the snapshot when it first serves a share-partition in a leader epoch and writes one before it
answers acknowledgements. Records are Kafka's ShareSnapshotKey/Value (version 0).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from ..binary import FormatError, Reader, Writer
from ..log.records import build_batch, decode_records, parse_header
from ..partitioners import murmur2_partition
from ..protocol.build import make, nested
from ..protocol.codec import request_class
from .partition_state import RecordState, StateBatch

if TYPE_CHECKING:
    from ..broker import Broker

log = logging.getLogger(__name__)

STATE_TOPIC = "__share_group_state"
SNAPSHOT_KEY = 0
RETRIABLE = (ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available,
             ErrorCode.not_leader_or_follower, ErrorCode.request_timed_out)
Key = tuple[str, str, int]


@dataclass(frozen=True)
class Snapshot:
    state_epoch: int
    leader_epoch: int
    start: int
    batches: tuple[StateBatch, ...]


class ShareStateUnavailable(Exception):
    """The share coordinator could not be reached: the share-partition is not served rather than
    started afresh (which would redeliver acknowledged records)."""


def encode_key(key: Key) -> bytes:
    group, topic_id, partition = key
    return Writer().i16(SNAPSHOT_KEY).string(group).uuid(uuid.UUID(topic_id)).i32(partition).done()


def decode_key(data: bytes) -> Key | None:
    r = Reader(data)
    if r.i16() != SNAPSHOT_KEY:
        return None  # a ShareUpdate (Kafka's delta records): dm writes whole snapshots only
    return r.string() or "", str(r.uuid()), r.i32()


def encode_value(snapshot: Snapshot) -> bytes:
    w = Writer().i16(0).i16(0).i32(snapshot.state_epoch).i32(snapshot.leader_epoch).i64(snapshot.start)
    w.compact_array_len(len(snapshot.batches))
    for b in snapshot.batches:
        w.i64(b.first).i64(b.last).i8(int(b.state)).i16(b.delivery_count).tagged({})
    return w.tagged({}).done()


def decode_value(data: bytes) -> Snapshot:
    r = Reader(data)
    if r.i16() != 0:
        raise FormatError("unknown ShareSnapshotValue version")
    r.i16()  # snapshot epoch
    state_epoch, leader_epoch, start = r.i32(), r.i32(), r.i64()
    batches = []
    for _ in range(max(0, r.compact_array_len())):
        first, last, state, count = r.i64(), r.i64(), r.i8(), r.i16()
        r.tagged()
        batches.append(StateBatch(first, last, RecordState(state), count))
    return Snapshot(state_epoch, leader_epoch, start, tuple(batches))


class ShareCoordinator:
    """The `__share_group_state` partitions this broker leads, and their latest snapshots."""

    def __init__(self, broker: Broker, partitions: int) -> None:
        self.broker = broker
        self.partitions = partitions
        self.snapshots: dict[int, dict[Key, Snapshot]] = {}
        self.loaded_epochs: dict[int, int] = {}  # the leader epoch each partition was replayed in

    def partition_for(self, key: Key) -> int:
        return murmur2_partition(f"{key[0]}:{key[1]}:{key[2]}".encode(), self.partitions)

    def load(self, index: int) -> None:
        part = self.broker.partition(STATE_TOPIC, index)
        if part is None or self.loaded_epochs.get(index) == part.leader_epoch:
            return
        latest: dict[Key, Snapshot] = {}
        plog = part.log
        for batch in plog.batches(plog.log_start_offset, plog.log_end_offset):
            if parse_header(batch).is_control:
                continue
            for record in decode_records(batch):
                try:
                    key = decode_key(record.key) if record.key else None
                    if key is None:
                        continue
                    if record.value is None:
                        latest.pop(key, None)
                    else:
                        latest[key] = decode_value(record.value)
                except (FormatError, ValueError, UnicodeDecodeError) as exc:
                    log.warning("skipping unreadable %s-%d record at %d: %s", STATE_TOPIC, index, record.offset, exc)
        self.snapshots[index] = latest
        self.loaded_epochs[index] = part.leader_epoch
        if latest:
            log.info("loaded %d share-partition states from %s-%d", len(latest), STATE_TOPIC, index)

    def unload(self, index: int) -> None:
        self.snapshots.pop(index, None)
        self.loaded_epochs.pop(index, None)

    def read(self, key: Key) -> tuple[ErrorCode, Snapshot | None]:
        index = self.partition_for(key)
        if index not in self.snapshots:
            return ErrorCode.not_coordinator, None
        return ErrorCode.none, self.snapshots[index].get(key)

    async def write(self, key: Key, snapshot: Snapshot) -> ErrorCode:
        index = self.partition_for(key)
        held = self.snapshots.get(index)
        part = self.broker.partition(STATE_TOPIC, index)
        if held is None or part is None:
            return ErrorCode.not_coordinator
        known = held.get(key)
        if known is not None and snapshot.state_epoch < known.state_epoch:
            return ErrorCode.fenced_state_epoch  # written before the group's offsets were altered or deleted
        if known is not None and snapshot.state_epoch == known.state_epoch and \
                snapshot.leader_epoch < known.leader_epoch:
            return ErrorCode.fenced_leader_epoch  # a deposed leader of the data partition
        batch = bytearray(build_batch([(encode_key(key), encode_value(snapshot), [])], timestamp_ms=0))
        try:
            await part.append_internal(batch)
        except Exception as exc:  # not leader any more, too few in sync, timed out: the leader retries
            log.warning("cannot write share state %s to %s-%d: %s", key, STATE_TOPIC, index, exc)
            return ErrorCode.not_coordinator
        if self.snapshots.get(index) is held:
            held[key] = snapshot
        return ErrorCode.none

    async def delete(self, key: Key) -> ErrorCode:
        """Forgets a share-partition's state (DeleteShareGroupOffsets, DeleteGroups): a tombstone."""
        index = self.partition_for(key)
        held = self.snapshots.get(index)
        part = self.broker.partition(STATE_TOPIC, index)
        if held is None or part is None:
            return ErrorCode.not_coordinator
        if key not in held:
            return ErrorCode.none
        batch = bytearray(build_batch([(encode_key(key), None, [])], timestamp_ms=0))
        try:
            await part.append_internal(batch)
        except Exception as exc:  # the caller retries
            log.warning("cannot delete share state %s from %s-%d: %s", key, STATE_TOPIC, index, exc)
            return ErrorCode.not_coordinator
        if self.snapshots.get(index) is held:
            held.pop(key, None)
        return ErrorCode.none


class ShareStateClient:
    """The partition leader's side: reads and writes snapshots at the share coordinator (this broker,
    in process, or another over the inter-broker listener), retrying while the coordinator moves."""

    def __init__(self, broker: Broker, attempts: int = 20, backoff_s: float = 0.25) -> None:
        self.broker = broker
        self.attempts = attempts
        self.backoff_s = backoff_s

    def _leader(self, index: int) -> int:
        topic = self.broker.topic(STATE_TOPIC)
        return topic.partitions[index].leader if topic is not None else -1

    async def read(self, group: str, topic_id: str, partition: int) -> Snapshot | None:
        key = (group, topic_id, partition)
        for _ in range(self.attempts):
            with contextlib.suppress(OSError, ConnectionError, TimeoutError):
                error, snapshot = await self._read_once(key)
                if error == ErrorCode.none:
                    return snapshot
                if error not in RETRIABLE:
                    raise ShareStateUnavailable(f"reading the share state of {key}: {error.name}")
            await asyncio.sleep(self.backoff_s)
        raise ShareStateUnavailable(f"the share coordinator of {key} did not answer")

    async def _read_once(self, key: Key) -> tuple[ErrorCode, Snapshot | None]:
        await self.broker.ensure_share_state_topic()
        coordinator = self.broker.share_coordinator
        leader = self._leader(coordinator.partition_for(key))
        if leader == self.broker.node_id:
            return coordinator.read(key)
        if leader < 0:
            return ErrorCode.coordinator_not_available, None
        cls = request_class(84, 0)
        part = make(nested(cls, "PartitionData"), partition=key[2], leader_epoch=-1)
        body = make(cls, group_id=key[0], topics=(make(nested(cls, "ReadStateData"), topic_id=uuid.UUID(key[1]),
                                                       partitions=(part,)),))
        resp = await self.broker.channels.request(leader, body, timeout=10)
        result = resp.results[0].partitions[0]
        if result.error_code != ErrorCode.none:
            return result.error_code, None
        if result.state_epoch < 0:
            return ErrorCode.none, None  # nothing stored for the key
        batches = tuple(StateBatch(b.first_offset, b.last_offset, RecordState(b.delivery_state), b.delivery_count)
                        for b in result.state_batches)
        return ErrorCode.none, Snapshot(result.state_epoch, -1, result.start_offset, batches)

    async def write(self, group: str, topic_id: str, partition: int, snapshot: Snapshot) -> ErrorCode:
        return await self._retrying(lambda: self._write_once((group, topic_id, partition), snapshot))

    async def delete(self, group: str, topic_id: str, partition: int) -> ErrorCode:
        return await self._retrying(lambda: self._delete_once((group, topic_id, partition)))

    async def _retrying(self, attempt: Callable[[], Awaitable[ErrorCode]]) -> ErrorCode:
        error = ErrorCode.coordinator_not_available
        for _ in range(self.attempts):
            try:
                error = await attempt()
            except (OSError, ConnectionError, TimeoutError):
                error = ErrorCode.coordinator_not_available
            if error not in RETRIABLE:
                return error
            await asyncio.sleep(self.backoff_s)
        return error

    async def _delete_once(self, key: Key) -> ErrorCode:
        await self.broker.ensure_share_state_topic()
        coordinator = self.broker.share_coordinator
        leader = self._leader(coordinator.partition_for(key))
        if leader == self.broker.node_id:
            return await coordinator.delete(key)
        if leader < 0:
            return ErrorCode.coordinator_not_available
        cls = request_class(86, 0)
        part = make(nested(cls, "PartitionData"), partition=key[2])
        body = make(cls, group_id=key[0], topics=(make(nested(cls, "DeleteStateData"), topic_id=uuid.UUID(key[1]),
                                                       partitions=(part,)),))
        resp = await self.broker.channels.request(leader, body, timeout=10)
        return resp.results[0].partitions[0].error_code

    async def _write_once(self, key: Key, snapshot: Snapshot) -> ErrorCode:
        await self.broker.ensure_share_state_topic()
        coordinator = self.broker.share_coordinator
        leader = self._leader(coordinator.partition_for(key))
        if leader == self.broker.node_id:
            return await coordinator.write(key, snapshot)
        if leader < 0:
            return ErrorCode.coordinator_not_available
        cls = request_class(85, 0)
        batch_cls = nested(cls, "StateBatch")
        part = make(nested(cls, "PartitionData"), partition=key[2], state_epoch=snapshot.state_epoch,
                    leader_epoch=snapshot.leader_epoch, start_offset=snapshot.start,
                    state_batches=tuple(make(batch_cls, first_offset=b.first, last_offset=b.last,
                                             delivery_state=int(b.state), delivery_count=b.delivery_count)
                                        for b in snapshot.batches))
        body = make(cls, group_id=key[0], topics=(make(nested(cls, "WriteStateData"), topic_id=uuid.UUID(key[1]),
                                                       partitions=(part,)),))
        resp = await self.broker.channels.request(leader, body, timeout=10)
        return resp.results[0].partitions[0].error_code
