"""The delivery state of one share-partition (KIP-932): which records of a partition a share group has
handed out, to whom, how often, and which are done. Pure; the partition leader does the I/O.

Offsets below the share-partition start offset (SPSO) are done (acknowledged or archived). Offsets in
[start, end) are tracked one by one; offsets from `end` on have never been delivered. A record is
AVAILABLE, ACQUIRED by one member until its lock expires, ACKNOWLEDGED (accepted) or ARCHIVED
(rejected, a gap, or delivered `delivery_limit` times). The start advances over a done prefix.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass


class RecordState(enum.IntEnum):
    """Kafka's values, as the share-group state records store them."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AckType(enum.IntEnum):
    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4  # ShareFetch and ShareAcknowledge v2 (Kafka 4.2, KIP-1222): keep the records, lock them longer


DONE = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


@dataclass
class InFlight:
    state: RecordState
    delivery_count: int = 0
    member: str | None = None
    deadline: float = 0.0


@dataclass(frozen=True)
class Acquired:
    first: int
    last: int
    delivery_count: int


@dataclass(frozen=True)
class StateBatch:
    """A persisted run of offsets with one state and delivery count (Kafka's PersisterStateBatch)."""

    first: int
    last: int
    state: RecordState
    delivery_count: int


class InvalidRecordState(Exception):
    """An acknowledgement of records the member does not hold (Kafka's INVALID_RECORD_STATE)."""


class SharePartitionState:
    def __init__(self, start_offset: int, delivery_limit: int, max_in_flight: int) -> None:
        self.start = start_offset
        self.end = start_offset
        self.records: dict[int, InFlight] = {}
        self.delivery_limit = delivery_limit
        self.max_in_flight = max_in_flight

    # -- handing records out -------------------------------------------------------------------

    def acquire(self, member: str, max_records: int, high_watermark: int, now: float, lock_s: float,
                log_start: int = 0) -> list[Acquired]:
        """Acquires up to `max_records` records for `member`: released or timed-out ones first (lowest
        offset first), then records never delivered, up to the high watermark."""
        self.expire(now)
        self.skip_to(log_start)
        taken: list[tuple[int, int]] = []
        for offset in range(self.start, self.end):
            if len(taken) >= max_records:
                break
            record = self.records.get(offset)
            if record is None or record.state != RecordState.AVAILABLE:
                continue
            if record.delivery_count >= self.delivery_limit:
                record.state = RecordState.ARCHIVED  # delivered as often as allowed
                continue
            self._hand_out(record, member, now + lock_s)
            taken.append((offset, record.delivery_count))
        while len(taken) < max_records and self.end < high_watermark and self.end - self.start < self.max_in_flight:
            record = InFlight(RecordState.AVAILABLE)
            self.records[self.end] = record
            self._hand_out(record, member, now + lock_s)
            taken.append((self.end, record.delivery_count))
            self.end += 1
        self._advance()
        return list(_ranges(taken))

    @staticmethod
    def _hand_out(record: InFlight, member: str, deadline: float) -> None:
        record.state = RecordState.ACQUIRED
        record.delivery_count += 1
        record.member = member
        record.deadline = deadline

    def available(self, high_watermark: int, now: float) -> bool:
        """Whether an acquire now would hand something out (for long-polling fetches)."""
        if self.end < high_watermark and self.end - self.start < self.max_in_flight:
            return True
        return any(r.state == RecordState.AVAILABLE or (r.state == RecordState.ACQUIRED and r.deadline <= now)
                   for r in self.records.values())

    # -- acknowledgements ------------------------------------------------------------------------

    def acknowledge(self, member: str, first: int, last: int, types: list[int],
                    renewed_until: float | None = None) -> None:
        """One acknowledgement batch: `types` has one type for the whole range or one per offset.
        All or nothing: raises InvalidRecordState unless the member holds every offset of it. RENEW keeps a
        record the member's with its lock running to `renewed_until` (None: RENEW is not allowed)."""
        if last < first or (len(types) != 1 and len(types) != last - first + 1):
            raise InvalidRecordState(f"acknowledgement batch {first}-{last} with {len(types)} types")
        try:
            kinds = [AckType(t) for t in types]
        except ValueError:
            raise InvalidRecordState(f"unknown acknowledge type in {types}") from None
        if renewed_until is None and AckType.RENEW in kinds:
            raise InvalidRecordState("acknowledge type RENEW needs ShareFetch or ShareAcknowledge v2")
        for offset in range(first, last + 1):
            record = self.records.get(offset)
            if record is None or record.state != RecordState.ACQUIRED or record.member != member:
                raise InvalidRecordState(f"offset {offset} is not acquired by member {member}")
        for i, offset in enumerate(range(first, last + 1)):
            kind = kinds[0] if len(kinds) == 1 else kinds[i]
            record = self.records[offset]
            if kind == AckType.RENEW:
                assert renewed_until is not None
                record.deadline = renewed_until
                continue
            record.member = None
            if kind == AckType.ACCEPT:
                record.state = RecordState.ACKNOWLEDGED
            elif kind == AckType.RELEASE:
                record.state = (RecordState.ARCHIVED if record.delivery_count >= self.delivery_limit
                                else RecordState.AVAILABLE)
            else:  # REJECT, or GAP (no record at that offset)
                record.state = RecordState.ARCHIVED
        self._advance()

    def expire(self, now: float) -> bool:
        """Locks that ran out: the record is available again, or archived at the delivery limit."""
        changed = False
        for record in self.records.values():
            if record.state == RecordState.ACQUIRED and record.deadline <= now:
                self._release(record)
                changed = True
        if changed:
            self._advance()
        return changed

    def release_member(self, member: str) -> int:
        """The member's session ended: what it holds becomes available (its delivery still counts)."""
        released = 0
        for record in self.records.values():
            if record.state == RecordState.ACQUIRED and record.member == member:
                self._release(record)
                released += 1
        self._advance()
        return released

    def _release(self, record: InFlight) -> None:
        record.member = None
        record.state = RecordState.ARCHIVED if record.delivery_count >= self.delivery_limit \
            else RecordState.AVAILABLE

    def skip_to(self, offset: int) -> None:
        """Records below `offset` are gone from the log (retention, DeleteRecords): nothing to deliver."""
        if offset <= self.start:
            return
        for o in range(self.start, min(offset, self.end)):
            self.records.pop(o, None)
        self.start = offset
        self.end = max(self.end, offset)

    def _advance(self) -> None:
        while self.start < self.end:
            record = self.records.get(self.start)
            if record is None or record.state not in DONE:
                return
            del self.records[self.start]
            self.start += 1

    # -- persistence ---------------------------------------------------------------------------

    def snapshot(self) -> tuple[int, list[StateBatch]]:
        """The start offset and the tracked records as runs; an acquired record is stored as available
        (a new leader cannot know the lock), keeping its delivery count."""
        rows = []
        for offset in range(self.start, self.end):
            record = self.records.get(offset)
            if record is None:
                continue
            state = RecordState.AVAILABLE if record.state == RecordState.ACQUIRED else record.state
            rows.append((offset, state, record.delivery_count))
        batches: list[StateBatch] = []
        for offset, state, count in rows:
            last = batches[-1] if batches else None
            if last is not None and last.last + 1 == offset and last.state == state and last.delivery_count == count:
                batches[-1] = StateBatch(last.first, offset, state, count)
            else:
                batches.append(StateBatch(offset, offset, state, count))
        return self.start, batches

    @classmethod
    def restored(cls, start: int, batches: list[StateBatch], delivery_limit: int,
                 max_in_flight: int) -> SharePartitionState:
        state = cls(start, delivery_limit, max_in_flight)
        for batch in batches:
            for offset in range(max(batch.first, start), batch.last + 1):
                kind = RecordState.AVAILABLE if batch.state == RecordState.ACQUIRED else batch.state
                state.records[offset] = InFlight(kind, batch.delivery_count)
                state.end = max(state.end, offset + 1)
        state._advance()
        return state

    @property
    def in_flight(self) -> int:
        return sum(1 for r in self.records.values() if r.state == RecordState.ACQUIRED)


def _ranges(taken: list[tuple[int, int]]) -> Iterator[Acquired]:
    """Consecutive offsets with the same delivery count as one range (the ShareFetch answer's form)."""
    run: list[int] | None = None
    for offset, count in taken:
        if run is not None and offset == run[1] + 1 and count == run[2]:
            run[1] = offset
            continue
        if run is not None:
            yield Acquired(run[0], run[1], run[2])
        run = [offset, offset, count]
    if run is not None:
        yield Acquired(run[0], run[1], run[2])
