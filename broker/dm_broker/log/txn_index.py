"""The aborted-transaction index of one segment (`<base>.txnindex`, Kafka's format): one entry per
transaction whose ABORT marker lies in the segment — version (int16, 0), producer id, first offset,
last offset (the marker's) and the last stable offset when it was aborted — so a read_committed
fetch can tell its client which records to drop without reading them. Entries are appended in marker
order; the file is small and kept in memory too."""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

ENTRY = struct.Struct(">hqqqq")  # 34 bytes
VERSION = 0


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[AbortedTxn] = []
        self._dirty = False
        if path.exists():
            data = path.read_bytes()
            usable = len(data) - len(data) % ENTRY.size  # a torn last entry (crash) is dropped
            for pos in range(0, usable, ENTRY.size):
                version, pid, first, last, lso = ENTRY.unpack_from(data, pos)
                if version != VERSION:
                    break
                self.entries.append(AbortedTxn(pid, first, last, lso))

    def append(self, txn: AbortedTxn) -> None:
        if self.entries and txn.last_offset <= self.entries[-1].last_offset:
            return  # already indexed (a rescan of this segment after a restart)
        self.entries.append(txn)
        with self.path.open("ab") as f:
            f.write(ENTRY.pack(VERSION, txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset))
        self._dirty = True

    def truncate_from(self, offset: int) -> None:
        """Drops the entries of markers at or after `offset` (the log was truncated there)."""
        kept = [e for e in self.entries if e.last_offset < offset]
        if len(kept) == len(self.entries):
            return
        self.entries = kept
        if kept:
            with self.path.open("r+b") as f:
                f.truncate(len(kept) * ENTRY.size)
        else:
            self.path.unlink(missing_ok=True)
        self._dirty = True

    def overlapping(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions with records in [start, end)."""
        return [e for e in self.entries if e.last_offset >= start and e.first_offset < end]

    def flush(self, fsync: bool) -> None:
        if fsync and self._dirty and self.path.exists():
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            self._dirty = False

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
        self.entries = []
