"""Random and mutated frames never crash the broker; it keeps serving other clients."""

from __future__ import annotations

import datetime
import socket
import struct

import pytest
from dm_broker.protocol.client import encode_request
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wire import batch, fetch_request, produce_request

pytestmark = pytest.mark.timeout(300)

def _more_requests() -> list[bytes]:
    from dm_broker.protocol.build import make, nested
    from dm_broker.protocol.codec import request_class

    md = request_class(3, 12)
    lo = request_class(2, 7)
    dc = request_class(32, 4)
    ofl = request_class(23, 4)
    cp = request_class(37, 3)
    return [
        encode_request(3, 12, 5, make(md, topics=(nested(md, "MetadataRequestTopic")(topic_id=None, name="fuzz"),),
                                      allow_auto_topic_creation=False, include_topic_authorized_operations=False)),
        encode_request(2, 7, 6, make(lo, replica_id=-1, isolation_level=0, topics=(nested(lo, "ListOffsetsTopic")(
            name="fuzz", partitions=(nested(lo, "ListOffsetsPartition")(partition_index=0, timestamp=-3),)),))),
        encode_request(32, 4, 7, make(dc, resources=(nested(dc, "DescribeConfigsResource")(
            resource_type=2, resource_name="fuzz", configuration_keys=None),), include_synonyms=False,
            include_documentation=True)),
        encode_request(23, 4, 8, make(ofl, replica_id=-1, topics=(nested(ofl, "OffsetForLeaderTopic")(
            topic="fuzz", partitions=(nested(ofl, "OffsetForLeaderPartition")(partition=0, leader_epoch=0),)),))),
        encode_request(37, 3, 9, make(cp, topics=(nested(cp, "CreatePartitionsTopic")(
            name="nope", count=2, assignments=None),), timeout=datetime.timedelta(seconds=1),
            validate_only=True)),
    ]


VALID = [
    *_more_requests(),
    encode_request(0, 9, 1, produce_request("fuzz", 0, batch([b"a", b"b"]))),
    encode_request(1, 12, 2, fetch_request("fuzz", 0, 0)),
    encode_request(1, 4, 3, fetch_request("fuzz", 0, 0, version=4)),
    encode_request(0, 3, 4, produce_request("fuzz", 0, batch([b"zz"], codec=1), version=3)),
]


def exchange(port: int, data: bytes) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.settimeout(2)
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
            while s.recv(65536):
                pass
        except OSError:
            pass  # the broker may close the connection: that is a valid answer to garbage


def assert_serving(port: int) -> None:
    frame = struct.pack(">hhih", 18, 0, 99, 1) + b"x"
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(struct.pack(">i", len(frame)) + frame)
        s.settimeout(5)
        head = s.recv(8)
        assert len(head) == 8 and struct.unpack(">i", head[4:8])[0] == 99


@st.composite
def mutated_frames(draw) -> bytes:
    data = bytearray(draw(st.sampled_from(VALID)))
    for _ in range(draw(st.integers(1, 8))):
        if not data:
            break
        op = draw(st.sampled_from(["flip", "set", "cut", "insert"]))
        pos = draw(st.integers(0, len(data) - 1))
        if op == "flip":
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "set":
            data[pos] = draw(st.integers(0, 255))
        elif op == "cut":
            del data[pos : pos + draw(st.integers(1, 16))]
        else:
            data[pos:pos] = draw(st.binary(min_size=1, max_size=16))
    # keep the size prefix consistent half the time so the body parser sees the damage
    if draw(st.booleans()) and len(data) >= 4:
        struct.pack_into(">i", data, 0, len(data) - 4)
    return bytes(data)


@st.composite
def random_frames(draw) -> bytes:
    api_key = draw(st.integers(-5, 80))
    version = draw(st.integers(-2, 20))
    body = draw(st.binary(max_size=300))
    header = struct.pack(">hhi", api_key, version, draw(st.integers(-(2**31), 2**31 - 1)))
    header += draw(st.sampled_from([b"\x00\x01x", b"\xff\xff", b"\x00\x00", b""]))
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


@pytest.fixture(scope="module")
def fuzz_broker(broker):
    exchange(broker.port, VALID[0])  # auto-creates the topic
    return broker


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frame=mutated_frames())
def test_mutated_frames(fuzz_broker, frame):
    exchange(fuzz_broker.port, frame)
    assert fuzz_broker.alive()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frame=random_frames())
def test_random_frames(fuzz_broker, frame):
    exchange(fuzz_broker.port, frame)
    assert fuzz_broker.alive()


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(min_size=1, max_size=2000))
def test_raw_bytes(fuzz_broker, data):
    exchange(fuzz_broker.port, data)
    assert fuzz_broker.alive()


def test_broker_serves_after_fuzzing(fuzz_broker):
    assert_serving(fuzz_broker.port)
    assert "unexpected error" not in fuzz_broker.log_tail(100000), "a handler raised instead of answering"
