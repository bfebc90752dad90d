"""check_records (ADR 0048): what a producer's batch must be, record by record, before it is appended."""

from __future__ import annotations

import random

import pytest
from dm_broker.log.record_check import check_records
from dm_broker.log.records import (
    HEADER_SIZE,
    InvalidRecordError,
    build_batch,
    compress,
    decode_records,
    parse_header,
    renumbered,
    set_max_timestamp,
    validate_batches,
    with_payload,
)
from hypothesis import given, settings
from hypothesis import strategies as st

CODECS = [0, 1, 2, 3, 4]


def _with_records(body: bytes, count: int, codec: int = 0) -> bytes:
    """A batch claiming `count` records around `body` (uncompressed record bytes), CRC right."""
    base = parse_header(build_batch([(b"k", b"v", [])] * count, timestamp_ms=1, codec=codec))
    return with_payload(base, compress(codec, body), base.attributes, count)


def _body(records: list) -> bytes:
    return bytes(build_batch(records, timestamp_ms=1)[HEADER_SIZE:])


@pytest.mark.parametrize("codec", CODECS)
def test_well_formed_batches_pass(codec):
    records = [(b"k%d" % i, b"v" * i, [("h", b"%d" % i), ("n", None)]) for i in range(50)] + [(None, None, [])]
    check_records(build_batch(records, timestamp_ms=1_000, codec=codec, producer_id=7, producer_epoch=1,
                              base_sequence=3))
    check_records(memoryview(bytearray(build_batch(records, timestamp_ms=1, codec=codec))))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.none() | st.binary(max_size=300), st.none() | st.binary(max_size=300),
                          st.lists(st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=20)), max_size=3)),
                min_size=1, max_size=30),
       st.sampled_from(CODECS))
def test_whatever_dm_builds_passes(records, codec):
    check_records(build_batch(records, timestamp_ms=1_000, codec=codec))


@pytest.mark.parametrize("codec", CODECS)
def test_malformed_records_are_refused(codec):
    body = _body([(b"k", b"v", []), (None, b"w" * 200, [("h", b"x")])])
    check_records(_with_records(body, 2, codec))
    cases = {
        "a record longer than its fields": bytes([body[0] + 2]) + body[1:] + b"\0",
        "a record shorter than its fields": bytes([body[0] - 2]) + body[1:],
        "bytes after the last record": body + b"\0\0",
        "the last record cut short": body[:-3],
        "a negative header count": body[:-5] + b"\x01" + body[-4:],  # count, "h", "x": 1 -> -1
    }
    for why, bad in cases.items():
        with pytest.raises(InvalidRecordError):
            check_records(_with_records(bad, 2, codec))
            pytest.fail(why)
    with pytest.raises(InvalidRecordError):  # three records claimed, two present
        check_records(_with_records(body, 3, codec))


def test_offset_deltas_run_from_zero():
    """A consumer takes a record's offset from its delta: deltas that do not run 0, 1, 2, … would show
    offsets the log does not have. Kafka refuses them in an uncompressed batch and renumbers a compressed
    batch's records, so check_records says a compressed batch needs it."""
    first, second = _body([(b"a", b"1", [])]), _body([(b"b", b"2", [])])
    with pytest.raises(InvalidRecordError, match="offset delta 0, not 1"):
        check_records(_with_records(first + second, 2))  # both records say delta 0
    for codec in CODECS[1:]:
        assert check_records(_with_records(first + second, 2, codec)).renumber
        assert not check_records(build_batch([(b"a", b"1", [])] * 2, timestamp_ms=1, codec=codec)).renumber


@pytest.mark.parametrize("codec", CODECS[1:])
def test_a_compressed_batch_is_renumbered_and_nothing_else_changes(codec):
    records = [(b"k%d" % i, b"v%d" % i, [("h", b"%d" % i)]) for i in range(3)]
    good = build_batch(records, timestamp_ms=1_000, timestamp_deltas=[0, 5, 2], codec=codec, producer_id=9,
                       producer_epoch=2, base_sequence=40)
    body = b"".join(_body([r]) for r in records)  # three records whose deltas all say 0
    bad = with_payload(parse_header(good), compress(codec, body), parse_header(good).attributes, 3)
    fixed = renumbered(bad)
    assert not check_records(fixed).renumber
    got, want = parse_header(fixed), parse_header(bad)
    assert (got.producer_id, got.producer_epoch, got.base_sequence, got.records_count, got.compression,
            got.last_offset_delta) == (9, 2, 40, 3, codec, 2)
    assert got.base_timestamp == want.base_timestamp and got.max_timestamp == want.max_timestamp
    assert [(r.offset, r.key, r.value, r.headers) for r in decode_records(fixed)] == \
        [(i, b"k%d" % i, b"v%d" % i, [("h", b"%d" % i)]) for i in range(3)]
    assert [r.timestamp for r in decode_records(fixed)] == [r.timestamp for r in decode_records(bad)]


def test_a_header_key_that_is_not_utf8_is_taken_as_kafka_takes_it():
    """Kafka reads a header key as a Java String (malformed bytes replaced); aiokafka's reader raises: dm's
    own decoder then decides."""
    good = build_batch([(b"k", b"v", [("ab", b"x")])], timestamp_ms=1)
    bad = bytearray(good[HEADER_SIZE:])
    at = bad.index(b"ab")
    bad[at : at + 2] = b"\xff\xfe"
    check_records(_with_records(bytes(bad), 1))
    assert decode_records(_with_records(bytes(bad), 1))[0].headers == [("\ufffd\ufffd", b"x")]


def test_a_zip_bomb_is_refused_within_the_bound():
    import cramjam

    chunk = bytes(cramjam.zstd.compress(b"\0" * (16 << 20), level=19))
    base = parse_header(build_batch([(b"k", b"v", [])], timestamp_ms=1, codec=4))
    with pytest.raises(InvalidRecordError, match="decompress to more than"):
        check_records(with_payload(base, chunk * 128, base.attributes, 1))


def test_random_damage_is_refused_or_decodable_never_a_crash():
    """Bytes changed, cut or added anywhere in the records, with the CRC made right again: the check
    either refuses the batch with InvalidRecordError or takes one that dm's strict decoder can read too
    (apart from lengths below -1, which Kafka and aiokafka take as null). Batches whose last byte has the
    varint continuation bit are read from a copy with slack after it, the others where they are: both
    kinds are among the cases."""
    rng = random.Random(48)
    records = [(f"key-{i}".encode() if i % 3 else None, b"value" * (i % 7), [(f"h{j}", b"x" * j) for j in range(i % 3)])
               for i in range(12)]
    body = _body(records)
    for _ in range(3000):
        damaged = bytearray(body)
        for _ in range(rng.randint(1, 3)):
            kind = rng.random()
            at = rng.randrange(len(damaged))
            if kind < 0.5:
                damaged[at] = rng.randrange(256)
            elif kind < 0.7:
                del damaged[at:]
                damaged += bytes([0x80 | rng.randrange(128)] * rng.randint(1, 12))
            elif kind < 0.85:
                damaged[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
            else:
                del damaged[at : at + rng.randint(1, 4)]
        batch = _with_records(bytes(damaged), len(records))
        try:
            check_records(batch)
        except InvalidRecordError:
            continue
        try:
            decode_records(batch)
        except InvalidRecordError as exc:
            assert "a record field has a length of -" in str(exc), exc


def test_the_largest_record_timestamp_is_returned_whatever_the_header_says():
    """Kafka writes the records' largest timestamp into the batch; the produce handler does the same with
    what the check returns."""
    batch = bytearray(build_batch([(b"k", b"v", [])] * 3, timestamp_ms=1_000))
    assert check_records(bytes(batch)).largest_timestamp == 1_000
    set_max_timestamp(batch, 0, 4_102_444_800_000)  # a producer's header claiming the year 2100
    [header] = validate_batches(batch, 1 << 20)  # the CRC was computed again
    assert header.max_timestamp == 4_102_444_800_000
    assert check_records(bytes(batch)).largest_timestamp == 1_000


def test_decompression_into_a_buffer_without_room_grows_it():
    from dm_broker.log.records import decompress_into

    data = compress(3, b"x" * 100_000)
    out, end = decompress_into(3, data, bytearray(10), 8, 2)  # no room at all at first
    assert bytes(out[8:end]) == b"x" * 100_000 and len(out) - end >= 2


def test_a_limit_stops_decompression_with_its_own_error():
    """The produce handler checks a batch on the event loop within a small limit and, past it, in a thread
    with the full bound: the two refusals must be told apart."""
    from dm_broker.log.records import DecompressedTooLargeError

    big = build_batch([(None, b"x" * 1024, [])] * 2048, timestamp_ms=1, codec=3)  # 2 MiB of records
    with pytest.raises(DecompressedTooLargeError):
        check_records(big, 1 << 20)
    assert check_records(big).largest_timestamp == 1


@pytest.mark.parametrize("codec", CODECS)
def test_details_give_each_timestamp_and_the_keyless_records(codec):
    """Compacted topics (keys) and timestamp windows take what they need from the same walk."""
    batch = build_batch([(b"k", b"v", []), (None, b"w", []), (b"k", None, [])], timestamp_ms=5, codec=codec)
    summary = check_records(batch, details=True)
    assert (summary.largest_timestamp, summary.timestamps, summary.keyless) == (5, [5, 5, 5], [1])
    assert check_records(batch).keyless == []  # not collected unless asked for
