"""Producer state of one partition: for every producer id its epoch, its last batches (idempotence)
and its ongoing transaction (transactions).

A retried batch (same producer id, epoch and sequence range as one of the last five appended) is
answered with its original offset instead of being appended again; a gap or an older epoch is refused.
A transactional batch from a producer with no ongoing transaction starts one at its offset; a marker
(control batch) ends it — and takes its epoch, which fences any later write of an older epoch (KIP-890's
epoch bump at each transaction end). The ongoing transactions give the last stable offset; an aborted
one goes to the transaction index of the segment holding its marker.

The state is checkpointed in snapshots (`producer-state-<offset>.json`, the state after every batch
below that offset) at each segment roll and log-manager checkpoint, so opening or truncating a log
rescans only the batches after the latest usable snapshot, not the whole log.
"""

from __future__ import annotations

import json
import logging
import re
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from .checkpoints import replace_durably
from .records import NO_PRODUCER_ID, NO_SEQUENCE, BatchHeader

MAX_CACHED_BATCHES = 5  # Kafka's max.in.flight.requests.per.connection limit for idempotence
LEGACY_SNAPSHOT = "producer-state.json"
SNAPSHOT = re.compile(r"producer-state-(\d+)\.json")
SNAPSHOTS_KEPT = 3

log = logging.getLogger(__name__)


class OutOfOrderSequenceError(Exception):
    pass


class InvalidProducerEpochError(Exception):
    pass


class InvalidTxnStateError(Exception):
    """A non-transactional write from a producer in a transaction (INVALID_TXN_STATE)."""


class CoordinatorFencedError(Exception):
    """A marker from a transaction coordinator older than one already seen (TRANSACTION_COORDINATOR_FENCED)."""


@dataclass(slots=True)
class CachedBatch:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    last_timestamp: int
    batches: deque[CachedBatch] = field(default_factory=lambda: deque(maxlen=MAX_CACHED_BATCHES))
    txn_first_offset: int | None = None  # the first offset of its ongoing transaction
    coordinator_epoch: int = -1


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    aborted: bool


def _next_seq(seq: int) -> int:
    return 0 if seq == (1 << 31) - 1 else seq + 1


class ProducerStateManager:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.producers: dict[int, ProducerEntry] = {}
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of its ongoing transaction
        # The offset of the snapshot on disk that matches this state (None: none does). An idle log's
        # periodic checkpoint then writes nothing: at 10,000 partitions rewriting every snapshot (with an
        # fsync each) was 80 % of an idle broker's CPU and a stall of its event loop.
        self.saved_at: int | None = None
        self.generation = 0  # raised when snapshots are dropped: a snapshot written meanwhile is void

    # -- validation ------------------------------------------------------------------------------

    def check(self, header: BatchHeader) -> CachedBatch | None:
        """Returns the cached batch when `header` is a retry of it; raises when it may not be appended."""
        if header.producer_id == NO_PRODUCER_ID:
            return None
        entry = self.producers.get(header.producer_id)
        if entry is None:
            return None  # unknown producer (new, or expired): any sequence starts it
        if header.producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {header.producer_id} epoch {header.producer_epoch} < current {entry.epoch}"
            )
        if entry.txn_first_offset is not None and not header.is_transactional:
            raise InvalidTxnStateError(f"producer {header.producer_id} wrote a non-transactional batch during its "
                                       f"transaction (started at offset {entry.txn_first_offset})")
        if header.base_sequence == NO_SEQUENCE:
            return None  # written by the broker itself (transactional offset commits): no sequence
        if header.producer_epoch > entry.epoch:
            if header.base_sequence != 0:
                raise OutOfOrderSequenceError(
                    f"new epoch {header.producer_epoch} of producer {header.producer_id} must start at "
                    f"sequence 0, got {header.base_sequence}"
                )
            return None
        for cached in entry.batches:
            if cached.first_seq == header.base_sequence and cached.last_seq == header.last_sequence:
                return cached
        if entry.batches and header.base_sequence != _next_seq(entry.batches[-1].last_seq):
            # Rare and fatal to an idempotent producer: what this replica holds goes to the log
            log.warning("%s: producer %d epoch %d sent sequences %d-%d; this log's last batches are %s",
                        self.directory.name, header.producer_id, header.producer_epoch, header.base_sequence,
                        header.last_sequence, [(b.first_seq, b.last_seq, b.first_offset) for b in entry.batches])
            raise OutOfOrderSequenceError(
                f"producer {header.producer_id}: expected sequence {_next_seq(entry.batches[-1].last_seq)}, "
                f"got {header.base_sequence}"
            )
        return None

    def ahead_of(self, header: BatchHeader) -> bool:
        """Whether the batch comes after a gap in its producer's sequence (same epoch, a later sequence than the
        next one expected): what an earlier batch still on its way, sent to another broker, would fill."""
        if header.producer_id == NO_PRODUCER_ID or header.base_sequence == NO_SEQUENCE:
            return False
        entry = self.producers.get(header.producer_id)
        if entry is None or not entry.batches or header.producer_epoch != entry.epoch:
            return False
        expected = _next_seq(entry.batches[-1].last_seq)
        # how far ahead, in the sequence's circle: less than half of it is ahead, the rest is behind (a retry)
        return 0 < (header.base_sequence - expected) % (1 << 31) < (1 << 30)

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """A transaction marker may be written: its epoch is not older than the producer's, its
        coordinator not older than the last one that wrote a marker for it."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(f"marker of producer {producer_id} at epoch {producer_epoch} < current "
                                            f"{entry.epoch}")
        if coordinator_epoch < entry.coordinator_epoch:
            raise CoordinatorFencedError(f"marker of producer {producer_id} from coordinator epoch {coordinator_epoch} "
                                         f"< {entry.coordinator_epoch}")

    def in_transaction(self, producer_id: int, producer_epoch: int) -> bool:
        """The producer has an ongoing transaction in this partition at this epoch."""
        entry = self.producers.get(producer_id)
        return entry is not None and entry.txn_first_offset is not None and entry.epoch == producer_epoch

    # -- updates ------------------------------------------------------------------------------------

    def update(self, header: BatchHeader, first_offset: int,
               marker: tuple[bool, int] | None = None) -> CompletedTxn | None:
        """Records an appended batch (`marker`: (committed, coordinator epoch) of a control batch).
        Returns the transaction a marker completed."""
        if header.producer_id == NO_PRODUCER_ID:
            return None
        pid = header.producer_id
        entry = self.producers.get(pid)
        if header.is_control:
            if entry is None:
                entry = self.producers[pid] = ProducerEntry(header.producer_epoch, header.max_timestamp)
            completed = None
            if entry.txn_first_offset is not None:
                committed = marker[0] if marker is not None else True
                completed = CompletedTxn(pid, entry.txn_first_offset, first_offset, aborted=not committed)
                entry.txn_first_offset = None
                self.ongoing.pop(pid, None)
            if header.producer_epoch != entry.epoch:
                entry.epoch = header.producer_epoch
                entry.batches.clear()
            if marker is not None:
                entry.coordinator_epoch = max(entry.coordinator_epoch, marker[1])
            entry.last_timestamp = max(entry.last_timestamp, header.max_timestamp)
            return completed
        if entry is None or header.producer_epoch != entry.epoch:
            carried = entry.txn_first_offset if entry is not None else None
            entry = ProducerEntry(header.producer_epoch, header.max_timestamp, txn_first_offset=carried,
                                  coordinator_epoch=entry.coordinator_epoch if entry is not None else -1)
            self.producers[pid] = entry
        entry.last_timestamp = max(entry.last_timestamp, header.max_timestamp)
        if header.base_sequence != NO_SEQUENCE:
            entry.batches.append(CachedBatch(header.base_sequence, header.last_sequence, first_offset,
                                             first_offset + header.last_offset_delta))
        if header.is_transactional and entry.txn_first_offset is None:
            entry.txn_first_offset = first_offset
            self.ongoing[pid] = first_offset
        return None

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest ongoing transaction (None when none is open)."""
        return min(self.ongoing.values()) if self.ongoing else None

    def expire(self, now_ms: int, expiration_ms: int) -> None:
        stale = [pid for pid, e in self.producers.items()
                 if now_ms - e.last_timestamp > expiration_ms and e.txn_first_offset is None]
        for pid in stale:
            del self.producers[pid]
        if stale:
            self.saved_at = None

    def clear(self) -> None:
        self.producers.clear()
        self.ongoing.clear()
        self.saved_at = None

    # -- persistence -----------------------------------------------------------------------

    def snapshots(self) -> list[tuple[int, Path]]:
        found = []
        for path in self.directory.glob("producer-state-*.json"):
            m = SNAPSHOT.fullmatch(path.name)
            if m:
                found.append((int(m.group(1)), path))
        return sorted(found)

    def save(self, offset: int) -> None:
        """Snapshot of the state after every batch below `offset`; the oldest beyond a few go."""
        data = self.snapshot(offset)
        if data is not None:
            self.write_snapshot(offset, data, self.generation)

    def snapshot(self, offset: int) -> bytes | None:
        """The snapshot of the state at `offset` to write, or None when the one on disk is this state.
        (The state changes only with batches, so with the offset, or when producers expire.)"""
        if offset == self.saved_at:
            return None
        if offset == 0 and not self.producers:  # an empty log: recovery has nothing to rebuild
            self.saved_at = 0
            return None
        self.saved_at = offset
        doc = {
            "offset": offset,
            "producers": {
                str(pid): {
                    "epoch": e.epoch,
                    "last_timestamp": e.last_timestamp,
                    "batches": [[b.first_seq, b.last_seq, b.first_offset, b.last_offset] for b in e.batches],
                    "txn_first_offset": e.txn_first_offset,
                    "coordinator_epoch": e.coordinator_epoch,
                }
                for pid, e in self.producers.items()
            },
        }
        return json.dumps(doc).encode()

    def write_snapshot(self, offset: int, data: bytes, generation: int) -> None:
        """Writes a snapshot taken in `generation` (possibly in a worker thread); a truncation that
        dropped snapshots since voids it, before or after it is written."""
        path = self.directory / f"producer-state-{offset}.json"
        if generation == self.generation:
            try:
                # not atomic_write, which creates the directory: a log deleted since the snapshot was taken
                # (its directory renamed away) would come back holding only this file
                replace_durably(path, data)
            except FileNotFoundError:  # the log was deleted or moved meanwhile
                return
            if generation == self.generation:
                for _, old in self.snapshots()[:-SNAPSHOTS_KEPT]:
                    old.unlink(missing_ok=True)
                (self.directory / LEGACY_SNAPSHOT).unlink(missing_ok=True)
                return
            path.unlink(missing_ok=True)
        if self.saved_at == offset:
            self.saved_at = None  # not on disk after all: the next checkpoint writes it

    def drop_snapshots_after(self, offset: int) -> None:
        """Snapshots past a truncation point describe batches that are gone."""
        self.generation += 1
        if self.saved_at is not None and self.saved_at > offset:
            self.saved_at = None
        for at, path in self.snapshots():
            if at > offset:
                path.unlink(missing_ok=True)

    def load(self, upto: int | None = None) -> int | None:
        """Loads the latest snapshot at or below `upto` (any, if None); returns the offset it covers,
        or None when there is none (the state is then empty)."""
        candidates = [(o, p) for o, p in self.snapshots() if upto is None or o <= upto]
        legacy = self.directory / LEGACY_SNAPSHOT
        paths = [p for _, p in reversed(candidates)] + ([legacy] if legacy.exists() else [])
        for path in paths:
            loaded = self._read(path)
            if loaded is not None and (upto is None or loaded <= upto):
                self.saved_at = loaded if path != legacy else None
                return loaded
        self.clear()
        return None

    def _read(self, path: Path) -> int | None:
        try:
            doc = json.loads(path.read_text())
            producers: dict[int, ProducerEntry] = {}
            for pid, e in doc["producers"].items():
                entry = ProducerEntry(int(e["epoch"]), int(e["last_timestamp"]),
                                      txn_first_offset=e.get("txn_first_offset"),
                                      coordinator_epoch=int(e.get("coordinator_epoch", -1)))
                for b in e["batches"]:
                    entry.batches.append(CachedBatch(*map(int, b)))
                producers[int(pid)] = entry
            offset = int(doc["offset"])
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return None
        self.producers = producers
        self.ongoing = {pid: e.txn_first_offset for pid, e in producers.items() if e.txn_first_offset is not None}
        return offset
