from __future__ import annotations

import pytest
from dm_broker.log.records import (
    HEADER_SIZE,
    CorruptRecordError,
    InvalidRecordError,
    RecordTooLargeError,
    build_batch,
    crc_matches,
    decode_records,
    iter_batches,
    parse_header,
    stamp_batch,
    validate_batches,
)
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_build_decode_round_trip(codec):
    records = [(b"k%d" % i, b"value-%d" % i * 20, [("h", b"%d" % i), ("n", None)]) for i in range(50)]
    data = build_batch(records, timestamp_ms=1_000, codec=codec, producer_id=7, producer_epoch=1, base_sequence=3)
    [header] = validate_batches(data, 1 << 20)
    assert header.records_count == 50 and header.compression == codec
    assert (header.producer_id, header.producer_epoch, header.base_sequence, header.last_sequence) == (7, 1, 3, 52)
    decoded = decode_records(data)
    assert [(r.key, r.value, r.headers) for r in decoded] == records
    assert [r.offset for r in decoded] == list(range(50))


def test_stamp_sets_offset_and_epoch_without_breaking_crc():
    data = bytearray(build_batch([(None, b"x", [])] * 3, timestamp_ms=5))
    stamp_batch(data, 0, 1000, 7, None)
    header = parse_header(data)
    assert (header.base_offset, header.partition_leader_epoch, header.last_offset) == (1000, 7, 1002)
    assert crc_matches(data, 0, header)


def test_log_append_time_rewrites_timestamp_and_crc():
    data = bytearray(build_batch([(None, b"x", [])], timestamp_ms=5))
    stamp_batch(data, 0, 0, 0, 123456)
    header = parse_header(data)
    assert header.log_append_time and header.max_timestamp == 123456
    assert crc_matches(data, 0, header)
    assert decode_records(bytes(data))[0].timestamp == 123456


def test_validation_errors():
    good = build_batch([(None, b"x", [])], timestamp_ms=1)
    corrupt = bytearray(good)
    corrupt[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        validate_batches(bytes(corrupt), 1 << 20)
    with pytest.raises(InvalidRecordError):
        validate_batches(good[:-2], 1 << 20)
    with pytest.raises(InvalidRecordError):
        validate_batches(good + b"\x00" * 5, 1 << 20)
    wrong_magic = bytearray(good)
    wrong_magic[16] = 1
    with pytest.raises(InvalidRecordError, match="magic"):
        validate_batches(bytes(wrong_magic), 1 << 20)
    with pytest.raises(RecordTooLargeError):
        validate_batches(good, HEADER_SIZE)
    with pytest.raises(InvalidRecordError):
        validate_batches(b"", 1 << 20)


def test_iter_batches_stops_at_partial_tail():
    a = build_batch([(None, b"a", [])], timestamp_ms=1)
    b = build_batch([(None, b"b", [])], timestamp_ms=1)
    positions = [pos for pos, _ in iter_batches(a + b[:-1])]
    assert positions == [0]
    assert [pos for pos, _ in iter_batches(a + b)] == [0, len(a)]


def test_decodes_xerial_framed_snappy():
    import struct

    import cramjam

    body = build_batch([(b"k", b"v" * 100, [])], timestamp_ms=1)[HEADER_SIZE:]
    block = bytes(cramjam.snappy.compress_raw(body))
    framed = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", len(block)) + block
    from dm_broker.log.records import decompress

    assert decompress(2, framed) == body


# lengths past the varint table without drawing 16 KB of random bytes (Hypothesis refuses inputs that large)
_payload = st.one_of(st.none(), st.binary(max_size=40), st.integers(16_390, 16_400).map(lambda n: bytes([n % 251]) * n))
_headers = st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=8))), max_size=2)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_payload, _payload, _headers, st.integers(-5, 1 << 40)), min_size=1, max_size=30))
def test_any_records_round_trip(records: list[tuple[bytes | None, bytes | None, list, int]]) -> None:
    """Headerless records with small timestamp deltas take build_batch's inline path, the rest the general
    encoder; both decode to what went in (lengths and deltas past the varint table included)."""
    data = build_batch([(k, v, h) for k, v, h, _ in records], timestamp_ms=1_000,
                       timestamp_deltas=[d for *_, d in records])
    validate_batches(data, 1 << 30)
    decoded = decode_records(data)
    assert [(r.key, r.value, r.headers, r.timestamp, r.offset) for r in decoded] == [
        (k, v, h, 1_000 + d, i) for i, (k, v, h, d) in enumerate(records)]


def test_offset_deltas_past_the_varint_table_round_trip() -> None:
    records = [(None, b"%d" % i, []) for i in range(16_500)]
    decoded = decode_records(build_batch(records, timestamp_ms=5))
    assert [(r.offset, r.value) for r in decoded[16_370:16_400]] == [(i, b"%d" % i) for i in range(16_370, 16_400)]
    assert len(decoded) == 16_500


def _with_body(body: bytes, codec: int, count: int) -> bytes:
    """A batch of `count` records around an arbitrary (compressed) body, its CRC right."""
    from dm_broker.log.records import with_payload

    base = parse_header(build_batch([(b"k", b"v", [])], timestamp_ms=1, codec=codec))
    return with_payload(base, body, base.attributes, count)


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_decompression_stops_at_its_limit(codec):
    import cramjam
    from dm_broker.log.records import decompress

    raw = b"\0" * (3 << 20)
    name = {1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}[codec]
    packed = bytes(cramjam.snappy.compress_raw(raw) if codec == 2 else getattr(cramjam, name).compress(raw))
    assert decompress(codec, packed, limit=3 << 20) == raw  # grown to exactly what it holds
    with pytest.raises(InvalidRecordError, match="decompress to more than 1048576 bytes"):
        decompress(codec, packed, limit=1 << 20)
    with pytest.raises(InvalidRecordError, match="do not decompress"):
        decompress(codec, b"\x07" * 64)


def test_a_zip_bomb_is_refused_without_inflating_it():
    """64 KB of zstd that hold 2 GB of zeros: refused at MAX_DECOMPRESSED_BYTES (128 MiB); before, the
    broker decompressed all of it (4 GB of memory with the copy) and took the batch as one record."""
    import cramjam
    from dm_broker.log.records import MAX_DECOMPRESSED_BYTES

    chunk = bytes(cramjam.zstd.compress(b"\0" * (16 << 20), level=19))  # zstd frames concatenate
    bomb = _with_body(chunk * ((2 << 30) // (16 << 20)), 4, 1)
    assert len(bomb) < 200_000
    with pytest.raises(InvalidRecordError, match=f"more than {MAX_DECOMPRESSED_BYTES} bytes"):
        decode_records(bomb)


def test_records_must_fill_their_declared_lengths_and_the_batch():
    """As Kafka's DefaultRecord.readFrom and its batch iterator: a record whose fields run past its length,
    bytes after the last record, a negative header count or field length are invalid."""
    body = bytes(build_batch([(b"k", b"v", [])], timestamp_ms=1)[HEADER_SIZE:])
    assert [r.key for r in decode_records(_with_body(body, 0, 1))] == [b"k"]
    with pytest.raises(InvalidRecordError, match="bytes follow the batch's 1 records"):
        decode_records(_with_body(body + b"\0\0", 0, 1))
    with pytest.raises(InvalidRecordError, match=r"record 0 .* length of 0"):
        decode_records(_with_body(b"\0" * 64, 0, 1))
    overrun = bytes([body[0] - 2]) + body[1:]  # the declared length one byte short (zigzag: -2 is -1)
    with pytest.raises(InvalidRecordError, match="declares"):
        decode_records(_with_body(overrun, 0, 1))
    negative_headers = body[:-1] + b"\x01"  # header count -1 (zigzag 1)
    with pytest.raises(InvalidRecordError, match="-1 headers"):
        decode_records(_with_body(negative_headers, 0, 1))
