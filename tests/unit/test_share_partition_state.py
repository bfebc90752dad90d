"""Share-partition delivery state (KIP-932), pure: acquisition, locks, acknowledgements, the delivery
limit, the start offset, snapshots; and the share-group state records."""

from __future__ import annotations

import uuid

import pytest
from dm_broker.share.group import ShareMember, assignment_for
from dm_broker.share.partition_state import (
    AckType,
    Acquired,
    InvalidRecordState,
    RecordState,
    SharePartitionState,
    StateBatch,
)
from dm_broker.share.state_store import Snapshot, decode_key, decode_value, encode_key, encode_value

LOCK = 30.0


def fresh(start: int = 0, limit: int = 3, max_in_flight: int = 100) -> SharePartitionState:
    return SharePartitionState(start, limit, max_in_flight)


def test_each_record_goes_to_one_member_at_a_time():
    s = fresh()
    assert s.acquire("a", 3, high_watermark=10, now=0, lock_s=LOCK) == [Acquired(0, 2, 1)]
    assert s.acquire("b", 10, high_watermark=10, now=0, lock_s=LOCK) == [Acquired(3, 9, 1)]
    assert s.acquire("c", 10, high_watermark=10, now=0, lock_s=LOCK) == []
    assert not s.available(10, now=1)


def test_accept_advances_the_start_and_release_redelivers_to_another():
    s = fresh()
    s.acquire("a", 4, 4, 0, LOCK)
    s.acknowledge("a", 0, 1, [AckType.ACCEPT])
    assert s.start == 2
    s.acknowledge("a", 2, 3, [AckType.RELEASE, AckType.ACCEPT])
    assert s.start == 2 and s.records[3].state == RecordState.ACKNOWLEDGED
    assert s.acquire("b", 10, 4, 0, LOCK) == [Acquired(2, 2, 2)]  # second delivery, to b
    s.acknowledge("b", 2, 2, [AckType.ACCEPT])
    assert s.start == 4 and not s.records


def test_reject_and_gap_are_never_redelivered():
    s = fresh()
    s.acquire("a", 3, 3, 0, LOCK)
    s.acknowledge("a", 0, 2, [AckType.REJECT, AckType.GAP, AckType.ACCEPT])
    assert s.start == 3
    assert s.acquire("a", 10, 3, 0, LOCK) == []


def test_only_the_holder_may_acknowledge_and_a_bad_batch_changes_nothing():
    s = fresh()
    s.acquire("a", 2, 2, 0, LOCK)
    with pytest.raises(InvalidRecordState):
        s.acknowledge("b", 0, 0, [AckType.ACCEPT])
    with pytest.raises(InvalidRecordState):
        s.acknowledge("a", 0, 2, [AckType.ACCEPT])  # offset 2 was never acquired: the whole batch is refused
    with pytest.raises(InvalidRecordState):
        s.acknowledge("a", 0, 1, [AckType.ACCEPT, 7])
    assert all(r.state == RecordState.ACQUIRED for r in s.records.values())


def test_expired_locks_redeliver_until_the_delivery_limit_archives():
    s = fresh(limit=2)
    assert s.acquire("a", 1, 1, now=0, lock_s=1) == [Acquired(0, 0, 1)]
    assert s.acquire("b", 1, 1, now=0.5, lock_s=1) == []  # still locked
    assert s.acquire("b", 1, 1, now=1.5, lock_s=1) == [Acquired(0, 0, 2)]  # timed out: redelivered
    assert s.acquire("c", 1, 1, now=3.0, lock_s=1) == []  # second lock ran out at the limit: archived
    assert s.start == 1


def test_a_closed_session_releases_what_its_member_held():
    s = fresh()
    s.acquire("a", 2, 2, 0, LOCK)
    assert s.release_member("a") == 2
    assert s.acquire("b", 5, 2, 0, LOCK) == [Acquired(0, 1, 2)]


def test_in_flight_is_bounded_and_the_log_start_moves_the_start():
    s = fresh(max_in_flight=3)
    assert s.acquire("a", 10, 100, 0, LOCK) == [Acquired(0, 2, 1)]
    s.acknowledge("a", 0, 0, [AckType.ACCEPT])
    assert s.acquire("a", 10, 100, 0, LOCK) == [Acquired(3, 3, 1)]
    s.acquire("b", 10, 100, 0, LOCK, log_start=50)  # retention removed 0-49
    assert s.start == 50 and min(s.records) >= 50


def test_snapshot_round_trip_keeps_done_records_and_frees_locks():
    s = fresh()
    s.acquire("a", 6, 6, 0, LOCK)
    s.acknowledge("a", 0, 0, [AckType.ACCEPT])
    s.acknowledge("a", 2, 3, [AckType.ACCEPT, AckType.REJECT])
    start, batches = s.snapshot()
    assert start == 1
    assert batches == [StateBatch(1, 1, RecordState.AVAILABLE, 1), StateBatch(2, 2, RecordState.ACKNOWLEDGED, 1),
                       StateBatch(3, 3, RecordState.ARCHIVED, 1), StateBatch(4, 5, RecordState.AVAILABLE, 1)]
    restored = SharePartitionState.restored(start, batches, 3, 100)
    got = restored.acquire("b", 10, 8, 0, LOCK)
    # 1, 4, 5 come back (second delivery); 2 and 3 never; 6-7 are new
    assert got == [Acquired(1, 1, 2), Acquired(4, 5, 2), Acquired(6, 7, 1)]


def test_share_state_records_round_trip():
    key = ("g", str(uuid.uuid4()), 3)
    assert decode_key(encode_key(key)) == key
    snap = Snapshot(0, 7, 42, (StateBatch(42, 44, RecordState.ACKNOWLEDGED, 1),
                               StateBatch(45, 45, RecordState.AVAILABLE, 2)))
    assert decode_value(encode_value(snap)) == snap


def test_every_member_gets_every_subscribed_partition():
    member = ShareMember("m", subscribed_names=("a", "missing"))
    assert assignment_for(member, {"a": ("id-a", 3), "b": ("id-b", 2)}) == {"id-a": frozenset({0, 1, 2})}
