"""Sparse per-segment indexes: offset → file position, and timestamp → offset.

Entries live in memory (array) and are appended to a file next to the segment. The files are
made durable together with the segment at checkpoint time; anything after the recovery point is
rebuilt from the log itself on start, so a torn index never matters.
"""

from __future__ import annotations

import bisect
import os
import struct
from array import array
from pathlib import Path

from ..private_files import FILE_MODE

OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, position
TIME_ENTRY = struct.Struct(">qi")  # timestamp, relative offset


class _IndexFile:
    """Append-only entry file shared by both indexes: buffered appends, atomic rewrites.

    No file descriptor is kept between flushes: a broker holds one segment per partition at least,
    and two index descriptors beside each log's would triple what it needs (10,000 partitions would
    take 30,000, over a common limit of 20,000; Kafka mmaps its indexes and closes them too). A
    flush opens, appends, fsyncs when asked, and closes, in the flushing thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._pending = bytearray()
        self._unsynced = False  # written by a flush without fsync

    def read(self, entry: struct.Struct) -> list[tuple[int, int]] | None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        if len(data) % entry.size:
            return None
        return list(entry.iter_unpack(data))

    def add(self, packed: bytes) -> None:
        # extend() and, in flush(), bytes() and a slice deletion are each one C call under the GIL: the
        # event loop adds entries while a flush thread takes what was there, with no lock on this path
        self._pending.extend(packed)

    def rewrite(self, data: bytes) -> None:
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, self.path)
        self._pending.clear()
        self._unsynced = True

    def delete(self) -> None:
        self._pending.clear()
        self._unsynced = False
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass

    def flush(self, fsync: bool) -> None:
        if not self._pending and not (fsync and self._unsynced):
            return
        pending = bytes(self._pending)
        del self._pending[: len(pending)]  # entries added meanwhile stay for the next flush
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
        try:
            if pending:
                os.write(fd, pending)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        self._unsynced = not fsync

    def close(self) -> None:
        self.flush(fsync=False)


class OffsetIndex:
    def __init__(self, path: Path, base_offset: int) -> None:
        self.file = _IndexFile(path)
        self.base_offset = base_offset
        self._relative = array("q")
        self._positions = array("q")

    def load(self, segment_size: int) -> bool:
        """Loads the index file; returns False if it is missing or inconsistent."""
        entries = self.file.read(OFFSET_ENTRY)
        if entries is None:
            return False
        last_rel, last_pos = -1, -1
        for rel, pos in entries:
            if rel <= last_rel or pos <= last_pos or pos >= segment_size:
                self.reset()
                return False
            self._relative.append(rel)
            self._positions.append(pos)
            last_rel, last_pos = rel, pos
        return True

    def reset(self) -> None:
        self._relative = array("q")
        self._positions = array("q")
        self.file.delete()

    def append(self, offset: int, position: int) -> None:
        rel = offset - self.base_offset
        if self._relative and rel <= self._relative[-1]:
            return
        self._relative.append(rel)
        self._positions.append(position)
        self.file.add(OFFSET_ENTRY.pack(rel, position))

    def lookup(self, offset: int) -> tuple[int, int]:
        """Largest indexed (offset, position) at or before offset; (base, 0) if none."""
        i = bisect.bisect_right(self._relative, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._relative[i], self._positions[i]

    def truncate_to_position(self, position: int) -> None:
        """Drops entries at or past a file position (the log was truncated there)."""
        i = bisect.bisect_left(self._positions, position)
        if i == len(self._positions):
            return
        del self._relative[i:]
        del self._positions[i:]
        self.file.rewrite(b"".join(map(OFFSET_ENTRY.pack, self._relative, self._positions)))

    def flush(self, fsync: bool) -> None:
        self.file.flush(fsync)

    def close(self) -> None:
        self.file.close()


class TimeIndex:
    """Monotonic (max timestamp so far → first offset reaching it) entries."""

    def __init__(self, path: Path, base_offset: int) -> None:
        self.file = _IndexFile(path)
        self.base_offset = base_offset
        self._timestamps = array("q")
        self._relative = array("q")

    def load(self) -> bool:
        entries = self.file.read(TIME_ENTRY)
        if entries is None:
            return False
        for ts, rel in entries:
            if self._timestamps and (ts <= self._timestamps[-1] or rel < self._relative[-1]):
                self.reset()
                return False
            self._timestamps.append(ts)
            self._relative.append(rel)
        return True

    def reset(self) -> None:
        self._timestamps = array("q")
        self._relative = array("q")
        self.file.delete()

    @property
    def last_timestamp(self) -> int:
        return self._timestamps[-1] if self._timestamps else -1

    def maybe_append(self, max_timestamp: int, offset: int) -> None:
        if self._timestamps and max_timestamp <= self._timestamps[-1]:
            return
        rel = offset - self.base_offset
        self._timestamps.append(max_timestamp)
        self._relative.append(rel)
        self.file.add(TIME_ENTRY.pack(max_timestamp, rel))

    def lookup(self, timestamp: int) -> int | None:
        """First offset of a batch whose max timestamp reaches timestamp, or None."""
        i = bisect.bisect_left(self._timestamps, timestamp)
        if i == len(self._timestamps):
            return None
        return self.base_offset + self._relative[i]

    def truncate_to_offset(self, offset: int) -> None:
        i = bisect.bisect_left(self._relative, offset - self.base_offset)
        if i == len(self._relative):
            return
        del self._timestamps[i:]
        del self._relative[i:]
        self.file.rewrite(b"".join(map(TIME_ENTRY.pack, self._timestamps, self._relative)))

    def flush(self, fsync: bool) -> None:
        self.file.flush(fsync)

    def close(self) -> None:
        self.file.close()
