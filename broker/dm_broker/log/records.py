"""Kafka record batches (magic v2): header parsing, validation, offset stamping, decoding.

Batches are stored exactly as the client sent them; the broker only rewrites the fields that
lie outside the CRC (base offset and partition leader epoch), plus the timestamp fields for
LogAppendTime topics (then the CRC is recomputed). A producer's records are checked by
record_check (ADR 0048); the decoder here serves compaction, timestamp lookups, REST consumers and tools.
"""

from __future__ import annotations

import functools
import itertools
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import crc32c

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount
BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = BATCH_HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength precede the part counted by batchLength
CRC_START = 21  # the CRC covers attributes .. end of batch
STAMPED_PREFIX = 16  # baseOffset, batchLength, partitionLeaderEpoch: what a leader stamps outside the CRC
MAGIC_V2 = 2

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1


class InvalidRecordError(ValueError):
    """The bytes are not a well-formed batch (maps to INVALID_RECORD / CORRUPT_MESSAGE)."""


class CorruptRecordError(InvalidRecordError):
    """The batch is well framed but its CRC does not match (maps to CORRUPT_MESSAGE)."""


@dataclass(slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_BIT)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (1 << 31)


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    return BatchHeader(*BATCH_HEADER.unpack_from(buf, pos))


def crc_matches(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> bool:
    end = pos + header.size
    return crc32c.crc32c(memoryview(buf)[pos + CRC_START : end]) == header.crc


def iter_batches(buf: bytes | bytearray | memoryview) -> Iterator[tuple[int, BatchHeader]]:
    """Yields (position, header) for every complete batch; stops at a partial tail."""
    pos = 0
    total = len(buf)
    while pos + HEADER_SIZE <= total:
        header = parse_header(buf, pos)
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + header.size > total:
            return
        yield pos, header
        pos += header.size


def validate_batches(buf: bytes | bytearray | memoryview, max_batch_bytes: int) -> list[BatchHeader]:
    """Checks that buf is a whole number of well-formed, CRC-valid magic-v2 batches.

    Raises CorruptRecordError on a CRC mismatch and InvalidRecordError on anything else.
    """
    headers: list[BatchHeader] = []
    pos = 0
    total = len(buf)
    if total == 0:
        raise InvalidRecordError("empty record set")
    while pos < total:
        if pos + HEADER_SIZE > total:
            raise InvalidRecordError("truncated batch header")
        header = parse_header(buf, pos)
        if header.magic != MAGIC_V2:
            raise InvalidRecordError(f"unsupported record batch magic {header.magic} (only v2)")
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + header.size > total:
            raise InvalidRecordError("batch length does not match the record set size")
        if header.size > max_batch_bytes:
            raise RecordTooLargeError(f"batch of {header.size} bytes exceeds max.message.bytes")
        if header.records_count <= 0 or header.last_offset_delta != header.records_count - 1:
            raise InvalidRecordError("record count does not match the last offset delta")
        if header.compression > 4:
            raise InvalidRecordError(f"unknown compression codec {header.compression}")
        if not crc_matches(buf, pos, header):
            raise CorruptRecordError("record batch CRC mismatch")
        headers.append(header)
        pos += header.size
    return headers


class DecompressedTooLargeError(InvalidRecordError):
    """A compressed batch holds more than the bound its reader was given."""


class RecordTooLargeError(InvalidRecordError):
    """A batch is larger than max.message.bytes (maps to MESSAGE_TOO_LARGE)."""


def stamp_batch(
    buf: bytearray, pos: int, base_offset: int, leader_epoch: int, append_time_ms: int | None
) -> None:
    """Assigns the broker-side fields of one batch in place.

    base offset and partition leader epoch are outside the CRC; for LogAppendTime topics the
    timestamp type bit and max timestamp change, so the CRC is recomputed.
    """
    struct.pack_into(">q", buf, pos, base_offset)
    struct.pack_into(">i", buf, pos + 12, leader_epoch)
    if append_time_ms is not None:
        (attributes,) = struct.unpack_from(">h", buf, pos + 21)
        struct.pack_into(">h", buf, pos + 21, attributes | TIMESTAMP_TYPE_BIT)
        set_max_timestamp(buf, pos, append_time_ms)


def set_max_timestamp(buf: bytearray, pos: int, timestamp_ms: int) -> None:
    """Writes the batch's max timestamp in place and computes its CRC again."""
    struct.pack_into(">q", buf, pos + 35, timestamp_ms)
    (length,) = struct.unpack_from(">i", buf, pos + 8)
    end = pos + LOG_OVERHEAD + length
    struct.pack_into(">I", buf, pos + 17, crc32c.crc32c(memoryview(buf)[pos + CRC_START : end]))


# ---------------------------------------------------------------------------------------------
# Record-level decoding (off the hot path)


@dataclass(slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = 0
    result = 0
    while True:
        if pos >= len(buf):
            raise InvalidRecordError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift > 63:
            raise InvalidRecordError("varint too long")
    return (result >> 1) ^ -(result & 1), pos


def _read_varbytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    length, pos = _read_varint(buf, pos)
    if length < 0:
        if length != -1:
            raise InvalidRecordError(f"a record field has a length of {length}")
        return None, pos
    if pos + length > len(buf):
        raise InvalidRecordError("truncated record field")
    return bytes(buf[pos : pos + length]), pos + length


# What one batch may decompress to: 32 times the default max.message.bytes (real data compresses 2-10
# times; JSON logs with zstd about 20). A "zip bomb" stops here: a 64 KB zstd batch of zeros decompressed
# to 2 GB, 4 GB of broker memory with the copy; a 3.9 KB one to 120 MiB was accepted at 128 MiB (issue 65).
MAX_DECOMPRESSED_BYTES = 32 << 20
_FIRST_GUESS = 64 << 10


def decompress(codec: int, data: bytes, limit: int = MAX_DECOMPRESSED_BYTES) -> bytes:
    """The batch's records, uncompressed; InvalidRecordError if they would exceed `limit` bytes or the data
    is not valid for the codec."""
    if codec == 0:
        return data
    if codec == 2 and data.startswith(XERIAL_MAGIC):
        return _xerial_decompress(data, limit)
    return _bounded(codec, data, limit)


def _bounded(codec: int, data: bytes | memoryview, limit: int) -> bytes:
    """Decompresses into a buffer that grows (4x) up to `limit`, so the output is never larger than allowed
    whatever the input claims or holds."""
    size = min(limit, max(_FIRST_GUESS, 8 * len(data)))
    out, end = decompress_into(codec, data, bytearray(size), 0, 0, limit)
    return bytes(memoryview(out)[:end])


def decompress_into(codec: int, data: bytes | memoryview, out: bytearray, start: int, reserve: int,
                    limit: int = MAX_DECOMPRESSED_BYTES) -> tuple[bytearray, int]:
    """Decompresses a raw (not xerial-framed) codec's `data` into `out` from `start`, leaving its last `reserve`
    bytes free, at most `limit` bytes of output. When it does not fit, into a new buffer with four times the
    room (its first `start` bytes left zero). Returns the buffer written and where the output ends in it."""
    import cramjam

    if codec not in (1, 2, 3, 4):
        raise InvalidRecordError(f"unknown compression codec {codec}")
    into = _decompress_into()[codec]
    while True:
        room = min(limit, len(out) - start - reserve)
        try:
            written = into(data, memoryview(out)[start : start + room])
        except cramjam.DecompressionError as exc:
            if "buffer" not in str(exc):  # not "the output is too small": the data is corrupt
                raise InvalidRecordError(f"the batch's records do not decompress: {exc}") from None
            if room >= limit:
                raise DecompressedTooLargeError(f"the batch's records decompress to more than {limit} bytes") from None
            out = bytearray(start + min(limit, max(room * 4, _FIRST_GUESS)) + reserve)
            continue
        return out, start + written


@functools.cache
def _decompress_into() -> dict[int, Callable[[bytes | memoryview, bytearray], int]]:
    import cramjam

    return {1: cramjam.gzip.decompress_into, 2: cramjam.snappy.decompress_raw_into,
            3: cramjam.lz4.decompress_into, 4: cramjam.zstd.decompress_into}


XERIAL_MAGIC = b"\x82SNAPPY\x00"


def _xerial_decompress(data: bytes, limit: int) -> bytes:
    """Java clients frame snappy with xerial's block format (librdkafka may send raw snappy)."""
    pos = 16  # magic (8) + version (4) + compatible version (4)
    out = bytearray()
    while pos + 4 <= len(data):
        (size,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out += _bounded(2, memoryview(data)[pos : pos + size], limit - len(out))
        pos += size
    return bytes(out)


def compress(codec: int, data: bytes, level: int | None = None) -> bytes:
    """`level`: the codec's own level (gzip 1-9, lz4 1-17, zstd -131072-22); None: its default."""
    import cramjam

    if codec == 0:
        return data
    if codec == 1:
        return bytes(cramjam.gzip.compress(data, level=level))
    if codec == 2:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == 3:
        return bytes(cramjam.lz4.compress(data, level=level))
    if codec == 4:
        return bytes(cramjam.zstd.compress(data, level=level))
    raise ValueError(f"unknown compression codec {codec}")


def first_record_at(batch: bytes, timestamp: int) -> tuple[int, int] | None:
    """(offset, timestamp) of the batch's first record whose timestamp reaches `timestamp`, or None."""
    for record in decode_records(batch):
        if record.timestamp >= timestamp:
            return record.offset, record.timestamp
    return None


def record_with_max_timestamp(batch: bytes, limit: int) -> tuple[int, int]:
    """(offset, timestamp) of the batch's first record below offset `limit` with the batch's max timestamp."""
    header = parse_header(batch)
    for record in decode_records(batch):
        if record.timestamp == header.max_timestamp and record.offset < limit:
            return record.offset, record.timestamp
    return header.base_offset, header.max_timestamp


def decode_records(batch: bytes) -> list[Record]:
    """Decodes every record of one complete batch (decompressing if needed)."""
    header = parse_header(batch)
    body = bytes(batch[HEADER_SIZE : header.size])
    data = decompress(header.compression, body)
    records: list[Record] = []
    pos = 0
    for i in range(header.records_count):
        length, pos = _read_varint(data, pos)
        end = pos + length
        if length <= 0 or end > len(data):
            raise InvalidRecordError(f"record {i} of the batch is truncated or has a length of {length}")
        pos += 1  # record attributes (unused)
        ts_delta, pos = _read_varint(data, pos)
        off_delta, pos = _read_varint(data, pos)
        key, pos = _read_varbytes(data, pos)
        value, pos = _read_varbytes(data, pos)
        count, pos = _read_varint(data, pos)
        if count < 0:
            raise InvalidRecordError(f"record {i} of the batch has {count} headers")
        headers: list[tuple[str, bytes | None]] = []
        for _ in range(count):
            hkey, pos = _read_varbytes(data, pos)
            hval, pos = _read_varbytes(data, pos)
            headers.append(((hkey or b"").decode("utf-8", "replace"), hval))
        if pos != end:  # as Kafka's DefaultRecord.readFrom: the fields fill the record's declared length
            raise InvalidRecordError(f"record {i} of the batch declares {length} bytes but its fields take "
                                     f"{length + pos - end}")
        timestamp = header.max_timestamp if header.log_append_time else header.base_timestamp + ts_delta
        records.append(Record(header.base_offset + off_delta, timestamp, key, value, headers))
    if pos != len(data):
        raise InvalidRecordError(f"{len(data) - pos} bytes follow the batch's {header.records_count} records")
    return records


def _write_varint(out: bytearray, value: int) -> None:
    value = (value << 1) ^ (value >> 63)
    while value & ~0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _varint(value: int) -> bytes:
    out = bytearray()
    _write_varint(out, value)
    return bytes(out)


# Zigzag varints of -1 .. 16383 (lengths, deltas, counts): building a batch looks them up instead of
# computing them, which makes it about twice as fast (the REST Proxy builds one per request).
_SMALL_LIMIT = (1 << 14) - 1
_SMALL_VARINTS = tuple(_varint(v) for v in range(-1, _SMALL_LIMIT + 1))


def _small_varint(value: int) -> bytes:
    return _SMALL_VARINTS[value + 1] if -1 <= value < _SMALL_LIMIT else _varint(value)


RecordFields = tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]  # key, value, headers
_NULL = _SMALL_VARINTS[0]  # the length of an absent key, value or header value
_NO_HEADERS = _SMALL_VARINTS[1]  # a header count of 0


def _encode_records(pieces: list[bytes], records: Iterable[tuple[int, int, RecordFields]]) -> None:
    """Appends each (timestamp delta, offset delta, (key, value, headers)) record's pieces, its length varint
    first: the one record encoder (new batches and compaction). Written for the record with no headers,
    which the REST Proxy builds one of per record: no call and no list of its own per record."""
    table, limit, small = _SMALL_VARINTS, _SMALL_LIMIT, _small_varint
    for delta_ts, delta_offset, (key, value, headers) in records:
        # the table looked up in place: a call per varint would cost more than the rest of the record
        stamp = table[delta_ts + 1] if -1 <= delta_ts < limit else _varint(delta_ts)
        offset = table[delta_offset + 1] if delta_offset < limit else _varint(delta_offset)
        key_length = _NULL if key is None else small(len(key))
        value_length = _NULL if value is None else small(len(value))
        size = 1 + len(stamp) + len(offset) + len(key_length) + len(value_length)
        if key is not None:
            size += len(key)
        if value is not None:
            size += len(value)
        extra = _encoded_headers(headers) if headers else None
        size += 1 if extra is None else sum(map(len, extra))
        pieces += (table[size + 1] if size < limit else _varint(size), b"\x00", stamp, offset, key_length)
        if key is not None:
            pieces.append(key)
        pieces.append(value_length)
        if value is not None:
            pieces.append(value)
        if extra is None:
            pieces.append(_NO_HEADERS)
        else:
            pieces += extra


def _encoded_headers(headers: Sequence[tuple[str, bytes | None]]) -> list[bytes]:
    parts = [_small_varint(len(headers))]
    for hkey, hval in headers:
        name = hkey.encode()
        parts += (_small_varint(len(name)), name)
        if hval is None:
            parts.append(_NULL)
        else:
            parts += (_small_varint(len(hval)), hval)
    return parts


def build_batch(
    records: Sequence[RecordFields],
    *,
    base_offset: int = 0,
    timestamp_ms: int,
    codec: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    attributes_extra: int = 0,
    timestamp_deltas: list[int] | None = None,
) -> bytes:
    """Encodes (key, value, headers) tuples as one magic-v2 batch (used by internal writers);
    `timestamp_deltas` gives records timestamps of their own (timestamp_ms + delta)."""
    deltas = timestamp_deltas or [0] * len(records)
    pieces: list[bytes] = []
    _encode_records(pieces, zip(deltas, itertools.count(), records))
    return _framed(compress(codec, b"".join(pieces)), len(records), base_offset=base_offset,
                   timestamp_ms=timestamp_ms, max_timestamp_ms=timestamp_ms + max(deltas, default=0),
                   attributes=codec | attributes_extra, producer_id=producer_id, producer_epoch=producer_epoch,
                   base_sequence=base_sequence)


def build_keyless_batch(values: Sequence[bytes], *, timestamp_ms: int,
                        runs: Sequence[tuple[int, int]] | None = None) -> bytes:
    """build_batch of records with no key and no headers (the REST Proxy's common produce request): the
    same bytes at about a quarter of its time. `runs` are (record count, timestamp delta) of consecutive
    records, in order (a REST batch gathers requests that arrived in different milliseconds); without
    them every record has `timestamp_ms`. A record's bytes before its value depend only on its offset
    delta, timestamp delta and value length (_keyless_head), so records of one value length take their
    heads from a table and the batch is one join of heads and values."""
    count = len(values)
    runs = [(count, 0)] if runs is None else runs
    if not count or count >= _SMALL_LIMIT or None in values or not all(0 <= d < _SMALL_LIMIT for _, d in runs):
        return build_batch([(None, v, ()) for v in values], timestamp_ms=timestamp_ms,
                           timestamp_deltas=run_deltas(runs))
    lengths = set(map(len, values))
    one_length = lengths.pop() if len(lengths) == 1 else None
    heads: list[bytes] = []
    first = 0
    for n, delta in runs:
        if one_length is not None:
            heads += keyless_heads(one_length, delta, first, first + n)
        else:
            heads += [_keyless_head(i, delta, len(values[i])) for i in range(first, first + n)]
        first += n
    pieces: list[bytes] = [b""] * (2 * count + 1)
    pieces[0:-1:2] = heads
    pieces[1::2] = values
    pieces[-1] = _NO_HEADERS
    largest = max(delta for _, delta in runs)
    return _framed(b"".join(pieces), count, timestamp_ms=timestamp_ms, max_timestamp_ms=timestamp_ms + largest)


def run_deltas(runs: Sequence[tuple[int, int]]) -> list[int]:
    """Each record's timestamp delta, from (record count, timestamp delta) runs."""
    return list(itertools.chain.from_iterable(itertools.repeat(delta, n) for n, delta in runs))


def _keyless_head(offset_delta: int, timestamp_delta: int, value_length: int) -> bytes:
    """What precedes a keyless, header-less record's value (length, attributes, timestamp delta, offset
    delta, null key, value length); after the first record, the previous record's header count of 0
    comes first (a record ends with its header count, so the next record's head carries it)."""
    deltas = _small_varint(timestamp_delta) + _small_varint(offset_delta)
    length = _small_varint(value_length)
    size = 1 + len(deltas) + len(_NULL) + len(length) + value_length + len(_NO_HEADERS)
    head = _small_varint(size) + b"\x00" + deltas + _NULL + length
    return _NO_HEADERS + head if offset_delta else head


# (value length, timestamp delta) -> the heads of records 0, 1, 2, ...: a producer's values are mostly of
# one size, and a REST batch's timestamp deltas a few milliseconds. At most _KEYLESS_HEADS_KEPT tables of
# _KEYLESS_HEADS_LENGTH heads each (about 3 MB at most); the heads of records past that are computed.
_KEYLESS_HEADS: dict[tuple[int, int], list[bytes]] = {}
_KEYLESS_HEADS_KEPT = 64
_KEYLESS_HEADS_LENGTH = 1024


def keyless_heads(value_length: int, timestamp_delta: int, start: int, end: int) -> list[bytes]:
    """The heads (_keyless_head) of records start .. end-1 whose values are `value_length` bytes long."""
    key = (value_length, timestamp_delta)
    heads = _KEYLESS_HEADS.get(key)
    if heads is None:
        if len(_KEYLESS_HEADS) >= _KEYLESS_HEADS_KEPT:
            _KEYLESS_HEADS.clear()
        heads = _KEYLESS_HEADS[key] = [_keyless_head(i, timestamp_delta, value_length)
                                       for i in range(_KEYLESS_HEADS_LENGTH)]
    if end <= len(heads):
        return heads[start:end]
    return heads[start:] + [_keyless_head(i, timestamp_delta, value_length) for i in range(max(start, len(heads)), end)]


def _framed(payload: bytes, count: int, *, timestamp_ms: int, max_timestamp_ms: int, base_offset: int = 0,
            last_offset_delta: int | None = None, leader_epoch: int = -1, attributes: int = 0,
            producer_id: int = NO_PRODUCER_ID, producer_epoch: int = -1, base_sequence: int = NO_SEQUENCE) -> bytes:
    """The batch of `count` records whose (compressed) records are `payload`: header, CRC and payload,
    copied once."""
    length = HEADER_SIZE - LOG_OVERHEAD + len(payload)
    header = BATCH_HEADER.pack(base_offset, length, leader_epoch, MAGIC_V2, 0, attributes,
                               count - 1 if last_offset_delta is None else last_offset_delta, timestamp_ms,
                               max_timestamp_ms, producer_id, producer_epoch, base_sequence, count)
    crc = crc32c.crc32c(payload, crc32c.crc32c(header[CRC_START:]))
    return b"".join((header[:17], crc.to_bytes(4, "big"), header[CRC_START:], payload))


def renumbered(batch: bytes | bytearray | memoryview) -> bytes:
    """The batch with its records' offset deltas set to 0, 1, 2, …, everything else as it was (Kafka's
    LogValidator does this to a compressed batch whose inner offsets do not run on; ADR 0048)."""
    header = parse_header(batch)
    records = decode_records(batch)
    for i, record in enumerate(records):
        record.offset = header.base_offset + i
    return rebuild_batch(batch, records)


def rebuild_batch(original: bytes | bytearray | memoryview, kept: list[Record]) -> bytes:
    """The same batch with only `kept` records (compaction): base offset, last offset delta,
    timestamps, producer fields and codec stay, so offsets and producer state are unchanged."""
    header = parse_header(original)
    pieces: list[bytes] = []
    _encode_records(pieces, ((r.timestamp - header.base_timestamp, r.offset - header.base_offset,
                              (r.key, r.value, r.headers)) for r in kept))
    return with_payload(header, compress(header.compression, b"".join(pieces)), header.attributes, len(kept))


def with_payload(header: BatchHeader, payload: bytes, attributes: int, records_count: int) -> bytes:
    """A batch with `header`'s offsets, timestamps and producer fields around a new (compressed)
    payload, its length and CRC computed (compaction drops records, recompression re-encodes them)."""
    return _framed(payload, records_count, timestamp_ms=header.base_timestamp, max_timestamp_ms=header.max_timestamp,
                   base_offset=header.base_offset, last_offset_delta=header.last_offset_delta,
                   leader_epoch=header.partition_leader_epoch, attributes=attributes, producer_id=header.producer_id,
                   producer_epoch=header.producer_epoch, base_sequence=header.base_sequence)


# ---------------------------------------------------------------------------------------------
# Transaction markers: a control batch holds one record whose key is (version 0, type ABORT=0 or
# COMMIT=1) and whose value is (version 0, the coordinator epoch that wrote it).

MARKER_ABORT = 0
MARKER_COMMIT = 1
MARKER = struct.Struct(">hh")
MARKER_VALUE = struct.Struct(">hi")


def build_marker_batch(producer_id: int, producer_epoch: int, committed: bool, coordinator_epoch: int,
                       timestamp_ms: int) -> bytes:
    key = MARKER.pack(0, MARKER_COMMIT if committed else MARKER_ABORT)
    return build_batch([(key, MARKER_VALUE.pack(0, coordinator_epoch), [])], timestamp_ms=timestamp_ms,
                       producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=NO_SEQUENCE,
                       attributes_extra=TRANSACTIONAL_BIT | CONTROL_BIT)


def decode_marker(key: bytes | None, value: bytes | None) -> tuple[bool, int]:
    """(committed, coordinator epoch) of a control record."""
    if key is None or len(key) < MARKER.size:
        raise InvalidRecordError("a control record without its key")
    _, kind = MARKER.unpack_from(key)
    if kind not in (MARKER_ABORT, MARKER_COMMIT):
        raise InvalidRecordError(f"unknown control record type {kind}")
    epoch = MARKER_VALUE.unpack_from(value)[1] if value is not None and len(value) >= MARKER_VALUE.size else -1
    return kind == MARKER_COMMIT, epoch


def control_marker(batch: bytes) -> tuple[bool, int]:
    """(committed, coordinator epoch) of a control batch."""
    records = decode_records(batch)
    if not records:
        return True, -1  # emptied by compaction
    return decode_marker(records[0].key, records[0].value)
