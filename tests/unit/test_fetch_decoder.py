"""The replica fetcher's Fetch v12 decoder must read what Kafka's schemas (kio) read, and refuse
a malformed response instead of reading outside it."""

from __future__ import annotations

import pytest
from dm_broker.log.records import build_batch
from dm_broker.protocol.bounds import BoundsError
from dm_broker.protocol.client import decode_response
from dm_broker.protocol.fetch_decoder import VERSION, decode_fetch_response
from dm_broker.protocol.fetch_encoder import PartitionResult, TopicResult, encode_fetch_response
from hypothesis import given, settings
from hypothesis import strategies as st


def frame_of(topics: list[TopicResult], correlation_id: int = 42, error: int = 0) -> bytes:
    return b"".join(bytes(c) for c in encode_fetch_response(VERSION, correlation_id, error, 0, topics))[4:]


partitions = st.builds(
    PartitionResult,
    index=st.integers(0, 2**31 - 1), error_code=st.sampled_from([0, 1, 6, 74]),
    high_watermark=st.integers(-1, 2**62), last_stable_offset=st.integers(-1, 2**62),
    log_start_offset=st.integers(-1, 2**62),
    records=st.one_of(st.none(), st.binary(max_size=6000)),
    aborted=st.one_of(st.none(), st.lists(st.tuples(st.integers(0, 2**62), st.integers(0, 2**62)), max_size=3)),
    preferred_read_replica=st.integers(-1, 5),
    diverging_epoch=st.one_of(st.none(), st.tuples(st.integers(0, 100), st.integers(0, 2**40))),
    current_leader=st.one_of(st.none(), st.tuples(st.integers(0, 100), st.integers(0, 100))),
)
topics = st.lists(st.builds(TopicResult, name=st.text(min_size=1, max_size=20),
                            partitions=st.lists(partitions, max_size=4)), max_size=3)


@settings(max_examples=200, deadline=None)
@given(topics=topics, correlation_id=st.integers(-(2**31), 2**31 - 1))
def test_reads_what_kio_reads(topics, correlation_id):
    frame = frame_of(topics, correlation_id)
    got_correlation, error, _, decoded = decode_fetch_response(frame)
    decoded = list(decoded)
    kio_correlation, kio = decode_response(1, VERSION, frame)
    assert got_correlation == kio_correlation == correlation_id and error == kio.error_code.value
    expected = [(t.topic, p) for t in kio.responses for p in t.partitions]
    assert len(decoded) == len(expected)
    for (topic, mine), (kio_topic, theirs) in zip(decoded, expected, strict=True):
        assert topic == kio_topic
        assert (mine.index, mine.error_code, mine.high_watermark, mine.last_stable_offset, mine.log_start_offset) == (
            theirs.partition_index, theirs.error_code.value, theirs.high_watermark, theirs.last_stable_offset,
            theirs.log_start_offset)
        assert (None if mine.records is None else bytes(mine.records)) == theirs.records
        expected_aborted = (None if theirs.aborted_transactions is None else
                            [(a.producer_id, a.first_offset) for a in theirs.aborted_transactions])
        assert mine.aborted == expected_aborted


def test_records_are_views_into_the_frame_not_copies():
    batch = build_batch([(b"k", b"v" * 5000, [])], timestamp_ms=1)
    frame = bytearray(frame_of([TopicResult("t", [PartitionResult(0, 0, 1, 1, 0, batch)])]))
    _, _, _, decoded = decode_fetch_response(memoryview(frame))
    (_, part), = decoded
    assert isinstance(part.records, memoryview) and part.records.obj is frame
    assert bytes(part.records) == batch


def test_every_truncation_is_refused():
    batch = build_batch([(b"k", b"value", [("h", b"1")])], timestamp_ms=1)
    frame = frame_of([TopicResult("topic", [PartitionResult(0, 0, 1, 1, 0, batch, aborted=[(1, 2)],
                                                            diverging_epoch=(1, 1))])])
    for cut in range(len(frame)):
        with pytest.raises(BoundsError):
            _, _, _, decoded = decode_fetch_response(frame[:cut])
            list(decoded)


def test_forged_lengths_are_refused():
    batch = build_batch([(None, b"x", [])], timestamp_ms=1)
    frame = bytearray(frame_of([TopicResult("t", [PartitionResult(0, 0, 1, 1, 0, batch)])]))
    at = frame.index(batch) - 1  # the records' compact length (one byte for this size)
    assert len(frame) - at < 0x7F
    frame[at] = 0x7F  # claims 126 bytes, more than the frame has left
    with pytest.raises(BoundsError, match="runs past"):
        list(decode_fetch_response(bytes(frame))[3])
