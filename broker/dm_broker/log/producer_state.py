"""Idempotent-producer state of one partition: the last batches of every producer id.

A retried batch (same producer id, epoch and sequence range as one of the last five appended)
is answered with its original offset instead of being appended again; a gap or an older epoch
is refused. The state is rebuilt on start from a snapshot plus the batch headers after it.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from .checkpoints import atomic_write
from .records import NO_PRODUCER_ID, BatchHeader

MAX_CACHED_BATCHES = 5  # Kafka's max.in.flight.requests.per.connection limit for idempotence
SNAPSHOT_NAME = "producer-state.json"


class OutOfOrderSequenceError(Exception):
    pass


class InvalidProducerEpochError(Exception):
    pass


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


def _next_seq(seq: int) -> int:
    return 0 if seq == (1 << 31) - 1 else seq + 1


class ProducerStateManager:
    def __init__(self, directory: Path) -> None:
        self.path = directory / SNAPSHOT_NAME
        self.producers: dict[int, ProducerEntry] = {}

    def check(self, header: BatchHeader) -> CachedBatch | None:
        """Returns the cached batch when `header` is a retry of it; raises when out of order."""
        if header.producer_id == NO_PRODUCER_ID:
            return None
        entry = self.producers.get(header.producer_id)
        if entry is None:
            return None  # unknown producer (new, or expired): any sequence starts it
        if header.producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {header.producer_id} epoch {header.producer_epoch} < current {entry.epoch}"
            )
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
            raise OutOfOrderSequenceError(
                f"producer {header.producer_id}: expected sequence {_next_seq(entry.batches[-1].last_seq)}, "
                f"got {header.base_sequence}"
            )
        return None

    def update(self, header: BatchHeader, first_offset: int) -> None:
        if header.producer_id == NO_PRODUCER_ID:
            return
        entry = self.producers.get(header.producer_id)
        if entry is None or header.producer_epoch != entry.epoch:
            entry = ProducerEntry(header.producer_epoch, header.max_timestamp)
            self.producers[header.producer_id] = entry
        entry.last_timestamp = max(entry.last_timestamp, header.max_timestamp)
        entry.batches.append(
            CachedBatch(
                header.base_sequence, header.last_sequence, first_offset,
                first_offset + header.last_offset_delta,
            )
        )

    def expire(self, now_ms: int, expiration_ms: int) -> None:
        stale = [pid for pid, e in self.producers.items() if now_ms - e.last_timestamp > expiration_ms]
        for pid in stale:
            del self.producers[pid]

    def clear(self) -> None:
        self.producers.clear()

    # -- persistence -----------------------------------------------------------------------

    def save(self, offset: int) -> None:
        """Snapshot of the state after every batch below `offset`."""
        doc = {
            "offset": offset,
            "producers": {
                str(pid): {
                    "epoch": e.epoch,
                    "last_timestamp": e.last_timestamp,
                    "batches": [[b.first_seq, b.last_seq, b.first_offset, b.last_offset] for b in e.batches],
                }
                for pid, e in self.producers.items()
            },
        }
        atomic_write(self.path, json.dumps(doc).encode())

    def load(self) -> int | None:
        """Loads the snapshot; returns the offset it covers, or None when there is none."""
        try:
            doc = json.loads(self.path.read_text())
            producers: dict[int, ProducerEntry] = {}
            for pid, e in doc["producers"].items():
                entry = ProducerEntry(int(e["epoch"]), int(e["last_timestamp"]))
                for b in e["batches"]:
                    entry.batches.append(CachedBatch(*map(int, b)))
                producers[int(pid)] = entry
            offset = int(doc["offset"])
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return None
        self.producers = producers
        return offset
