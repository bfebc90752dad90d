"""Hand-written decoder of Fetch v12 responses for the replica fetcher, without copying records.

kio turns each partition's records into a new bytes object, one more copy of every replicated
byte on every follower. This decoder returns the records as views into the received frame, so
a follower writes them to its log straight from the buffer the socket filled. It reads only
what the fetcher uses; every length is checked against the frame (a malformed response raises
BoundsError and the fetcher reconnects). A unit test compares it with kio on encoded responses.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from .bounds import BoundsError, read_uvarint
from .fetch_encoder import PartitionResult

VERSION = 12
PARTITION_HEAD = struct.Struct(">ihqqq")  # index, error, high watermark, last stable offset, log start
I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
ABORTED_ENTRY = struct.Struct(">qq")  # producer id, first offset


class _Cursor:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: memoryview, pos: int = 0) -> None:
        self.buf = buf
        self.pos = pos

    def take(self, size: int) -> int:
        start = self.pos
        if size < 0 or start + size > len(self.buf):
            raise BoundsError(f"field of {size} bytes at {start} runs past the {len(self.buf)}-byte response")
        self.pos = start + size
        return start

    def unpack(self, fmt: struct.Struct) -> tuple:
        return fmt.unpack_from(self.buf, self.take(fmt.size))

    def uvarint(self) -> int:
        value, self.pos = read_uvarint(self.buf, self.pos)
        return value

    def compact_length(self) -> int:
        """-1 for null, otherwise the length."""
        return self.uvarint() - 1

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self.take(self.uvarint())


def decode_fetch_response(frame: bytes | memoryview) -> tuple[int, int, int, Iterator[tuple[str, PartitionResult]]]:
    """(correlation id, top-level error code, session id, (topic, partition result) pairs) of a v12
    response frame without its size prefix. Records are views into `frame`, or None."""
    cur = _Cursor(memoryview(frame))
    (correlation_id,) = cur.unpack(I32)
    cur.skip_tagged_fields()  # response header v1
    cur.take(4)  # throttle time
    (error_code,) = cur.unpack(I16)
    (session_id,) = cur.unpack(I32)
    return correlation_id, error_code, session_id, _partitions(cur)


def _partitions(cur: _Cursor) -> Iterator[tuple[str, PartitionResult]]:
    for _ in range(max(cur.compact_length(), 0)):
        size = cur.compact_length()
        start = cur.take(max(size, 0))
        topic = str(cur.buf[start:cur.pos], "utf-8")
        for _ in range(max(cur.compact_length(), 0)):
            index, error, high_watermark, last_stable, log_start = cur.unpack(PARTITION_HEAD)
            count = cur.compact_length()
            aborted = None if count < 0 else []
            for _ in range(max(count, 0)):
                aborted.append(cur.unpack(ABORTED_ENTRY))  # a read_committed fetch's aborted transactions
                cur.skip_tagged_fields()
            cur.take(4)  # preferred read replica
            size = cur.compact_length()
            records = None
            if size >= 0:
                start = cur.take(size)
                records = cur.buf[start:cur.pos]
            cur.skip_tagged_fields()
            yield topic, PartitionResult(index, error, high_watermark, last_stable, log_start, records, aborted)
        cur.skip_tagged_fields()
    cur.skip_tagged_fields()
