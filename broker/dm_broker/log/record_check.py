"""Every record of a producer's batch is read before the batch is appended (ADR 0048), as Kafka's
LogValidator reads them: a batch whose CRC is right but whose records are not well formed would be stored,
and every consumer of the partition would stop at it (librdkafka stops there without an error).

The walk is aiokafka's record reader, a C extension (about 0.3 µs per 1 KiB record in a broker, against
3 µs for dm's own Python decoder). The same walk gives what compacted topics (keys) and timestamp
windows need, so produce reads a batch's records once."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from aiokafka.errors import CorruptRecordException
from aiokafka.record.default_records import DefaultRecordBatch

from .records import (
    COMPRESSION_MASK,
    HEADER_SIZE,
    MAX_DECOMPRESSED_BYTES,
    XERIAL_MAGIC,
    BatchHeader,
    InvalidRecordError,
    decode_records,
    decompress,
    decompress_into,
    parse_header,
)

# aiokafka's reader checks that one byte is left before it reads a varint, then reads up to ten: on a
# crafted batch it may read a few bytes past the end of its buffer. A batch that cannot be read where it
# is (_readable_in_place) is copied with this much after it.
_SLACK = bytes(32)
_ATTRIBUTES = slice(21, 23)
# Such a copy goes into a buffer each thread keeps: a new one per batch is fresh pages whose first writes fault
# on this VM (and malloc gives them back to the system after each), 0.3-0.6 µs per 1 KiB record in a broker
# against 0.03 for the copy itself. Batches larger than this get a buffer of their own.
_KEPT_SCRATCH = 4 << 20
_local = threading.local()


def _scratch(size: int) -> bytearray:
    kept: bytearray | None = getattr(_local, "buffer", None)
    if kept is not None and len(kept) >= size:
        return kept
    return _keep(bytearray(max(size, 1 << 20)))


def _keep(buffer: bytearray) -> bytearray:
    if len(buffer) <= _KEPT_SCRATCH:
        _local.buffer = buffer
    return buffer


@dataclass(slots=True)
class RecordSummary:
    """What produce needs from a batch's records beyond their being well formed."""

    largest_timestamp: int
    timestamps: list[int] = field(default_factory=list)  # record i's, when details were asked for
    keyless: list[int] = field(default_factory=list)  # indices of the records without a key, likewise
    # A compressed batch whose offset deltas do not run 0, 1, 2, …: Kafka renumbers such a batch's records
    # (records.renumbered) where it refuses an uncompressed one.
    renumber: bool = False
    inflated: int = 0  # bytes of the batch with its records decompressed: what re-encoding it costs


def _readable_in_place(batch: bytes | bytearray | memoryview, header: BatchHeader) -> bool:
    """Whether the reader's walk cannot leave the batch's memory. A bytes object ends with a NUL byte
    (CPython keeps one after every bytes object's data). When the batch's own last byte has no continuation
    bit, every varint the reader starts inside the batch ends inside it, and one it starts right after the
    end reads that NUL and stops; its next bounds check then refuses the batch. What kio hands the produce
    handler is such a bytes object, and most batches end in a record's header count of 0."""
    return not header.compression and type(batch) is bytes and len(batch) == header.size and not batch[-1] & 0x80


def _padded_copy(batch: bytes | bytearray | memoryview, header: BatchHeader, limit: int) -> memoryview:
    """The batch (its records decompressed) followed by _SLACK, in this thread's scratch buffer."""
    head, body = memoryview(batch)[:HEADER_SIZE], memoryview(batch)[HEADER_SIZE : header.size]
    slack = len(_SLACK)
    if header.compression and body[: len(XERIAL_MAGIC)] != XERIAL_MAGIC:
        # Straight into the scratch buffer: no output buffer of its own, no copy of the output.
        padded, end = decompress_into(header.compression, body, _scratch(HEADER_SIZE + len(body) + slack),
                                      HEADER_SIZE, slack, limit)
        _keep(padded)
    else:
        if header.compression:  # xerial-framed snappy, decompressed chunk by chunk
            body = memoryview(decompress(header.compression, bytes(body), limit))
        end = HEADER_SIZE + len(body)
        padded = _scratch(end + slack)
        padded[HEADER_SIZE:end] = body
    padded[:HEADER_SIZE] = head
    if header.compression:  # the reader must not decompress it again
        padded[_ATTRIBUTES] = (header.attributes & ~COMPRESSION_MASK).to_bytes(2, "big")
    padded[end : end + slack] = _SLACK
    return memoryview(padded)[:end]


def check_records(batch: bytes | bytearray | memoryview, limit: int = MAX_DECOMPRESSED_BYTES,
                  details: bool = False) -> RecordSummary:
    """Raises InvalidRecordError unless the batch's records are exactly `records_count` well-formed
    records that fill the batch, with no byte after them, and whose offset deltas run 0, 1, 2, … (a
    compressed batch's may not: `renumber` says so); a compressed batch decompresses to at most `limit`
    bytes (DecompressedTooLargeError past it). Returns
    the records' largest timestamp, which Kafka writes into the batch's max timestamp whatever the
    producer put there, and with `details` every record's timestamp and which have no key."""
    header = parse_header(batch)
    records = memoryview(batch) if _readable_in_place(batch, header) else _padded_copy(batch, header, limit)
    try:
        summary = _summarise(DefaultRecordBatch(records), header, details)
        summary.inflated = len(records)
        return summary
    except CorruptRecordException as exc:
        why = exc.args[0] if exc.args else type(exc).__name__
        raise InvalidRecordError(f"the batch's records are malformed: {why}") from None
    except InvalidRecordError:
        raise
    except Exception:  # e.g. a header key that is not UTF-8, which Kafka takes as it is
        # dm's own decoder decides (and raises InvalidRecordError); its records read the same way
        summary = _summarise(decode_records(bytes(batch)), header, details)
        summary.inflated = len(records)
        return summary


def _summarise(records: Iterable[Any], header: BatchHeader, details: bool) -> RecordSummary:
    """One pass over the batch's records (aiokafka's, or dm's decoder's: both have offset, timestamp and
    key), with what it reads per record kept in locals: this runs for every produced record."""
    base = expected = header.base_offset
    largest, timestamps, keyless, renumber = -1, [], [], False
    for record in records:
        if record.offset != expected:
            if not header.compression:
                raise InvalidRecordError(f"record {expected - base} of the batch has the offset delta "
                                         f"{record.offset - base}, not {expected - base}")
            renumber = True
        timestamp = record.timestamp
        if timestamp > largest:
            largest = timestamp
        if details:
            timestamps.append(timestamp)
            if record.key is None:
                keyless.append(expected - base)
        expected += 1
    return RecordSummary(largest, timestamps, keyless, renumber)
