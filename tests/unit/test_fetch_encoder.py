"""The hand-written Fetch encoder must produce exactly what kio (Kafka's schemas) decodes."""

from __future__ import annotations

import uuid

import pytest
from dm_broker.log.records import build_batch
from dm_broker.protocol.client import decode_response
from dm_broker.protocol.fetch_encoder import PartitionResult, TopicResult, encode_fetch_response

ALPHA, BETA = uuid.uuid4(), uuid.uuid4()


@pytest.mark.parametrize("version", range(4, 18))
def test_kio_decodes_every_version(version):
    big = build_batch([(b"k", b"v" * 9000, [("h", b"1")])], timestamp_ms=5)
    small = build_batch([(None, b"s", [])], timestamp_ms=6)
    topics = [
        TopicResult("alpha", topic_id=ALPHA.bytes, partitions=[
            PartitionResult(0, 0, 10, 10, 0, big, aborted=None),
            PartitionResult(1, 1, -1, -1, -1, None, aborted=[(7, 3)]),
            PartitionResult(2, 0, 5, 4, 2, small, aborted=[], diverging_epoch=(3, 40), current_leader=(1, 3)),
        ]),
        TopicResult("beta", [], topic_id=BETA.bytes),
    ]
    chunks = encode_fetch_response(version, 42, 0, 0, topics)
    frame = b"".join(bytes(c) for c in chunks)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    correlation, resp = decode_response(1, version, frame[4:])
    assert correlation == 42
    alpha, beta = resp.responses
    if version >= 13:
        assert alpha.topic_id == ALPHA and beta.topic_id == BETA and beta.partitions == ()
    else:
        assert alpha.topic == "alpha" and beta.topic == "beta" and beta.partitions == ()
    p0, p1, p2 = alpha.partitions
    assert (p0.partition_index, p0.high_watermark, bytes(p0.records)) == (0, 10, big)
    assert p1.error_code.value == 1 and p1.records is None
    assert bytes(p2.records) == small and p2.last_stable_offset == 4
    if version >= 5:
        assert p2.log_start_offset == 2
    assert [(a.producer_id, a.first_offset) for a in p1.aborted_transactions] == [(7, 3)]
    if version >= 12:
        assert (p2.diverging_epoch.epoch, p2.diverging_epoch.end_offset) == (3, 40)
        assert (p2.current_leader.leader_id, p2.current_leader.leader_epoch) == (1, 3)


def test_forged_array_length_is_refused_before_kio_allocates():
    import struct

    from dm_broker.protocol.codec import ProtocolError, decode_body, request_class

    # Metadata v9 (flexible): topics array claiming 2^31 elements in a 6-byte body
    body = b"\x80\x80\x80\x80\x08" + b"\x00"
    with pytest.raises(ProtocolError, match="array claims"):
        decode_body(body, 0, request_class(3, 9))
    # Produce v3 (legacy encoding): topic_data int32 length of 0x7fffffff
    legacy = struct.pack(">hhi", -1, 1, 1000) + struct.pack(">i", 0x7FFFFFFF)
    with pytest.raises(ProtocolError):
        decode_body(legacy, 0, request_class(0, 3))


def test_bounds_plan_covers_every_supported_request():
    from dm_broker.protocol import bounds
    from dm_broker.protocol.apis import SPECS
    from dm_broker.protocol.codec import request_class, response_class

    for spec in SPECS:
        for version in range(spec.min_version, spec.max_version + 1):
            assert isinstance(bounds.plan(request_class(spec.key, version)), tuple)
            assert isinstance(bounds.plan(response_class(spec.key, version)), tuple)


def test_null_array_in_a_non_nullable_field_is_refused():
    import struct

    from dm_broker.protocol.codec import ProtocolError, decode_body, request_class

    # Produce v3: transactional_id null, acks, timeout, then topic_data = null (-1), not allowed
    body = struct.pack(">hhii", -1, 1, 1000, -1)
    with pytest.raises(ProtocolError, match="null array"):
        decode_body(body, 0, request_class(0, 3))
    # Metadata v4: topics may be null (all topics)
    assert decode_body(struct.pack(">ib", -1, 1), 0, request_class(3, 4))[0].topics is None
