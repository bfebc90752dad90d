"""The connector's bulk decoder against the broker's record-by-record decoder."""

from __future__ import annotations

import pytest

pa = pytest.importorskip("pyarrow")

from dm_broker.log.records import CONTROL_BIT, build_batch, decode_records  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from pyspark_dm.decode import decode_records as decode_arrow  # noqa: E402

maybe_bytes = st.one_of(st.none(), st.binary(max_size=300))
record = st.tuples(maybe_bytes, maybe_bytes,
                   st.lists(st.tuples(st.text(max_size=8), maybe_bytes), max_size=3))
CODECS = [0, 1, 2, 3, 4]


def batches(groups: list[list[tuple]], codec: int, base: int = 0) -> tuple[bytes, list]:
    data, offset = b"", base
    for i, records in enumerate(groups):
        data += build_batch(records, base_offset=offset, timestamp_ms=1_700_000_000_000 + i, codec=codec)
        offset += len(records)
    return data, decode_records_all(data)


def decode_records_all(data: bytes) -> list:
    from dm_broker.log.records import iter_batches

    out = []
    for pos, header in iter_batches(data):
        out.extend(decode_records(data[pos:pos + header.size]))
    return out


def rows(batch: pa.RecordBatch) -> list[tuple]:
    d = batch.to_pydict()
    return [(d["offset"][i], d["key"][i], d["value"][i],
             [(h["key"], h["value"]) for h in d["headers"][i]] if "headers" in d else None)
            for i in range(batch.num_rows)]


@settings(max_examples=60, deadline=None)
@given(groups=st.lists(st.lists(record, min_size=1, max_size=6), min_size=1, max_size=4),
       codec=st.sampled_from(CODECS), cut=st.integers(0, 30))
def test_bulk_decode_matches_the_reference_decoder(groups, codec, cut) -> None:
    data, expected = batches(groups, codec, base=100)
    total = sum(len(g) for g in groups)
    start, end = 100 + min(cut, total), 100 + total - min(cut // 2, total)
    decoded = decode_arrow(data, "t", 3, start, end, include_headers=True)
    want = [(r.offset, r.key, r.value, [(k, v) for k, v in r.headers]) for r in expected if start <= r.offset < end]
    assert rows(decoded.batch) == want
    assert set(decoded.batch.column("topic").to_pylist()) <= {"t"}
    assert set(decoded.batch.column("partition").to_pylist()) <= {3}
    without = decode_arrow(data, "t", 3, start, end, include_headers=False).batch
    assert without.schema.names == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    assert without.column("offset").to_pylist() == [w[0] for w in want]


def test_control_batches_are_skipped_but_advance_the_position() -> None:
    data = build_batch([(b"k", b"v", [])], base_offset=0, timestamp_ms=5)
    data += build_batch([(None, b"\0\0\0\0\0\0", [])], base_offset=1, timestamp_ms=6, attributes_extra=CONTROL_BIT)
    decoded = decode_arrow(data, "t", 0, 0, 10, include_headers=False)
    assert decoded.batch.column("value").to_pylist() == [b"v"]
    assert decoded.next_offset == 2


def test_read_committed_skips_aborted_transactions_up_to_their_marker() -> None:
    """A fetch's aborted list (producer id, first offset) hides that producer's transactional
    batches from the first offset to its abort marker, and no others (Kafka's consumer rule)."""
    from dm_broker.log.records import MARKER, MARKER_ABORT, MARKER_COMMIT, MARKER_VALUE, TRANSACTIONAL_BIT

    def txn(offset: int, pid: int, value: bytes) -> bytes:
        return build_batch([(None, value, [])], base_offset=offset, timestamp_ms=1, producer_id=pid,
                           producer_epoch=0, base_sequence=offset, attributes_extra=TRANSACTIONAL_BIT)

    def marker(offset: int, pid: int, committed: bool) -> bytes:
        key = MARKER.pack(0, MARKER_COMMIT if committed else MARKER_ABORT)
        return build_batch([(key, MARKER_VALUE.pack(0, 0), [])], base_offset=offset, timestamp_ms=1, producer_id=pid,
                           producer_epoch=0, attributes_extra=TRANSACTIONAL_BIT | CONTROL_BIT)

    data = (txn(0, 7, b"aborted-1") + txn(1, 8, b"committed-1") + build_batch([(None, b"plain", [])], base_offset=2,
                                                                               timestamp_ms=1)
            + txn(3, 7, b"aborted-2") + marker(4, 7, committed=False) + marker(5, 8, committed=True)
            + txn(6, 7, b"committed-2") + marker(7, 7, committed=True))
    committed = decode_arrow(data, "t", 0, 0, 100, include_headers=False, aborted=[(7, 0)])
    assert committed.batch.column("value").to_pylist() == [b"committed-1", b"plain", b"committed-2"]
    assert committed.next_offset == 8
    everything = decode_arrow(data, "t", 0, 0, 100, include_headers=False)
    assert len(everything.batch) == 5
    # a fetch starting inside the aborted transaction gets the same answer for the rest
    later = decode_arrow(data[len(txn(0, 7, b"aborted-1")):], "t", 0, 1, 100, include_headers=False, aborted=[(7, 0)])
    assert later.batch.column("value").to_pylist() == [b"committed-1", b"plain", b"committed-2"]


def test_a_trailing_partial_batch_is_left_for_the_next_fetch() -> None:
    first = build_batch([(b"a", b"1", [])], base_offset=0, timestamp_ms=1)
    second = build_batch([(b"b", b"2", [])], base_offset=1, timestamp_ms=2)
    decoded = decode_arrow(first + second[:-5], "t", 0, 0, 10, include_headers=False)
    assert decoded.batch.column("offset").to_pylist() == [0]
    assert decoded.next_offset == 1


def test_timestamps_and_types() -> None:
    data = build_batch([(b"a", b"1", [])], base_offset=0, timestamp_ms=1_700_000_000_123)
    batch = decode_arrow(data, "t", 0, 0, 1, include_headers=False).batch
    assert batch.column("timestamp").cast(pa.int64()).to_pylist() == [1_700_000_000_123_000]
    assert batch.column("timestampType").to_pylist() == [0]


def test_a_field_longer_than_its_record_is_refused() -> None:
    """A batch with a valid CRC can still hold a malformed record; it must not be cut out of the buffer."""
    import struct

    import crc32c

    data = bytearray(build_batch([(None, b"abc", [])], base_offset=0, timestamp_ms=1))
    at = data.index(b"\x06abc")  # value length 3 (zigzag 6)
    data[at] = 0x0C  # claims 6 bytes: past the end of the record
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    with pytest.raises(ValueError, match="runs past the end of its record"):
        decode_arrow(bytes(data), "t", 0, 0, 1, include_headers=False)


run = st.tuples(st.integers(1, 400), st.one_of(st.integers(0, 300), st.none()))  # (records, value size or varied)


@settings(max_examples=40, deadline=None)
@given(runs=st.lists(run, min_size=1, max_size=5), seed=st.integers(0, 2**16))
def test_long_batches_of_same_size_and_varied_records_decode_like_the_reference(runs, seed) -> None:
    """Runs of same-size records (found by guessing a stride and checking it) between varied ones (walked
    one by one), across offset deltas of 64 and more where the records grow by a byte."""
    import random

    rnd = random.Random(seed)
    records = []
    for count, size in runs:
        for _ in range(count):
            value = bytes(rnd.randrange(256) for _ in range(size if size is not None else rnd.randrange(300)))
            records.append((None, value, []))
    data = build_batch(records, base_offset=0, timestamp_ms=1_700_000_000_000)
    expected = decode_records_all(data)
    decoded = decode_arrow(data, "t", 0, 0, len(records), include_headers=True)
    assert rows(decoded.batch) == [(r.offset, r.key, r.value, list(r.headers)) for r in expected]


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.one_of(st.integers(0, 40), st.sampled_from([5, 5, 5, 200, 9000])), min_size=1,
                        max_size=600))
def test_record_bounds_guessed_or_walked_are_the_same(lengths) -> None:
    from pyspark_dm.decode import _record_bounds, _walk

    payload = bytearray()
    for n in lengths:
        zig = n << 1
        while zig >= 0x80:
            payload.append(zig & 0x7F | 0x80)
            zig >>= 7
        payload.append(zig)
        payload += bytes([0xFF]) * n  # record bodies full of continuation bits: a wrong guess reads garbage
    end = len(payload)
    padded = bytes(payload) + bytes(16)
    starts, ends = _record_bounds(padded, end)
    walked_starts, walked_ends, pos = _walk(padded, 0, end, len(lengths) + 1)
    assert pos == end
    assert starts.tolist() == walked_starts and ends.tolist() == walked_ends


def test_a_negative_record_length_inside_a_run_of_same_size_records_is_refused() -> None:
    from pyspark_dm.decode import _record_bounds

    same = b"\x0a" + b"abcde"  # length 5
    payload = same * 100 + b"\x03" + same * 100  # zigzag 3 = -2
    with pytest.raises(ValueError, match="negative record length"):
        _record_bounds(payload + bytes(16), len(payload))


def test_the_last_record_running_past_its_batch_is_refused() -> None:
    from pyspark_dm.decode import _record_bounds

    payload = b"\x0aabcde" * 50 + b"\x0aabc"
    with pytest.raises(ValueError, match="runs past the end"):
        _record_bounds(payload + bytes(16), len(payload))
