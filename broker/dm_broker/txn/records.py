"""Records of `__transaction_state` and transaction markers, in Kafka's formats (so Kafka's tooling
reads them): TransactionLogKey v0 (the transactional id) and TransactionLogValue v1 (flexible: the
previous and next producer ids and the client's transaction version as tagged fields); a marker is a
control record whose key is (version 0, type ABORT=0 / COMMIT=1) and whose value is (version 0,
coordinator epoch) (log/records.py). A null value is a tombstone: the transactional id expired."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from ..binary import FormatError, Reader, Writer

KEY_VERSION = 0
VALUE_VERSION = 1
NO_PRODUCER_ID = -1


class TxnState(enum.IntEnum):
    """TransactionStatus as Kafka numbers it."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name DescribeTransactions and ListTransactions use."""
        return "".join(part.capitalize() for part in self.name.split("_"))


@dataclass
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: dict[str, list[int]] = field(default_factory=dict)
    last_update_ms: int = -1
    start_ms: int = -1
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    client_version: int = 0  # 2: KIP-890's epoch bump at every transaction end


def encode_key(transactional_id: str) -> bytes:
    return Writer().i16(KEY_VERSION).string(transactional_id).done()


def decode_key(data: bytes) -> str:
    r = Reader(data)
    version = r.i16()
    if version != KEY_VERSION:
        raise FormatError(f"unknown __transaction_state key version {version}")
    return r.string() or ""


def encode_value(v: TxnLogValue) -> bytes:
    w = Writer().i16(VALUE_VERSION).i64(v.producer_id).i16(v.producer_epoch).i32(v.timeout_ms).i8(int(v.state))
    w.uvarint(len(v.partitions) + 1)
    for topic, partitions in sorted(v.partitions.items()):
        w.compact_string(topic).uvarint(len(partitions) + 1)
        for p in sorted(partitions):
            w.i32(p)
        w.tagged({})
    w.i64(v.last_update_ms).i64(v.start_ms)
    tags = {}
    if v.previous_producer_id != NO_PRODUCER_ID:
        tags[0] = Writer().i64(v.previous_producer_id).done()
    if v.next_producer_id != NO_PRODUCER_ID:
        tags[1] = Writer().i64(v.next_producer_id).done()
    if v.client_version:
        tags[2] = Writer().i16(v.client_version).done()
    return w.tagged(tags).done()


def decode_value(data: bytes) -> TxnLogValue:
    r = Reader(data)
    version = r.i16()
    if version not in (0, 1):
        raise FormatError(f"unknown __transaction_state value version {version}")
    flexible = version >= 1
    producer_id, epoch, timeout, state = r.i64(), r.i16(), r.i32(), TxnState(r.i8())
    partitions: dict[str, list[int]] = {}
    count = (r.uvarint() - 1) if flexible else r.i32()
    for _ in range(max(count, 0)):
        topic = (r.compact_string() if flexible else r.string()) or ""
        n = (r.uvarint() - 1) if flexible else r.i32()
        partitions[topic] = [r.i32() for _ in range(max(n, 0))]
        if flexible:
            r.tagged()
    value = TxnLogValue(producer_id, epoch, timeout, state, partitions, r.i64(), r.i64())
    if flexible:
        tags = r.tagged()
        if 0 in tags:
            value.previous_producer_id = Reader(tags[0]).i64()
        if 1 in tags:
            value.next_producer_id = Reader(tags[1]).i64()
        if 2 in tags:
            value.client_version = Reader(tags[2]).i16()
    return value
