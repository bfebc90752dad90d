"""Records of `__consumer_offsets`, in Kafka's formats so Kafka tooling can read them.

Keys: OffsetCommitKey (version 1: group, topic, partition), GroupMetadataKey (version 2:
group) and, for KIP-848 consumer groups, keys 3 and 5-8 (below).
Values: OffsetCommitValue v3 (offset, leader epoch, metadata, commit timestamp) and
GroupMetadataValue v3 (protocol type, generation, protocol, leader, members). A null value is a
tombstone: the offset or group was deleted, and compaction eventually drops it.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..binary import FormatError, Reader, Writer

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3


RecordFormatError = FormatError


@dataclass(frozen=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupKey:
    group: str


@dataclass(frozen=True)
class OffsetValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


@dataclass
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    state_timestamp: int
    members: list[MemberValue] = field(default_factory=list)


def encode_key(key: OffsetKey | GroupKey) -> bytes:
    if isinstance(key, OffsetKey):
        return bytes(Writer().i16(OFFSET_KEY_VERSION).string(key.group).string(key.topic).i32(key.partition).buf)
    return bytes(Writer().i16(GROUP_KEY_VERSION).string(key.group).buf)


def decode_key(data: bytes) -> OffsetKey | GroupKey | ConsumerKey:
    r = Reader(data)
    version = r.i16()
    if version in (0, 1):
        group, topic = r.string(), r.string()
        return OffsetKey(group or "", topic or "", r.i32())
    if version == 2:
        return GroupKey(r.string() or "")
    if version in _GROUP_ONLY_KEYS or version in _MEMBER_KEYS:
        return _decode_consumer_key(version, r)
    raise RecordFormatError(f"unknown __consumer_offsets key version {version}")


def encode_offset(value: OffsetValue) -> bytes:
    w = Writer().i16(OFFSET_VALUE_VERSION).i64(value.offset).i32(value.leader_epoch)
    return bytes(w.string(value.metadata).i64(value.commit_timestamp).buf)


def decode_offset(data: bytes) -> OffsetValue:
    r = Reader(data)
    version = r.i16()
    offset = r.i64()
    epoch = r.i32() if version >= 3 else -1
    metadata = r.string() or ""
    timestamp = r.i64()
    return OffsetValue(offset, epoch, metadata, timestamp)


def encode_group(value: GroupValue) -> bytes:
    w = Writer().i16(GROUP_VALUE_VERSION).string(value.protocol_type).i32(value.generation)
    w.string(value.protocol).string(value.leader).i64(value.state_timestamp).i32(len(value.members))
    for m in value.members:
        w.string(m.member_id).string(m.group_instance_id).string(m.client_id).string(m.client_host)
        w.i32(m.rebalance_timeout).i32(m.session_timeout).bytes_(m.subscription).bytes_(m.assignment)
    return bytes(w.buf)


def decode_group(data: bytes) -> GroupValue:
    r = Reader(data)
    version = r.i16()
    if version > GROUP_VALUE_VERSION:
        raise RecordFormatError(f"unknown group metadata version {version}")
    value = GroupValue(r.string() or "", r.i32(), r.string(), r.string(), r.i64() if version >= 2 else -1)
    for _ in range(r.i32()):
        member_id = r.string() or ""
        instance = r.string() if version >= 3 else None
        client_id, client_host = r.string() or "", r.string() or ""
        rebalance = r.i32() if version >= 1 else 0
        session = r.i32()
        value.members.append(MemberValue(member_id, instance, client_id, client_host, rebalance, session,
                                         r.bytes_() or b"", r.bytes_() or b""))
    return value


def subscribed_topics(subscription: bytes) -> set[str]:
    """Topics in a consumer protocol subscription (ConsumerProtocolSubscription, any version)."""
    try:
        r = Reader(subscription)
        r.i16()
        return {t for t in (r.string() for _ in range(r.i32())) if t}
    except (RecordFormatError, UnicodeDecodeError):
        return set()


# -- KIP-848 consumer groups: Kafka's coordinator records (keys 3, 5, 6, 7, 8; flexible values v0) ----

CONSUMER_GROUP_KEY = 3
CONSUMER_MEMBER_KEY = 5
CONSUMER_TARGET_KEY = 6
CONSUMER_TARGET_MEMBER_KEY = 7
CONSUMER_CURRENT_MEMBER_KEY = 8
_GROUP_ONLY_KEYS = (CONSUMER_GROUP_KEY, CONSUMER_TARGET_KEY)
_MEMBER_KEYS = (CONSUMER_MEMBER_KEY, CONSUMER_TARGET_MEMBER_KEY, CONSUMER_CURRENT_MEMBER_KEY)
METADATA_HASH_TAG = 0
# in each TopicPartitions of a current assignment: the partitions' assignment epochs (KIP-1251)
ASSIGNMENT_EPOCHS_TAG = 0


@dataclass(frozen=True)
class ConsumerKey:
    """One of a consumer group's records: `kind` is the key version, `member_id` set for member records."""

    kind: int
    group: str
    member_id: str | None = None


@dataclass
class ConsumerGroupValue:
    epoch: int
    metadata_hash: int = 0


@dataclass
class ConsumerMemberValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_names: tuple[str, ...]
    subscribed_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    # ClassicMemberMetadata (tag 0): session timeout and supported protocols of a classic member
    classic: tuple[int, tuple[tuple[str, bytes], ...]] | None = None


@dataclass
class ConsumerCurrentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: dict[str, frozenset[int]]
    pending_revocation: dict[str, frozenset[int]]
    # KIP-1251: (topic id, partition) -> the epoch it was assigned at; a record without them (written
    # before dm kept them) reads as empty, and the member's epoch stands for every partition
    assignment_epochs: dict[tuple[str, int], int] = field(default_factory=dict)


def encode_consumer_key(key: ConsumerKey) -> bytes:
    w = Writer().i16(key.kind).string(key.group)
    if key.kind in _MEMBER_KEYS:
        w.string(key.member_id or "")
    return bytes(w.buf)


def _decode_consumer_key(version: int, r: Reader) -> ConsumerKey:
    group = r.string() or ""
    return ConsumerKey(version, group, (r.string() or "") if version in _MEMBER_KEYS else None)


def _write_partitions(w: Writer, assignment: dict[str, frozenset[int]],
                      epochs: Mapping[tuple[str, int], int] | None = None) -> None:
    """TopicPartitions; with `epochs`, each topic's assignment epochs (in partition order) in tag 0."""
    w.compact_array_len(len(assignment))
    for topic_id in sorted(assignment):
        w.uuid(uuid.UUID(topic_id))
        parts = sorted(assignment[topic_id])
        w.compact_array_len(len(parts))
        for p in parts:
            w.i32(p)
        tags = {}
        if epochs is not None and all((topic_id, p) in epochs for p in parts):
            e = Writer().compact_array_len(len(parts))
            for p in parts:
                e.i32(epochs[(topic_id, p)])
            tags[ASSIGNMENT_EPOCHS_TAG] = e.done()
        w.tagged(tags)


def _read_partitions(r: Reader, epochs: dict[tuple[str, int], int] | None = None) -> dict[str, frozenset[int]]:
    """TopicPartitions; the assignment epochs found in tag 0 go into `epochs`."""
    out: dict[str, frozenset[int]] = {}
    for _ in range(max(0, r.compact_array_len())):
        topic_id = str(r.uuid())
        parts = [r.i32() for _ in range(max(0, r.compact_array_len()))]
        out[topic_id] = frozenset(parts)
        raw = r.tagged().get(ASSIGNMENT_EPOCHS_TAG)
        if raw is not None and epochs is not None:
            e = Reader(raw)
            values = [e.i32() for _ in range(max(0, e.compact_array_len()))]
            if len(values) != len(parts):
                raise RecordFormatError(f"{len(values)} assignment epochs for {len(parts)} partitions")
            epochs.update(((topic_id, p), v) for p, v in zip(parts, values, strict=True))
    return out


def _value_reader(data: bytes) -> Reader:
    r = Reader(data)
    version = r.i16()
    if version != 0:
        raise RecordFormatError(f"unknown consumer group record value version {version}")
    return r


def encode_consumer_group(value: ConsumerGroupValue) -> bytes:
    tags = {METADATA_HASH_TAG: Writer().i64(value.metadata_hash).done()} if value.metadata_hash else {}
    return Writer().i16(0).i32(value.epoch).tagged(tags).done()


def decode_consumer_group(data: bytes) -> ConsumerGroupValue:
    r = _value_reader(data)
    epoch = r.i32()
    tags = r.tagged()
    hash_bytes = tags.get(METADATA_HASH_TAG)
    return ConsumerGroupValue(epoch, Reader(hash_bytes).i64() if hash_bytes else 0)


def encode_consumer_member(value: ConsumerMemberValue) -> bytes:
    w = Writer().i16(0).compact_string(value.instance_id).compact_string(value.rack_id)
    w.compact_string(value.client_id).compact_string(value.client_host)
    w.compact_array_len(len(value.subscribed_names))
    for name in value.subscribed_names:
        w.compact_string(name)
    w.compact_string(value.subscribed_regex).i32(value.rebalance_timeout_ms).compact_string(value.server_assignor)
    tags = {}
    if value.classic is not None:
        session, protocols = value.classic
        c = Writer().i32(session).compact_array_len(len(protocols))
        for name, metadata in protocols:
            c.compact_string(name).compact_bytes(metadata).tagged({})
        tags[0] = c.tagged({}).done()
    return w.tagged(tags).done()


def decode_consumer_member(data: bytes) -> ConsumerMemberValue:
    r = _value_reader(data)
    instance, rack, client_id, host = r.compact_string(), r.compact_string(), r.compact_string(), r.compact_string()
    names = tuple(r.compact_string() or "" for _ in range(max(0, r.compact_array_len())))
    regex, timeout, assignor = r.compact_string(), r.i32(), r.compact_string()
    classic = None
    if (raw := r.tagged().get(0)) is not None:
        c = Reader(raw)
        session = c.i32()
        protocols = []
        for _ in range(max(0, c.compact_array_len())):
            name = c.compact_string() or ""
            protocols.append((name, c.compact_bytes()))
            c.tagged()
        classic = (session, tuple(protocols))
    return ConsumerMemberValue(instance, rack, client_id or "", host or "", names, regex, timeout, assignor, classic)


def encode_target_epoch(epoch: int) -> bytes:
    return Writer().i16(0).i32(epoch).tagged({}).done()


def decode_target_epoch(data: bytes) -> int:
    return _value_reader(data).i32()


def encode_target_member(assignment: dict[str, frozenset[int]]) -> bytes:
    w = Writer().i16(0)
    _write_partitions(w, assignment)
    return w.tagged({}).done()


def decode_target_member(data: bytes) -> dict[str, frozenset[int]]:
    return _read_partitions(_value_reader(data))


def encode_current_member(value: ConsumerCurrentValue) -> bytes:
    w = Writer().i16(0).i32(value.member_epoch).i32(value.previous_member_epoch).i8(value.state)
    _write_partitions(w, value.assigned, value.assignment_epochs)
    _write_partitions(w, value.pending_revocation, value.assignment_epochs)
    return w.tagged({}).done()


def decode_current_member(data: bytes) -> ConsumerCurrentValue:
    r = _value_reader(data)
    epoch, previous, state = r.i32(), r.i32(), r.i8()
    epochs: dict[tuple[str, int], int] = {}
    assigned = _read_partitions(r, epochs)
    pending = _read_partitions(r, epochs)
    return ConsumerCurrentValue(epoch, previous, state, assigned, pending, epochs)
