"""build_batch's record encoding (cached varints) against a plain reading of the v2 record format, and
decoded back, over random records: lengths and deltas across the cached range and past it."""

from __future__ import annotations

from dm_broker.log.records import build_batch, build_keyless_batch, decode_records
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


value = st.one_of(st.none(), st.binary(max_size=40), st.sampled_from([b"", b"v" * 63, b"v" * 64, b"x" * 16_390]))
same_size = st.integers(0, 200).flatmap(lambda n: st.lists(st.just(b"s" * n), min_size=1, max_size=300))


def runs_of(count: int) -> st.SearchStrategy[list[tuple[int, int]]]:
    """(count, timestamp delta) runs that add up to `count`: small deltas, and ones past the varint table."""
    return st.lists(st.tuples(st.integers(1, count), st.sampled_from([0, 1, 2, 63, 64, 16_383, 70_000])),
                    min_size=1, max_size=4).map(lambda runs: _fitted(runs, count))


def _fitted(runs: list[tuple[int, int]], count: int) -> list[tuple[int, int]]:
    fitted, left = [], count
    for n, delta in runs:
        if left:
            fitted.append((min(n, left), delta))
            left -= min(n, left)
    if left:
        fitted.append((left, fitted[-1][1]))
    return fitted


@settings(max_examples=80, deadline=None)
@given(st.one_of(st.lists(value, min_size=1, max_size=80), same_size), st.data())
def test_keyless_batches_are_build_batchs_bytes(values: list, data: st.DataObject) -> None:
    """The REST Proxy's keyless encoder (a table of heads per value length) writes exactly what build_batch
    writes for the same records: values absent, empty, of one length or of many; one timestamp or runs."""
    runs = data.draw(st.one_of(st.none(), runs_of(len(values))))
    deltas = None if runs is None else [delta for n, delta in runs for _ in range(n)]
    expected = build_batch([(None, v, ()) for v in values], timestamp_ms=5_000, timestamp_deltas=deltas)
    assert build_keyless_batch(values, timestamp_ms=5_000, runs=runs) == expected


def test_keyless_batches_past_the_offset_delta_table() -> None:
    """16,383 records and more: offset deltas past the varint table, encoded as build_batch does."""
    values = [b"r"] * 16_400
    assert build_keyless_batch(values, timestamp_ms=1) == build_batch([(None, b"r", ())] * 16_400, timestamp_ms=1)
