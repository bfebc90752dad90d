"""Kafka record batches → Arrow record batches, in bulk.

Per record, Python only finds where each record starts (one varint); every field is then decoded
for all records at once with numpy, and keys, values and header fields are cut out of the buffer by
Arrow's C++ `take` (see `_slices`). Nothing on this path builds a Python object per row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from dm_broker.log.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    control_marker,
    crc_matches,
    decompress,
    iter_batches,
)

from .schema import HEADERS_TYPE, kafka_schema

BINARY = pa.binary()
_PAD = 16  # zero bytes after the payload so a varint read never runs off the end


@dataclass
class Decoded:
    """One Arrow batch and where the next fetch should start."""

    batch: pa.RecordBatch
    next_offset: int


def decode_records(data: bytes | memoryview, topic: str, partition: int, start: int, end: int,
                   include_headers: bool, aborted: list[tuple[int, int]] | None = None) -> Decoded:
    """Rows with start <= offset < end from the record batches in `data` (a fetch response's
    records; a trailing partial batch is ignored). Control batches (transaction markers) are skipped.
    `aborted` is a read_committed fetch's (producer id, first offset) list: those transactions'
    batches are skipped up to their abort marker, as Kafka's consumer does."""
    sections: list[bytes | memoryview] = []
    counts, base_offsets, first_ts, max_ts, log_append = [], [], [], [], []
    next_offset = start
    view = memoryview(data)
    pending = sorted(aborted or (), key=lambda a: a[1])
    aborting: set[int] = set()  # producers whose batches belong to an aborted transaction here
    for pos, header in iter_batches(data):
        while pending and pending[0][1] <= header.last_offset:
            aborting.add(pending.pop(0)[0])
        if header.last_offset < start:
            continue
        if header.base_offset >= end:
            break
        if not crc_matches(data, pos, header):
            raise ValueError(f"{topic}-{partition}: CRC mismatch in the batch at offset {header.base_offset}")
        next_offset = header.next_offset
        if header.is_control:
            if header.producer_id in aborting and not _committed(data, pos, header):
                aborting.discard(header.producer_id)
            continue
        if header.records_count == 0 or (header.is_transactional and header.producer_id in aborting):
            continue
        body = view[pos + HEADER_SIZE: pos + LOG_OVERHEAD + header.batch_length]
        codec = header.compression
        sections.append(decompress(codec, bytes(body)) if codec else body)
        counts.append(header.records_count)
        base_offsets.append(header.base_offset)
        first_ts.append(header.base_timestamp)
        max_ts.append(header.max_timestamp)
        log_append.append(header.log_append_time)
    if not sections:
        return Decoded(empty_batch(include_headers), next_offset)

    payload = b"".join([*sections, bytes(_PAD)])  # one copy of the records, padding included
    buf = np.frombuffer(payload, dtype=np.uint8)
    starts, record_ends = _record_bounds(payload, len(payload) - _PAD)
    per_batch = np.asarray(counts, dtype=np.int64)
    if int(per_batch.sum()) != len(starts):
        raise ValueError(f"{topic}-{partition}: batches declare {int(per_batch.sum())} records, found {len(starts)}")
    batch_of = np.repeat(np.arange(len(counts)), per_batch)

    pos = starts + 1  # attributes (unused since magic v2)
    ts_delta, n = _varints(buf, pos)
    pos += n
    offset_delta, n = _varints(buf, pos)
    pos += n
    key_start, key_len, pos = _varbytes(buf, pos, record_ends)
    value_start, value_len, pos = _varbytes(buf, pos, record_ends)

    offsets = np.asarray(base_offsets, dtype=np.int64)[batch_of] + offset_delta
    keep = (offsets >= start) & (offsets < end)
    all_kept = bool(keep.all())

    timestamps = np.where(np.asarray(log_append)[batch_of], np.asarray(max_ts, dtype=np.int64)[batch_of],
                          np.asarray(first_ts, dtype=np.int64)[batch_of] + ts_delta)
    ts_type = np.asarray(log_append, dtype=np.int32)[batch_of]
    arrays: list[pa.Array] = [
        _slices(payload, key_start, key_len),
        _slices(payload, value_start, value_len),
        None,  # topic, filled in once the row count is known
        None,  # partition
        pa.array(offsets, pa.int64()),
        pa.array(timestamps * 1000, pa.timestamp("us", tz="UTC")),
        pa.array(ts_type, pa.int32()),
    ]
    if include_headers:
        arrays.append(_headers(payload, buf, pos, record_ends))
    if not all_kept:
        mask = pa.array(keep)
        arrays = [a if a is None else a.filter(mask) for a in arrays]
    rows = int(keep.sum())
    arrays[2] = pa.repeat(pa.scalar(topic, pa.string()), rows)
    arrays[3] = pa.repeat(pa.scalar(partition, pa.int32()), rows)
    return Decoded(pa.RecordBatch.from_arrays(arrays, schema=kafka_schema(include_headers)), next_offset)


def _committed(data: bytes | memoryview, pos: int, header: BatchHeader) -> bool:
    return control_marker(bytes(memoryview(data)[pos: pos + header.size]))[0]


def empty_batch(include_headers: bool) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=kafka_schema(include_headers))


def _record_bounds(payload: bytes, end: int) -> tuple[np.ndarray, np.ndarray]:
    """Where each record's attributes byte is and where the record ends.

    Record boundaries are a chain (each start depends on the previous record's length varint), which
    numpy cannot follow. But a producer's records are mostly the same size for long runs (the same value
    size; lengths change only where an offset or timestamp delta needs one more varint byte), so the
    chain is first guessed with a fixed stride and checked for the whole run at once: a record is taken
    when its length varint ends it exactly where the next guessed record starts. Where sizes vary, the
    records are walked one by one in Python (`_walk`), in stretches that grow while guessing keeps failing.
    Both ways find exactly the same records (tests/unit/test_arrow_decode.py)."""
    buf = np.frombuffer(payload, dtype=np.uint8)
    starts: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    pos, guess, walk = 0, _FIRST_GUESS, _FIRST_WALK
    while pos < end:
        _, _, after_first = _walk(payload, pos, end, 1)  # refuses a negative or malformed length
        stride = after_first - pos
        fits = (end - pos) // stride
        taken = 0
        if fits >= _MIN_GUESS:
            run = pos + stride * np.arange(min(guess, fits), dtype=np.int64)
            lengths, sizes = _varints(buf, run, max_size=5, guessed=True)
            good = (lengths >= 0) & (sizes + lengths == stride)
            bad = np.flatnonzero(~good)
            taken = int(bad[0]) if bad.size else len(run)
            if taken:
                starts.append(run[:taken] + sizes[:taken])
                ends.append(run[:taken] + stride)
                pos = int(run[taken - 1]) + stride
            guess = guess * 2 if taken == len(run) else _FIRST_GUESS
        if taken >= _MIN_GUESS:
            walk = _FIRST_WALK
            continue
        walked_starts, walked_ends, pos = _walk(payload, pos, end, walk)
        starts.append(np.asarray(walked_starts, dtype=np.int64))
        ends.append(np.asarray(walked_ends, dtype=np.int64))
        walk = min(walk * 2, _MAX_WALK)
    if pos > end:
        raise ValueError("the last record runs past the end of its batch")
    if not starts:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(starts), np.concatenate(ends)


_MIN_GUESS = 8  # a shorter run of same-size records is cheaper to walk
_FIRST_GUESS = 64  # records guessed at once; doubles while every guess holds
_FIRST_WALK = 64  # records walked in Python after a failed guess; doubles while guessing keeps failing
_MAX_WALK = 8192


def _walk(payload: bytes, pos: int, end: int, records: int) -> tuple[list[int], list[int], int]:
    """Up to `records` records from `pos`, one by one: (attribute positions, record ends, next position)."""
    starts: list[int] = []
    ends: list[int] = []
    add_start, add_end = starts.append, ends.append
    while pos < end and records:
        b = payload[pos]
        if b < 0x80:
            raw = b
            pos += 1
        else:
            b2 = payload[pos + 1]
            if b2 < 0x80:
                raw = (b & 0x7F) | (b2 << 7)
                pos += 2
            else:
                raw, shift, pos = (b & 0x7F) | ((b2 & 0x7F) << 7), 14, pos + 2
                while True:
                    b = payload[pos]
                    pos += 1
                    raw |= (b & 0x7F) << shift
                    if b < 0x80:
                        break
                    shift += 7
                    if shift > 28:
                        raise ValueError("malformed record length")
        length = (raw >> 1) ^ -(raw & 1)
        if length < 0:
            raise ValueError("negative record length")
        add_start(pos)
        pos += length
        add_end(pos)
        records -= 1
    return starts, ends, pos


def _varints(buf: np.ndarray, pos: np.ndarray, max_size: int = 10, guessed: bool = False
             ) -> tuple[np.ndarray, np.ndarray]:
    """Zigzag varints at every position in `pos`: (values, encoded sizes). The first byte is read for
    all at once; only the (usually few) longer varints go through the index arrays. One longer than
    `max_size` bytes is malformed, or, at `guessed` positions (record starts guessed by
    `_record_bounds`), simply not a record: its value is -1."""
    first = buf[pos]
    raw = (first & 0x7F).astype(np.int64)
    size = np.ones(len(pos), dtype=np.int64)
    active = np.flatnonzero(first >= 0x80)
    for shift in range(7, 7 * max_size, 7):
        if not active.size:
            break
        b = buf[pos[active] + size[active]].astype(np.int64)
        raw[active] |= (b & 0x7F) << shift
        size[active] += 1
        active = active[b >= 0x80]
    value = (raw >> 1) ^ -(raw & 1)
    if active.size:
        if not guessed:
            raise ValueError("malformed varint in a record")
        value[active] = -1
    return value, size


def _varbytes(buf: np.ndarray, pos: np.ndarray, record_ends: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A length-prefixed field (key, value, header key or value) at every position in `pos`:
    (data starts, lengths with -1 for null, positions after it). A field that runs past its record
    is refused here, so `_slices` only ever cuts inside the payload."""
    length, n = _varints(buf, pos)
    start = pos + n
    after = start + np.maximum(length, 0)
    if (after > record_ends).any():
        raise ValueError("a record field runs past the end of its record")
    return start, length, after


def _slices(payload: bytes, starts: np.ndarray, lengths: np.ndarray, kind: pa.DataType = BINARY) -> pa.Array:
    """payload[start:start+length] for every row, null where length is -1.

    The slices are ordered and disjoint, so [s0, e0, s1, e1, ...] is a valid Arrow offsets buffer
    over the whole payload: its even elements are the slices, its odd ones the bytes between them.
    `take` of the even elements copies just the slices, in C++."""
    n = len(starts)
    if n == 0:
        return pa.array([], kind)
    ends = starts + np.maximum(lengths, 0)
    bounds = np.empty(2 * n, dtype=np.int32)
    bounds[0::2] = starts
    bounds[1::2] = ends
    interleaved = pa.Array.from_buffers(kind, 2 * n - 1, [None, pa.py_buffer(bounds), pa.py_buffer(payload)])
    taken = interleaved.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int64)))
    valid = lengths >= 0
    if valid.all():
        return taken
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(kind, n, [bitmap, *taken.buffers()[1:]], null_count=int((~valid).sum()))


def _headers(payload: bytes, buf: np.ndarray, pos: np.ndarray, record_ends: np.ndarray) -> pa.Array:
    """The headers column: list<struct<key: string, value: binary>> per record."""
    count, n = _varints(buf, pos)
    if (count < 0).any():
        raise ValueError("negative header count in a record")
    pos = pos + n
    rows = np.arange(len(pos))
    parts: list[tuple[np.ndarray, ...]] = []  # (row, index, key start, key len, value start, value len)
    active = count > 0
    index = 0
    while active.any():
        r = rows[active]
        key_start, key_len, p = _varbytes(buf, pos[r], record_ends[r])
        value_start, value_len, pos[r] = _varbytes(buf, p, record_ends[r])
        parts.append((r, np.full(len(r), index), key_start, key_len, value_start, value_len))
        index += 1
        active = count > index
    list_offsets = np.zeros(len(count) + 1, dtype=np.int32)
    np.cumsum(count, out=list_offsets[1:])
    if not parts:
        values = pa.StructArray.from_arrays([pa.array([], pa.string()), pa.array([], pa.binary())],
                                            fields=list(HEADERS_TYPE.value_type))
        return pa.ListArray.from_arrays(pa.array(list_offsets), values, type=HEADERS_TYPE)
    row, idx, ks, kl, vs, vl = (np.concatenate(c) for c in zip(*parts, strict=True))
    order = np.lexsort((idx, row))  # headers of a record together, in their order
    keys = _slices(payload, ks[order], kl[order], pa.string())
    values = _slices(payload, vs[order], vl[order], pa.binary())
    struct = pa.StructArray.from_arrays([keys, values], fields=list(HEADERS_TYPE.value_type))
    return pa.ListArray.from_arrays(pa.array(list_offsets), struct, type=HEADERS_TYPE)

