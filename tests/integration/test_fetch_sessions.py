"""Incremental fetch sessions (KIP-227, issue 31) against real brokers: what a session's requests and
responses carry, its errors, a long poll woken by an append, kafka-python (which opens sessions) reading
everything, and followers in sessions keeping the ISR whole while idle and rejoining it without
traffic."""

from __future__ import annotations

import asyncio
import datetime
import time
from pathlib import Path

import pytest
from chaos_tools import FAST_FAILURE
from dm_broker.protocol.build import make, nested
from dm_broker.protocol.client import KafkaConnection
from dm_broker.protocol.codec import request_class
from harness import BrokerProcess, Cluster
from kio.schema.errors import ErrorCode
from wire import batch, create_topics_request, produce_request

pytestmark = pytest.mark.timeout(180)
VERSION = 12
PARTITIONS = 8


def session_fetch(session_id: int, epoch: int, topic: str, offsets: dict[int, int], forgotten: tuple[int, ...] = (),
                  max_wait_ms: int = 0, replica_id: int = -1):
    cls = request_class(1, VERSION)
    part_cls = nested(cls, "FetchPartition")
    parts = tuple(make(part_cls, partition=p, fetch_offset=o, partition_max_bytes=1 << 20)
                  for p, o in sorted(offsets.items()))
    return make(cls, replica_id=replica_id, max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1,
                max_bytes=50 << 20, isolation_level=0, session_id=session_id, session_epoch=epoch,
                topics=(nested(cls, "FetchTopic")(topic=topic, partitions=parts),) if parts else (),
                forgotten_topics_data=(nested(cls, "ForgottenTopic")(topic=topic, partitions=forgotten),)
                if forgotten else (), rack_id="")


def answered(resp) -> dict[int, tuple[int, int, int]]:
    """partition -> (error, high watermark, bytes of records) of every partition in the response."""
    return {p.partition_index: (int(p.error_code), p.high_watermark, len(p.records or b""))
            for t in resp.responses for p in t.partitions}


async def produce_one(conn: KafkaConnection, topic: str, partition: int) -> None:
    resp = await conn.request(produce_request(topic, partition, batch([b"x" * 50])))
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.none


async def open_topic(conn: KafkaConnection, topic: str) -> None:
    resp = await conn.request(create_topics_request(topic, PARTITIONS))
    assert resp.topics[0].error_code == ErrorCode.none
    for p in range(PARTITIONS):
        await produce_one(conn, topic, p)


async def test_an_incremental_fetch_names_and_hears_only_what_changed(broker, topic_name):
    conn = await KafkaConnection.open("127.0.0.1", broker.port)
    await open_topic(conn, topic_name)
    full = await conn.request(session_fetch(0, 0, topic_name, dict.fromkeys(range(PARTITIONS), 0)))
    assert full.error_code == ErrorCode.none and full.session_id != 0
    assert {p: (e, hw) for p, (e, hw, _) in answered(full).items()} == dict.fromkeys(range(PARTITIONS), (0, 1))
    assert all(size > 0 for _, _, size in answered(full).values())
    sid = full.session_id

    # Every fetch position moved past the record: nothing new anywhere, so nothing in the answer.
    resp = await conn.request(session_fetch(sid, 1, topic_name, dict.fromkeys(range(PARTITIONS), 1)))
    assert (resp.error_code, resp.session_id, answered(resp)) == (ErrorCode.none, sid, {})
    resp = await conn.request(session_fetch(sid, 2, topic_name, {}))
    assert answered(resp) == {}

    # A record on partition 5: the next fetch, naming nothing, hears of partition 5 alone.
    await produce_one(conn, topic_name, 5)
    resp = await conn.request(session_fetch(sid, 3, topic_name, {}))
    assert list(answered(resp)) == [5] and answered(resp)[5][:2] == (0, 2) and answered(resp)[5][2] > 0
    resp = await conn.request(session_fetch(sid, 4, topic_name, {5: 2}))
    assert answered(resp) == {}

    # A forgotten partition is not answered any more.
    resp = await conn.request(session_fetch(sid, 5, topic_name, {}, forgotten=(3,)))
    assert answered(resp) == {}
    await produce_one(conn, topic_name, 3)
    resp = await conn.request(session_fetch(sid, 6, topic_name, {}))
    assert answered(resp) == {}
    assert broker.metric("dm_fetch_sessions") >= 1
    await conn.close()


async def test_a_long_poll_in_a_session_wakes_on_an_append(broker, topic_name):
    conn = await KafkaConnection.open("127.0.0.1", broker.port)
    await open_topic(conn, topic_name)
    full = await conn.request(session_fetch(0, 0, topic_name, dict.fromkeys(range(PARTITIONS), 1)))
    sid = full.session_id
    producer = await KafkaConnection.open("127.0.0.1", broker.port)
    started = time.monotonic()
    poll = asyncio.create_task(conn.request(session_fetch(sid, 1, topic_name, {}, max_wait_ms=20_000), timeout=30))
    await asyncio.sleep(0.5)
    assert not poll.done()  # nothing new: the fetch waits
    await produce_one(producer, topic_name, 6)
    resp = await poll
    assert list(answered(resp)) == [6]
    assert time.monotonic() - started < 15, "the append did not end the wait"
    await conn.close()
    await producer.close()


async def test_an_answer_carries_records_of_at_most_500_partitions_and_the_skipped_come_first(broker, topic_name):
    """ADR 0057: what a session's answer carries (and a follower appends) is bounded, not every partition
    that changed; the partitions left out are owed and go first in the next answer."""
    n = 1_100
    conn = await KafkaConnection.open("127.0.0.1", broker.port)
    resp = await conn.request(create_topics_request(topic_name, n), timeout=120)
    assert resp.topics[0].error_code == ErrorCode.none
    for p in range(n):
        await produce_one(conn, topic_name, p)

    full = await conn.request(session_fetch(0, 0, topic_name, dict.fromkeys(range(n), 0)))
    assert len(answered(full)) == n, "a full fetch answers every partition it names"
    first = {p for p, (_, _, size) in answered(full).items() if size}
    assert len(first) == 500 and all(answered(full)[p][:2] == (0, 1) for p in range(n))
    for p in first:  # the answered partitions get more records: still, the skipped ones are owed first
        await produce_one(conn, topic_name, p)
    position = {p: 1 for p in first}
    everything = {p: 2 if p in first else 1 for p in range(n)}
    sid, epoch, sizes, moved = full.session_id, 1, [500], position.copy()
    while position != everything and epoch < 10:
        resp = await conn.request(session_fetch(sid, epoch, topic_name, moved))
        carried = {p for p, (_, _, size) in answered(resp).items() if size}
        if epoch == 1:
            assert not carried & first, "the partitions skipped last time go first"
        moved = {p: position.get(p, 0) + 1 for p in carried}
        position.update(moved)
        sizes.append(len(carried))
        epoch += 1
    assert sizes == [500, 500, 500, 100], sizes
    assert position == everything
    resp = await conn.request(session_fetch(sid, epoch, topic_name, moved))
    assert answered(resp) == {}
    await conn.close()


async def test_session_errors_and_closing(broker, topic_name):
    conn = await KafkaConnection.open("127.0.0.1", broker.port)
    await open_topic(conn, topic_name)
    sid = (await conn.request(session_fetch(0, 0, topic_name, {0: 0}))).session_id
    wrong_epoch = await conn.request(session_fetch(sid, 7, topic_name, {}))
    assert wrong_epoch.error_code == ErrorCode.invalid_fetch_session_epoch
    unknown = await conn.request(session_fetch(sid ^ 0x5A5A5A, 1, topic_name, {}))
    assert unknown.error_code == ErrorCode.fetch_session_id_not_found
    # Sessions belong to who opened them: a fetch claiming to be a replica does not get a consumer's.
    stolen = await conn.request(session_fetch(sid, 1, topic_name, {}, replica_id=0))
    assert stolen.error_code == ErrorCode.fetch_session_id_not_found
    ok = await conn.request(session_fetch(sid, 1, topic_name, {}))
    assert ok.error_code == ErrorCode.none and ok.session_id == sid
    # Epoch -1 closes it: a sessionless full answer, and the id is gone.
    closing = await conn.request(session_fetch(sid, -1, topic_name, {0: 0}))
    assert closing.session_id == 0 and answered(closing)[0][0] == 0
    gone = await conn.request(session_fetch(sid, 2, topic_name, {}))
    assert gone.error_code == ErrorCode.fetch_session_id_not_found
    await conn.close()


async def test_no_slots_means_full_fetches(tmp_path: Path):
    with BrokerProcess(tmp_path / "data", {"max.incremental.fetch.session.cache.slots": 0}) as b:
        conn = await KafkaConnection.open("127.0.0.1", b.port)
        await open_topic(conn, "noslots")
        resp = await conn.request(session_fetch(0, 0, "noslots", dict.fromkeys(range(PARTITIONS), 0)))
        assert resp.error_code == ErrorCode.none and resp.session_id == 0
        assert len(answered(resp)) == PARTITIONS
        await conn.close()


def test_kafka_python_reads_everything_through_a_session(broker, topic_name):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic(topic_name, 12, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    consumer = KafkaConsumer(topic_name, bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, fetch_max_wait_ms=200)
    sent = set()
    seen = set()
    deadline = time.monotonic() + 60
    for round_ in range(6):
        for i in range(60):  # a few partitions at a time change: incremental answers carry just those
            value = f"{round_}-{i}".encode()
            producer.send(topic_name, value, partition=(round_ * 5 + i) % 12 if i % 3 else round_ % 12)
            sent.add(value)
        producer.flush()
        while seen != sent and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                seen.update(r.value for r in records)
    assert seen == sent
    assert broker.metric("dm_fetch_sessions") >= 1
    consumer.close()
    producer.close()


def test_idle_followers_keep_the_isr_and_rejoin_it_idle(tmp_path: Path):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    settings = {**FAST_FAILURE, "replica.lag.time.max.ms": 1500}
    topic, count = "idle-isr", 60
    with Cluster(tmp_path, 3, settings) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(topic, count, 3)])[topic].result(30)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for p in range(count):
            producer.produce(topic, b"v", partition=p)
        assert producer.flush(30) == 0

        def full_isr() -> bool:
            parts = cluster.metadata()["topics"][topic]["partitions"]
            return all(len(p["isr"]) == 3 for p in parts)

        # Idle for several lag limits: followers name nothing in their fetches, and no ISR shrinks.
        time.sleep(6)
        assert full_isr()

        cluster.brokers[2].kill()
        for p in range(count):
            producer.produce(topic, b"w", partition=p)
        assert producer.flush(30) == 0
        deadline = time.monotonic() + 30
        while not any(2 not in p["isr"] for p in cluster.metadata()["topics"][topic]["partitions"]):
            assert time.monotonic() < deadline, "the ISR never shrank"
            time.sleep(0.2)
        cluster.brokers[2].start()
        # No record after the restart: broker 2 catches up in its sessions and rejoins every ISR.
        deadline = time.monotonic() + 60
        while not full_isr():
            short = [(i, p["leader"], p["isr"]) for i, p in enumerate(cluster.metadata()["topics"][topic]["partitions"])
                     if len(p["isr"]) < 3]
            assert time.monotonic() < deadline, f"still outside the ISR (partition, leader, ISR): {short}"
            time.sleep(0.2)
