"""build_batch's record encoding (cached varints) against a plain reading of the v2 record format, and
decoded back, over random records: lengths and deltas across the cached range and past it."""

from __future__ import annotations

from dm_broker.log.records import build_batch, decode_records
from hypothesis import given, settings
from hypothesis import strategies as st


def zigzag_varint(value: int) -> bytes:
    value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while value & ~0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def varbytes(data: bytes | None) -> bytes:
    return zigzag_varint(-1) if data is None else zigzag_varint(len(data)) + data


def reference_records(records: list, deltas: list[int]) -> bytes:
    out = b""
    for index, (key, value, headers) in enumerate(records):
        body = b"\x00" + zigzag_varint(deltas[index]) + zigzag_varint(index) + varbytes(key) + varbytes(value)
        body += zigzag_varint(len(headers)) + b"".join(varbytes(k.encode()) + varbytes(v) for k, v in headers)
        out += zigzag_varint(len(body)) + body
    return out


payload = st.one_of(st.none(), st.binary(max_size=40), st.integers(16_380, 16_400).map(lambda n: b"x" * n))
record = st.tuples(payload, payload, st.lists(st.tuples(st.text(max_size=5), payload), max_size=3))


@settings(max_examples=60, deadline=None)
@given(st.lists(record, min_size=1, max_size=6), st.lists(st.integers(0, 40_000), min_size=6, max_size=6))
def test_records_are_encoded_as_the_format_says(records: list, deltas: list[int]) -> None:
    deltas = sorted(deltas)[:len(records)]
    batch = build_batch(records, timestamp_ms=1_000, timestamp_deltas=deltas)
    assert batch[61:] == reference_records(records, deltas)  # after the 61-byte batch header
    decoded = decode_records(batch)
    assert [(r.key, r.value, r.headers, r.timestamp, r.offset) for r in decoded] == [
        (k, v, h, 1_000 + d, i) for i, ((k, v, h), d) in enumerate(zip(records, deltas, strict=False))]
