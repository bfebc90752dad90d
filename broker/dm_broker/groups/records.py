"""Records of `__consumer_offsets`, in Kafka's formats so Kafka tooling can read them.

Keys: OffsetCommitKey (version 1: group, topic, partition) and GroupMetadataKey (version 2:
group). Values: OffsetCommitValue v3 (offset, leader epoch, metadata, commit timestamp) and
GroupMetadataValue v3 (protocol type, generation, protocol, leader, members). A null value is a
tombstone: the offset or group was deleted, and compaction eventually drops it.
"""

from __future__ import annotations

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


def decode_key(data: bytes) -> OffsetKey | GroupKey:
    r = Reader(data)
    version = r.i16()
    if version in (0, 1):
        group, topic = r.string(), r.string()
        return OffsetKey(group or "", topic or "", r.i32())
    if version == 2:
        return GroupKey(r.string() or "")
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
