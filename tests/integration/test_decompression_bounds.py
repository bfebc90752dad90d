"""Compressed batches cost the broker what they inflate to, not what they weigh, so what they may inflate to is
bounded (MAX_DECOMPRESSED_BYTES, 32 MiB) and every path that inflates one does it off the event loop, one
batch at a time (issue 65). Measured on main before: a 3.9 KB zstd batch of 120 MiB was accepted (broker RSS
72 → 345 MB); recompressing it for a gzip topic took 866 ms of the loop per produce; a ListOffsets by timestamp
inflated it on the loop (859 ms per partition entry, 4.59 s for the partition named ten times) after reading
every batch to the log end into memory. Each test asserts with the loop watchdog that the loop was never late
by over 100 ms of the broker's own doing."""

from __future__ import annotations

import datetime
import socket

import cramjam
import pytest
from dm_broker.log.records import MAX_DECOMPRESSED_BYTES, parse_header, with_payload
from dm_broker.protocol.build import make, nested
from dm_broker.protocol.client import decode_response, encode_request
from dm_broker.protocol.codec import request_class
from harness import BrokerProcess, free_port
from hostile import Stalls, exchange
from kio.schema.errors import ErrorCode
from test_fuzz_auth import rss_mb
from wire import batch, create_topics_request, produce_request

pytestmark = pytest.mark.timeout(300)
MiB = 1 << 20


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory):
    rest_port = free_port()
    with BrokerProcess(tmp_path_factory.mktemp("inflate") / "data",
                       {"http.listeners": f"HTTP://127.0.0.1:{rest_port}",
                        "event.loop.stall.report.ms": 100}) as broker:  # a stall's stack in the log
        broker.rest = f"http://127.0.0.1:{rest_port}"
        yield broker
        assert broker.alive(), broker.log_tail()


def zstd_of_zeros(inflated: int) -> bytes:
    """One zstd-compressed batch of one record whose value is `inflated` bytes of zeros (a few KB on the wire)."""
    base = parse_header(batch([b"v"], codec=4))
    return batch([b"\0" * inflated], codec=4) if inflated < 64 * MiB else with_payload(
        base, bytes(cramjam.zstd.compress(b"\0" * inflated, level=19)), base.attributes, 1)


def call(port: int, api_key: int, version: int, body: object, timeout: float = 120) -> object:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        frame = exchange(sock, encode_request(api_key, version, 1, body))
    assert frame is not None, "the broker closed the connection"
    return decode_response(api_key, version, frame)[1]


def create(broker: BrokerProcess, name: str, **configs: str) -> None:
    answer = call(broker.port, 19, 7, create_topics_request(name, configs=configs))
    assert answer.topics[0].error_code == ErrorCode.none, answer


def produce(broker: BrokerProcess, topic: str, records: bytes) -> object:
    return call(broker.port, 0, 9, produce_request(topic, 0, records)).responses[0].partition_responses[0]


def test_a_batch_inflating_past_the_bound_is_refused_without_growing_the_broker(broker):
    create(broker, "bomb")
    bomb = zstd_of_zeros(120 * MiB)
    stalls, before = Stalls.of(broker), rss_mb(broker.proc.pid)
    answer = produce(broker, "bomb", bomb)
    grown = rss_mb(broker.proc.pid) - before
    print(f"{len(bomb):,} bytes of zstd that hold 120 MiB: {answer.error_code.name}, RSS +{grown:.0f} MB")
    assert answer.error_code == ErrorCode.invalid_record
    assert f"more than {MAX_DECOMPRESSED_BYTES} bytes" in answer.error_message
    assert grown < 100, f"the broker grew {grown:.0f} MB refusing it"
    assert stalls.since() == {}


def test_recompressing_for_the_topic_is_judged_by_the_inflated_size(broker):
    """A gzip topic, a zstd batch of a few KB that inflates to 30 MiB: recompressed off the loop."""
    create(broker, "gzipped", **{"compression.type": "gzip"})
    stalls = Stalls.of(broker)
    for _ in range(3):
        assert produce(broker, "gzipped", zstd_of_zeros(30 * MiB)).error_code == ErrorCode.none
    assert stalls.since() == {}


def list_offsets(broker: BrokerProcess, topic: str, timestamp: int, times: int) -> list:
    cls = request_class(2, 7)
    entry = make(nested(cls, "ListOffsetsPartition"), partition_index=0, timestamp=timestamp, current_leader_epoch=-1)
    request = make(cls, replica_id=-1, isolation_level=0, timeout=datetime.timedelta(seconds=30),
                   topics=(make(nested(cls, "ListOffsetsTopic"), name=topic, partitions=(entry,) * times),))
    return list(call(broker.port, 2, 7, request).topics[0].partitions)


def test_list_offsets_by_timestamp_reads_one_batch_off_the_loop(broker):
    """The partition holds three batches that inflate to 30 MiB each: a lookup by timestamp reads the one batch
    the time index and the batch headers point to, and inflates it off the loop; the same partition named ten
    times is Kafka's INVALID_REQUEST for each entry, with no work done."""
    create(broker, "stamped", **{"compression.type": "producer"})
    for _ in range(3):
        assert produce(broker, "stamped", zstd_of_zeros(30 * MiB)).error_code == ErrorCode.none
    stalls = Stalls.of(broker)
    [found] = list_offsets(broker, "stamped", 1, 1)
    assert (found.error_code, found.offset) == (ErrorCode.none, 0)
    [latest] = list_offsets(broker, "stamped", -3, 1)  # MAX_TIMESTAMP: one batch too
    assert latest.error_code == ErrorCode.none and latest.offset >= 0
    assert [p.error_code for p in list_offsets(broker, "stamped", 1, 10)] == [ErrorCode.invalid_request] * 10
    assert stalls.since() == {}


def test_a_rest_read_keeps_to_max_bytes_as_a_kafka_fetch_does(broker):
    """A REST consumer instance reading with max_bytes=1,000,000: a record larger than that alone comes as
    the whole answer (as a Kafka fetch always returns its first batch, KIP-74, so the reader moves on), and
    otherwise an answer stops before the record that would take it past max_bytes. Before, one read answered
    167,772,259 bytes to max_bytes=1000000."""
    import base64

    import requests

    create(broker, "big-reads", **{"compression.type": "producer"})
    assert produce(broker, "big-reads", zstd_of_zeros(30 * MiB)).error_code == ErrorCode.none
    for _ in range(3):
        assert produce(broker, "big-reads", batch([b"x" * 400_000])).error_code == ErrorCode.none
    url = broker.rest
    v2 = {"Content-Type": "application/vnd.kafka.v2+json"}
    created = requests.post(f"{url}/consumers/big-readers", json={"name": "one", "auto.offset.reset": "earliest"},
                            headers=v2, timeout=30)
    assert created.status_code == 200, created.text
    base = created.json()["base_uri"]
    assert requests.post(base + "/subscription", json={"topics": ["big-reads"]}, headers=v2,
                         timeout=30).status_code == 204
    stalls = Stalls.of(broker)
    sizes: list[list[int]] = []
    while sum(map(len, sizes)) < 4:
        answer = requests.get(base + "/records", params={"max_bytes": 1_000_000, "timeout": 5000},
                              headers={"Accept": "application/vnd.kafka.binary.v2+json"}, timeout=60)
        assert answer.status_code == 200, answer.text
        sizes.append([len(base64.b64decode(r["value"])) for r in answer.json()])
    sizes = [s for s in sizes if s]
    print(f"answers' record sizes: {sizes}")
    assert sizes[0] == [30 * MiB]
    assert all(sum(s) <= 1_000_000 for s in sizes[1:]) and sum(map(len, sizes[1:])) == 3
    assert stalls.since() == {}
    requests.delete(base, headers=v2, timeout=30)
