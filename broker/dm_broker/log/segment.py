"""One log segment: `<base offset>.log` with its `.index`, `.timeindex` and `.txnindex`."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import crc32c

from ..private_files import FILE_MODE
from .index import OffsetIndex, TimeIndex
from .records import CRC_START, HEADER_SIZE, LOG_OVERHEAD, MAGIC_V2, BatchHeader, parse_header
from .txn_index import TransactionIndex

SCAN_CHUNK = 8 << 20


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


@dataclass(slots=True)
class FileSlice:
    """A byte range of a segment file, read with pread or sent with sendfile."""

    fd: int
    position: int
    size: int

    def read(self) -> bytes:
        return os.pread(self.fd, self.size, self.position)

    def __len__(self) -> int:
        return self.size

    def record_count(self) -> int:
        """Records in the complete batches of this slice (a cut-off last batch is not counted)."""
        count = 0
        position, end = self.position, self.position + self.size
        while position + HEADER_SIZE <= end:
            header = parse_header(os.pread(self.fd, HEADER_SIZE, position))
            if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or position + header.size > end:
                break
            count += header.records_count
            position += header.size
        return count


class Segment:
    def __init__(self, directory: Path, base_offset: int, index_interval_bytes: int) -> None:
        self.base_offset = base_offset
        name = segment_name(base_offset)
        self.path = directory / f"{name}.log"
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, FILE_MODE)
        self.size = os.fstat(self.fd).st_size
        self.index = OffsetIndex(directory / f"{name}.index", base_offset)
        self.time_index = TimeIndex(directory / f"{name}.timeindex", base_offset)
        self.txn_index = TransactionIndex(directory / f"{name}.txnindex")
        self.index_interval_bytes = index_interval_bytes
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.first_batch_timestamp: int | None = None
        self._bytes_since_index = 0

    # -- writing ---------------------------------------------------------------------------

    def append(self, chunks: list[bytes | bytearray | memoryview], total: int,
               batches: list[tuple[int, BatchHeader]]) -> None:
        """Writes already-stamped batches, given as consecutive chunks of `total` bytes (two per
        batch at most); `batches` holds (position relative to the first chunk, header)."""
        start = self.size
        try:
            written = os.pwritev(self.fd, chunks, start)
            if written < total:  # a short write: the rest piece by piece
                rest = memoryview(b"".join(chunks))[written:]
                while rest:
                    n = os.pwrite(self.fd, rest, start + written)
                    written += n
                    rest = rest[n:]
        except OSError:
            # A full disk may have taken part of the batches: the file ends where the log does again, so
            # no batch that was refused can be found by a recovery scan (shrinking needs no space).
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, start)
            raise
        for pos, header in batches:
            self._track(header, start + pos)
        self.size += total

    def _track(self, header: BatchHeader, position: int) -> None:
        if self._bytes_since_index >= self.index_interval_bytes or position == 0:
            self.index.append(header.base_offset, position)
            self._bytes_since_index = 0
        self._bytes_since_index += header.size
        self.time_index.maybe_append(header.max_timestamp, header.base_offset)
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = header.max_timestamp
        self.max_timestamp = max(self.max_timestamp, header.max_timestamp)
        self.next_offset = header.next_offset

    def flush(self, fsync: bool) -> None:
        self.index.flush(fsync)
        self.time_index.flush(fsync)
        self.txn_index.flush(fsync)
        if fsync:
            os.fsync(self.fd)

    # -- reading ---------------------------------------------------------------------------

    def headers_from(self, position: int, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """Yields (position, header) of the batches from a batch boundary, reading only headers."""
        end = self.size if end is None else end
        while position + HEADER_SIZE <= end:
            header = parse_header(os.pread(self.fd, HEADER_SIZE, position))
            if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
                return
            yield position, header
            position += header.size

    def find(self, offset: int) -> tuple[int, BatchHeader] | None:
        """Position and header of the batch holding offset (or the first one after it)."""
        _, start = self.index.lookup(offset)
        for position, header in self.headers_from(start):
            if header.last_offset >= offset:
                return position, header
        return None

    def position_of(self, offset: int) -> int:
        """File position where the batch holding `offset` starts (size if past the end)."""
        found = self.find(offset)
        return self.size if found is None else found[0]

    def read_batch(self, position: int, header: BatchHeader) -> bytes:
        return os.pread(self.fd, header.size, position)

    # -- recovery and truncation -------------------------------------------------------------

    def load_indexes(self) -> bool:
        """Loads indexes and the segment's offsets; False if they must be rebuilt by recover()."""
        if not (self.index.load(self.size) and self.time_index.load()):
            return False
        # The last batch tells the next offset: start from the last index entry.
        last: BatchHeader | None = None
        _, start = self.index.lookup(1 << 62)
        for _, header in self.headers_from(start):
            last = header
        if self.size and last is None:
            return False
        if last is not None:
            self.next_offset = last.next_offset
            self.max_timestamp = max(self.time_index.last_timestamp, last.max_timestamp)
            first = next(self.headers_from(0))[1]
            self.first_batch_timestamp = first.max_timestamp
        self._bytes_since_index = self.index_interval_bytes  # index the next append
        return True

    def recover(self, max_batch_bytes: int) -> int:
        """Validates every batch (length, magic, CRC), rebuilds the indexes and truncates any
        invalid tail. Returns the number of bytes truncated."""
        self.index.reset()
        self.time_index.reset()
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.first_batch_timestamp = None
        self._bytes_since_index = 0
        valid_end = 0
        expected_offset: int | None = None
        buf = b""
        buf_start = 0
        position = 0
        while position < self.size:
            if position + HEADER_SIZE > buf_start + len(buf):
                buf_start = position
                buf = os.pread(self.fd, SCAN_CHUNK, position)
            rel = position - buf_start
            if rel + HEADER_SIZE > len(buf):
                break
            header = parse_header(buf, rel)
            size = header.size
            if (
                header.magic != MAGIC_V2
                or header.batch_length < HEADER_SIZE - LOG_OVERHEAD
                or size > max(max_batch_bytes, SCAN_CHUNK)
                or position + size > self.size
                or header.base_offset < self.base_offset
                or (expected_offset is not None and header.base_offset < expected_offset)
            ):
                break
            if rel + size > len(buf):
                buf_start = position
                buf = os.pread(self.fd, max(SCAN_CHUNK, size), position)
                rel = 0
            if crc32c.crc32c(memoryview(buf)[rel + CRC_START : rel + size]) != header.crc:
                break
            self._track(header, position)
            expected_offset = header.next_offset
            position += size
            valid_end = position
        truncated = self.size - valid_end
        if truncated:
            os.ftruncate(self.fd, valid_end)
            self.size = valid_end
        self._bytes_since_index = self.index_interval_bytes
        self.flush(fsync=False)
        return truncated

    def truncate_to_offset(self, offset: int) -> None:
        """Drops every batch at or after offset (batches are never split)."""
        position = self.position_of(offset)
        if position >= self.size:
            return
        os.ftruncate(self.fd, position)
        self.size = position
        self.index.truncate_to_position(position)
        self.time_index.truncate_to_offset(offset)
        self.txn_index.truncate_from(offset)
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.first_batch_timestamp = None
        for _, header in self.headers_from(0):
            self.next_offset = header.next_offset
            self.max_timestamp = max(self.max_timestamp, header.max_timestamp)
            if self.first_batch_timestamp is None:
                self.first_batch_timestamp = header.max_timestamp

    def close(self) -> None:
        self.index.close()
        self.time_index.close()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def delete(self) -> None:
        self.close()
        for path in (self.path, self.index.file.path, self.time_index.file.path, self.txn_index.path):
            try:
                path.unlink()
            except FileNotFoundError:
                pass
