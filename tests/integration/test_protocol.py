"""Protocol behaviour at the wire level: versions, errors, idempotence, bad input."""

from __future__ import annotations

import asyncio
import datetime
import struct

import pytest
from dm_broker.log.records import decode_records, iter_batches
from dm_broker.protocol.build import make
from dm_broker.protocol.client import KafkaConnection, decode_response
from dm_broker.protocol.codec import request_class
from kio.schema.errors import ErrorCode
from txn_wire import init_producer_id
from wire import batch, create_topics_request, fetch_request, produce_request, raw_frame

pytestmark = pytest.mark.timeout(60)


async def connect(broker) -> KafkaConnection:
    return await KafkaConnection.open("127.0.0.1", broker.port)


async def create(conn: KafkaConnection, name: str, partitions: int = 1, **configs: str) -> None:
    resp = await conn.request(create_topics_request(name, partitions, configs))
    assert resp.topics[0].error_code == ErrorCode.none, resp.topics[0].error_message


async def still_serving(broker) -> None:
    conn = await connect(broker)
    resp = await conn.request(make(request_class(18, 3), client_software_name="t", client_software_version="1"))
    assert resp.error_code == ErrorCode.none
    await conn.close()


async def test_api_versions_lists_apis_and_keeps_produce_v0_advertised(broker):
    conn = await connect(broker)
    resp = await conn.request(make(request_class(18, 3), client_software_name="t", client_software_version="1"))
    versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert versions[0][0] == 0 and versions[0][1] >= 9
    assert versions[1] == (4, 17)  # Kafka 4.0's (tests/integration/test_versions.py compares them all)
    assert {2, 3, 18, 19, 20, 22, 23, 32, 37, 60} <= set(versions)
    await conn.close()


async def test_api_versions_newer_than_supported_gets_v0_error_35(broker):
    conn = await connect(broker)
    # ApiVersions v99: the broker answers in v0 with UNSUPPORTED_VERSION and its ranges.
    await conn.send_raw(raw_frame(18, 99, 7, b""))
    frame = await conn.read_frame()
    correlation, resp = decode_response(18, 0, frame)
    assert correlation == 7
    assert resp.error_code == ErrorCode.unsupported_version
    assert any(k.api_key == 0 for k in resp.api_keys)
    await conn.close()


async def test_removed_produce_version_closes_only_that_connection(broker):
    conn = await connect(broker)
    await conn.send_raw(raw_frame(0, 2, 1, b"\x00\x01\x00\x00\x03\xe8\x00\x00\x00\x00"))
    with pytest.raises((asyncio.IncompleteReadError, ConnectionError)):
        await conn.read_frame()
    await still_serving(broker)


async def test_unknown_api_key_and_garbage_close_connection(broker):
    for frame in (raw_frame(999, 0, 1, b""), struct.pack(">i", 3) + b"abc", raw_frame(3, 12, 1, b"\xff" * 7)):
        conn = await connect(broker)
        await conn.send_raw(frame)
        with pytest.raises((asyncio.IncompleteReadError, ConnectionError)):
            await conn.read_frame()
        await conn.close()
    await still_serving(broker)


async def test_oversized_request_is_refused_without_reading_it(broker):
    conn = await connect(broker)
    await conn.send_raw(struct.pack(">i", 200 * 1024 * 1024) + b"\x00\x03")
    with pytest.raises((asyncio.IncompleteReadError, ConnectionError)):
        await conn.read_frame()
    await still_serving(broker)


async def test_crc_mismatch_is_corrupt_message_and_nothing_is_written(broker, topic_name):
    conn = await connect(broker)
    await create(conn, topic_name)
    data = bytearray(batch([b"hello"]))
    data[-1] ^= 0xFF
    resp = await conn.request(produce_request(topic_name, 0, bytes(data)))
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.corrupt_message
    fetched = await conn.request(fetch_request(topic_name, 0, 0))
    assert fetched.responses[0].partitions[0].high_watermark == 0
    await conn.close()


async def test_truncated_batch_is_invalid_record(broker, topic_name):
    conn = await connect(broker)
    await create(conn, topic_name)
    data = batch([b"hello", b"world"])[:-3]
    resp = await conn.request(produce_request(topic_name, 0, data))
    assert resp.responses[0].partition_responses[0].error_code in (ErrorCode.invalid_record,
                                                                   ErrorCode.corrupt_message)
    await conn.close()


async def test_unknown_topic_and_partition(broker, topic_name):
    conn = await connect(broker)
    await create(conn, topic_name, 1)
    resp = await conn.request(produce_request(topic_name, 5, batch([b"x"])))
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.unknown_topic_or_partition
    resp = await conn.request(fetch_request("no-such-topic-" + topic_name, 0, 0))
    assert resp.responses[0].partitions[0].error_code == ErrorCode.unknown_topic_or_partition
    await conn.close()


async def test_message_too_large(broker, topic_name):
    conn = await connect(broker)
    await create(conn, topic_name, 1, **{"max.message.bytes": "1000"})
    resp = await conn.request(produce_request(topic_name, 0, batch([b"x" * 2000])))
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.message_too_large
    await conn.close()


async def test_invalid_acks(broker, topic_name):
    conn = await connect(broker)
    await create(conn, topic_name)
    resp = await conn.request(produce_request(topic_name, 0, batch([b"x"]), acks=2))
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.invalid_required_acks
    await conn.close()


async def test_idempotent_retry_is_deduplicated(broker, topic_name):
    conn = await connect(broker)
    await create(conn, topic_name)
    pid_resp = await conn.request(make(request_class(22, 4), transactional_id=None,
                                       transaction_timeout=datetime.timedelta(seconds=60),
                                       producer_id=-1, producer_epoch=-1))
    pid, epoch = pid_resp.producer_id, pid_resp.producer_epoch
    first = batch([b"a", b"b"], pid, epoch, 0)
    r1 = await conn.request(produce_request(topic_name, 0, first))
    r2 = await conn.request(produce_request(topic_name, 0, first))  # the retry
    p1, p2 = r1.responses[0].partition_responses[0], r2.responses[0].partition_responses[0]
    assert p1.error_code == p2.error_code == ErrorCode.none
    assert p1.base_offset == p2.base_offset == 0
    # a gap in sequence numbers is refused
    gap = await conn.request(produce_request(topic_name, 0, batch([b"c"], pid, epoch, 5)))
    assert gap.responses[0].partition_responses[0].error_code == ErrorCode.out_of_order_sequence_number
    nxt = await conn.request(produce_request(topic_name, 0, batch([b"c"], pid, epoch, 2)))
    assert nxt.responses[0].partition_responses[0].base_offset == 2
    # an older epoch is fenced
    old = await conn.request(produce_request(topic_name, 0, batch([b"d"], pid, epoch - 1 if epoch else -2, 0)))
    if epoch > 0:
        assert old.responses[0].partition_responses[0].error_code == ErrorCode.invalid_producer_epoch
    fetched = await conn.request(fetch_request(topic_name, 0, 0))
    data = fetched.responses[0].partitions[0].records
    values = [r.value for _, h in iter_batches(data) for r in decode_records(data[_ : _ + h.size])]
    assert values[:3] == [b"a", b"b", b"c"]
    await conn.close()


async def test_an_idempotent_producer_naming_a_producer_id_gets_a_new_one(broker, topic_name):
    """Without a transactional id, InitProducerId answers a new producer id whatever id and epoch the
    request names, as Kafka does. @platformatic/kafka names producer 0 epoch 0 in every first request;
    dm used to bump the named epoch, so two such producers shared producer 0, and the second one's first
    batch (sequence 0, like the first one's) was acknowledged as a duplicate and never written."""
    conn = await connect(broker)
    await create(conn, topic_name)
    answers = [await conn.request(init_producer_id(None, producer_id=0, epoch=0)) for _ in range(2)]
    answers.append(await conn.request(init_producer_id(None)))
    assert [a.error_code for a in answers] == [ErrorCode.none] * 3
    assert len({a.producer_id for a in answers}) == 3 and {a.producer_epoch for a in answers} == {0}
    offsets = []
    for n, answer in enumerate(answers[:2]):
        resp = await conn.request(produce_request(topic_name, 0, batch([b"%d" % n] * 3, answer.producer_id,
                                                                        answer.producer_epoch, 0)))
        part = resp.responses[0].partition_responses[0]
        assert part.error_code == ErrorCode.none
        offsets.append(part.base_offset)
    assert offsets == [0, 3]
    fetched = await conn.request(fetch_request(topic_name, 0, 0))
    data = fetched.responses[0].partitions[0].records
    values = [r.value for _, h in iter_batches(data) for r in decode_records(data[_ : _ + h.size])]
    assert values == [b"0"] * 3 + [b"1"] * 3
    await conn.close()


@pytest.mark.parametrize("transactional_id", [None, "half-named"])
async def test_init_producer_id_naming_an_id_without_an_epoch_is_invalid(broker, transactional_id):
    conn = await connect(broker)
    for producer_id, epoch in ((-1, 0), (7, -1)):
        answer = await conn.request(init_producer_id(transactional_id, producer_id=producer_id, epoch=epoch))
        assert (answer.error_code, answer.producer_id) == (ErrorCode.invalid_request, -1)
    await conn.close()


async def test_fetch_long_poll_waits_for_data(broker, topic_name):
    conn = await connect(broker)
    await create(conn, topic_name)
    poller = await connect(broker)
    fetch = asyncio.create_task(poller.request(fetch_request(topic_name, 0, 0, max_wait_ms=5000, min_bytes=1)))
    await asyncio.sleep(0.3)
    assert not fetch.done()
    await conn.request(produce_request(topic_name, 0, batch([b"wake"])))
    resp = await asyncio.wait_for(fetch, 3)
    assert resp.responses[0].partitions[0].records
    # and without data, max_wait bounds the wait
    started = asyncio.get_running_loop().time()
    resp = await poller.request(fetch_request(topic_name, 0, 1, max_wait_ms=300, min_bytes=1))
    assert asyncio.get_running_loop().time() - started >= 0.25
    assert not resp.responses[0].partitions[0].records
    out_of_range = await poller.request(fetch_request(topic_name, 0, 99))
    assert out_of_range.responses[0].partitions[0].error_code == ErrorCode.offset_out_of_range
    await conn.close()
    await poller.close()


async def test_pipelined_requests_are_answered_in_order(broker, topic_name):
    conn = await connect(broker)
    await create(conn, topic_name)
    from dm_broker.protocol.client import encode_request

    frames = b"".join(encode_request(0, 9, i, produce_request(topic_name, 0, batch([b"%d" % i]))) for i in range(50))
    await conn.send_raw(frames)
    seen = []
    for _ in range(50):
        correlation, resp = decode_response(0, 9, await conn.read_frame())
        seen.append((correlation, resp.responses[0].partition_responses[0].base_offset))
    assert seen == [(i, i) for i in range(50)]
    await conn.close()


async def test_acks_zero_gets_no_response(broker, topic_name):
    conn = await connect(broker)
    await create(conn, topic_name)
    from dm_broker.protocol.client import encode_request

    await conn.send_raw(encode_request(0, 9, 1, produce_request(topic_name, 0, batch([b"fire"]), acks=0)))
    await conn.send_raw(encode_request(0, 9, 2, produce_request(topic_name, 0, batch([b"ack"]), acks=1)))
    correlation, resp = decode_response(0, 9, await conn.read_frame())
    assert correlation == 2
    assert resp.responses[0].partition_responses[0].base_offset == 1
    await conn.close()


async def test_offset_for_leader_epoch(broker, topic_name):
    conn = await connect(broker)
    await create(conn, topic_name)
    for i in range(3):
        await conn.request(produce_request(topic_name, 0, batch([b"%d" % i])))
    cls = request_class(23, 4)
    from dm_broker.protocol.build import nested

    def req(epoch: int, current: int = -1):
        return make(cls, replica_id=-1, topics=(nested(cls, "OffsetForLeaderTopic")(
            topic=topic_name, partitions=(nested(cls, "OffsetForLeaderPartition")(
                partition=0, current_leader_epoch=current, leader_epoch=epoch),)),))

    resp = await conn.request(req(0))
    p = resp.topics[0].partitions[0]
    assert (p.error_code, p.leader_epoch, p.end_offset) == (ErrorCode.none, 0, 3)
    fenced = await conn.request(req(0, current=7))
    assert fenced.topics[0].partitions[0].error_code == ErrorCode.unknown_leader_epoch
    await conn.close()


def test_describe_cluster_and_create_partitions(broker, topic_name):
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    cluster = admin.describe_cluster().result(10)
    assert [n.id for n in cluster.nodes] == [0] and cluster.controller.id == 0 and cluster.cluster_id
    admin.create_topics([NewTopic(topic_name, 2, 1)])[topic_name].result(10)
    admin.create_partitions([NewPartitions(topic_name, 5)])[topic_name].result(10)
    assert len(admin.list_topics(topic_name, timeout=10).topics[topic_name].partitions) == 5
    with pytest.raises(Exception, match=r"(?i)partition"):
        admin.create_partitions([NewPartitions(topic_name, 3)])[topic_name].result(10)
    with pytest.raises(Exception, match=r"(?i)already exists"):
        admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(10)
    with pytest.raises(Exception, match=r"(?i)replication factor"):
        admin.create_topics([NewTopic(topic_name + "-rf", 1, 3)])[topic_name + "-rf"].result(10)
    with pytest.raises(Exception, match=r"(?i)retention.ms"):
        admin.create_topics([NewTopic(topic_name + "-bad", 1, 1, config={"retention.ms": "soon"})])[
            topic_name + "-bad"].result(10)


def test_auto_create_can_be_disabled(tmp_path, topic_name):
    from confluent_kafka.admin import AdminClient
    from harness import BrokerProcess

    with BrokerProcess(tmp_path / "data", {"auto.create.topics.enable": "false"}) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        md = admin.list_topics(topic_name, timeout=10)
        assert md.topics[topic_name].error is not None  # UNKNOWN_TOPIC_OR_PARTITION
        assert topic_name not in admin.list_topics(timeout=10).topics


async def test_client_disconnecting_during_long_poll(broker, topic_name):
    from dm_broker.protocol.client import encode_request

    conn = await connect(broker)
    await create(conn, topic_name)
    await conn.send_raw(encode_request(1, 12, 1, fetch_request(topic_name, 0, 0, max_wait_ms=500, min_bytes=1)))
    await conn.close()
    await asyncio.sleep(0.8)
    await still_serving(broker)
    assert "unexpected error" not in broker.log_tail(50)


async def test_a_compressed_batch_that_inflates_past_the_limit_is_refused(broker, topic_name):
    """A 64 KB zstd batch holding 2 GB of zeros, to a compacted topic (whose records the broker decodes to
    check their keys): before, the broker inflated all of it (4 GB of memory, 6.5 s on its event loop) and
    stored it as one record; now INVALID_RECORD, nothing written, and the broker's memory stays small."""
    import cramjam
    from dm_broker.log.records import parse_header, with_payload
    from test_fuzz_auth import rss_mb

    conn = await connect(broker)
    await create(conn, topic_name, **{"cleanup.policy": "compact"})
    chunk = bytes(cramjam.zstd.compress(b"\0" * (16 << 20), level=19))
    base = parse_header(batch([b"v"], codec=4))
    bomb = with_payload(base, chunk * 128, base.attributes, 1)
    before = rss_mb(broker.proc.pid)
    resp = await conn.request(produce_request(topic_name, 0, bomb), timeout=60)
    part = resp.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.invalid_record
    assert "decompress to more than" in part.error_message
    assert rss_mb(broker.proc.pid) - before < 1000
    fetched = await conn.request(fetch_request(topic_name, 0, 0))
    assert fetched.responses[0].partitions[0].high_watermark == 0
    await conn.close()
    await still_serving(broker)


@pytest.mark.parametrize("codec", [0, 3, 1], ids=["none", "lz4", "gzip"])
async def test_a_batch_with_malformed_records_is_refused_and_consumers_read_on(broker, topic_name, codec):
    """A batch whose CRC is right but whose first record declares two bytes more than its fields take
    (ADR 0048): before, the broker stored it, and a librdkafka consumer stopped there silently, never
    reading the records written after it. Now INVALID_RECORD, nothing stored, and the consumer reads on.
    lz4 is checked on the event loop, gzip in a thread."""
    from clients import ConfluentClient
    from dm_broker.log.records import HEADER_SIZE, compress, parse_header, with_payload

    conn = await connect(broker)
    await create(conn, topic_name)
    for value in (b"before", b"after"):
        if value == b"after":
            good = batch([b"x" * 10, b"y" * 10])
            records = bytearray(good[HEADER_SIZE:])
            records[0] += 2  # the first record's length, zigzag: one more byte than its fields take
            header = parse_header(batch([b"x", b"y"], codec=codec))
            poison = with_payload(header, compress(codec, bytes(records) + b"\0"), header.attributes, 2)
            resp = await conn.request(produce_request(topic_name, 0, poison))
            part = resp.responses[0].partition_responses[0]
            assert part.error_code == ErrorCode.invalid_record, part
            assert "record payload" in part.error_message
        resp = await conn.request(produce_request(topic_name, 0, batch([value], codec=codec)))
        assert resp.responses[0].partition_responses[0].error_code == ErrorCode.none
    await conn.close()
    got = await asyncio.to_thread(ConfluentClient(f"127.0.0.1:{broker.port}").consume, topic_name, 2, 20)
    assert [(g.offset, g.value) for g in got] == [(0, b"before"), (1, b"after")]


@pytest.mark.parametrize("codec", [3, 1], ids=["lz4", "gzip"])
async def test_inner_offsets_of_a_compressed_batch_are_renumbered(broker, topic_name, codec):
    """A compressed batch whose records all carry the offset delta 0: Kafka's LogValidator renumbers such a
    batch's records; an uncompressed one is refused (INVALID_RECORD). Consumers then find each record at
    its own offset."""
    from clients import ConfluentClient
    from dm_broker.log.records import HEADER_SIZE, compress, parse_header, with_payload

    conn = await connect(broker)
    await create(conn, topic_name)
    body = b"".join(batch([value])[HEADER_SIZE:] for value in (b"a", b"b", b"c"))  # deltas 0, 0, 0
    header = parse_header(batch([b"a", b"b", b"c"], codec=codec))
    resp = await conn.request(produce_request(topic_name, 0, with_payload(header, body, header.attributes & ~7, 3)))
    part = resp.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.invalid_record and "offset delta 0, not 1" in part.error_message
    resp = await conn.request(produce_request(topic_name, 0, with_payload(header, compress(codec, body),
                                                                          header.attributes, 3)))
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.none
    resp = await conn.request(produce_request(topic_name, 0, batch([b"d"], codec=codec)))
    assert resp.responses[0].partition_responses[0].base_offset == 3
    await conn.close()
    got = await asyncio.to_thread(ConfluentClient(f"127.0.0.1:{broker.port}").consume, topic_name, 4, 20)
    assert [(g.offset, g.value) for g in got] == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]


async def test_a_batch_max_timestamp_is_its_records(broker, topic_name):
    """A producer's batch whose header claims a max timestamp in the year 2100 while its records are from
    now: stored with the records' largest timestamp, as Kafka's LogValidator does. Before, the header was
    kept, and time retention and the time index went by the claim (the segment would never expire)."""
    from dm_broker.log.records import parse_header, set_max_timestamp, validate_batches

    conn = await connect(broker)
    await create(conn, topic_name)
    claimed = bytearray(batch([b"a", b"b"]))
    recorded = parse_header(claimed).max_timestamp
    set_max_timestamp(claimed, 0, 4_102_444_800_000)
    resp = await conn.request(produce_request(topic_name, 0, bytes(claimed)))
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.none
    fetched = await conn.request(fetch_request(topic_name, 0, 0))
    [stored] = validate_batches(fetched.responses[0].partitions[0].records, 1 << 20)  # its CRC is right
    assert stored.max_timestamp == recorded
    await conn.close()


async def test_fetch_answers_are_bounded_by_fetch_max_bytes(tmp_path, topic_name):
    """Kafka's fetch.max.bytes caps an answer whatever max_bytes the client asks for (a TLS answer is read
    into memory); a first batch larger than the cap still goes out whole (KIP-74)."""
    from harness import BrokerProcess

    with BrokerProcess(tmp_path / "data", {"fetch.max.bytes": 65536}) as capped:
        conn = await KafkaConnection.open("127.0.0.1", capped.port)
        await create(conn, topic_name)
        for i in range(10):
            resp = await conn.request(produce_request(topic_name, 0, batch([b"%d" % i * 20_000])))
            assert resp.responses[0].partition_responses[0].error_code == ErrorCode.none
        fetched = await conn.request(fetch_request(topic_name, 0, 0))  # asks for 50 MiB, 10 MiB per partition
        records = fetched.responses[0].partitions[0].records
        assert 60_000 <= len(records) <= 65536 + 21_000  # three whole batches, and the fourth cut
        big = await conn.request(produce_request(topic_name, 0, batch([b"x" * 100_000])))
        assert big.responses[0].partition_responses[0].error_code == ErrorCode.none
        first = await conn.request(fetch_request(topic_name, 0, 10))
        assert len(first.responses[0].partitions[0].records) >= 100_000  # larger than the cap, whole
        await conn.close()
