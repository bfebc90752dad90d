"""Transactions with real clients against a real broker: confluent-kafka (librdkafka), kafka-python and
aiokafka transactional producers committing and aborting, read_committed consumers seeing only what
was committed (up to the last stable offset), offsets committed in a transaction, fencing of a second
instance, a hung transaction aborted at its timeout, bad requests, and KIP-890's defense against a
delayed write of an ended transaction (raw protocol, both transaction versions)."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest
from clients import no_open_transactions
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from group_clients import wait_for
from harness import BrokerProcess
from txn_wire import RawTxnProducer, add_partitions, end_txn, init_producer_id, produce, produce_error, txn_records


def create(bootstrap: str, topic: str, partitions: int = 1, configs: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=configs or {})])[topic].result(15)


def read_all(bootstrap: str, topic: str, isolation: str, quiet_s: float = 2.0, timeout_s: float = 30) -> list[bytes]:
    """Every partition from the beginning (assigned, no group), until nothing came for `quiet_s`."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex[:8]}",
                  "auto.offset.reset": "earliest", "isolation.level": isolation, "enable.auto.commit": False})
    partitions = c.list_topics(topic, timeout=10).topics[topic].partitions
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    got: list[bytes] = []
    last = time.monotonic()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() - last < quiet_s and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and not m.error():
            got.append(m.value())
            last = time.monotonic()
    c.close()
    return got


def txn_producer(bootstrap: str, txn_id: str, **extra: object) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, **extra})
    p.init_transactions(30)
    return p


def test_confluent_kafka_commit_abort_retry_and_read_committed(broker: BrokerProcess, topic_name: str):
    b = broker.bootstrap
    create(b, topic_name, partitions=3)
    p = txn_producer(b, f"tx-{topic_name}")
    p.begin_transaction()
    for i in range(30):
        p.produce(topic_name, key=b"k%d" % (i % 3), value=b"c1-%02d" % i)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(10):
        p.produce(topic_name, key=b"k%d" % (i % 3), value=b"a1-%02d" % i)
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()  # abort, then retry the same work, then commit
    for i in range(10):
        p.produce(topic_name, key=b"k%d" % (i % 3), value=b"c2-%02d" % i)
    p.commit_transaction(30)

    committed = read_all(b, topic_name, "read_committed")
    assert sorted(committed) == sorted([b"c1-%02d" % i for i in range(30)] + [b"c2-%02d" % i for i in range(10)])
    by_key: dict[int, list[bytes]] = {}
    for v in committed:  # in order within each partition (one key per partition here)
        by_key.setdefault(int(v[3:]) % 3, []).append(v)
    for values in by_key.values():
        assert values == sorted(values, key=lambda v: (v[:2] == b"c2", v))
    everything = read_all(b, topic_name, "read_uncommitted")
    assert len(everything) == 50 and sum(v.startswith(b"a1") for v in everything) == 10


def test_an_open_transaction_holds_read_committed_back_to_the_last_stable_offset(broker: BrokerProcess,
                                                                                  topic_name: str):
    b = broker.bootstrap
    create(b, topic_name)
    # Recent timestamps: records from 1970 are past retention.ms, and the shared broker's retention pass
    # (every log.retention.check.interval.ms) may delete them in the middle of the test.
    t0 = int(time.time() * 1000) - 60_000
    plain = Producer({"bootstrap.servers": b, "enable.idempotence": True})
    plain.produce(topic_name, b"before", timestamp=t0)
    plain.flush(15)
    p = txn_producer(b, f"open-{topic_name}")
    p.begin_transaction()
    p.produce(topic_name, b"in-txn", timestamp=t0 + 1_000)
    p.flush(15)
    plain.produce(topic_name, b"after", timestamp=t0 + 2_000)  # written after the open transaction began
    plain.flush(15)
    assert read_all(b, topic_name, "read_committed") == [b"before"]
    assert read_all(b, topic_name, "read_uncommitted") == [b"before", b"in-txn", b"after"]
    # offsetsForTimes stops where each isolation level may read, as Kafka's: the last stable offset
    assert offset_for_time(b, topic_name, t0 + 500, "read_committed") == -1
    assert offset_for_time(b, topic_name, t0 + 500, "read_uncommitted") == 1
    p.commit_transaction(30)
    assert read_all(b, topic_name, "read_committed") == [b"before", b"in-txn", b"after"]
    assert offset_for_time(b, topic_name, t0 + 500, "read_committed") == 1


def offset_for_time(bootstrap: str, topic: str, timestamp_ms: int, isolation: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex[:8]}",
                  "isolation.level": isolation})
    try:
        return c.offsets_for_times([TopicPartition(topic, 0, timestamp_ms)], timeout=10)[0].offset
    finally:
        c.close()


def test_offsets_sent_in_a_transaction_count_only_when_it_commits(broker: BrokerProcess, topic_name: str):
    b = broker.bootstrap
    source, sink, group = f"{topic_name}-in", f"{topic_name}-out", f"g-{topic_name}"
    create(b, source)
    create(b, sink)
    seed = Producer({"bootstrap.servers": b})
    for i in range(10):
        seed.produce(source, b"m%d" % i)
    seed.flush(15)
    consumer = Consumer({"bootstrap.servers": b, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.subscribe([source])
    messages = []
    while len(messages) < 10:
        m = consumer.poll(1)
        if m is not None and not m.error():
            messages.append(m)
    p = txn_producer(b, f"ctp-{topic_name}")

    def transform(upto: int, commit: bool) -> None:
        p.begin_transaction()
        for m in messages[:upto]:
            p.produce(sink, m.value().upper())
        p.send_offsets_to_transaction([TopicPartition(source, 0, upto)], consumer.consumer_group_metadata(), 30)
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)

    def committed_offset() -> int:
        return consumer.committed([TopicPartition(source, 0)], 15)[0].offset

    transform(5, commit=False)
    assert committed_offset() < 0, "an aborted transaction commits no offset"
    transform(10, commit=True)
    assert committed_offset() == 10
    consumer.close()
    assert read_all(b, sink, "read_committed") == [b"M%d" % i for i in range(10)]


def test_kafka_python_and_aiokafka_transactional_producers(broker: BrokerProcess, topic_name: str):
    from kafka import KafkaProducer
    from kafka.structs import OffsetAndMetadata
    from kafka.structs import TopicPartition as KTopicPartition

    b = broker.bootstrap
    create(b, topic_name, partitions=2)
    kp = KafkaProducer(bootstrap_servers=b, transactional_id=f"kp-{topic_name}")
    kp.init_transactions()
    kp.begin_transaction()
    for i in range(6):
        kp.send(topic_name, value=b"kp-c-%d" % i, partition=i % 2)
    kp.send_offsets_to_transaction({KTopicPartition(topic_name, 0): OffsetAndMetadata(3, "", -1)},
                                   f"kpg-{topic_name}")
    kp.commit_transaction()
    kp.begin_transaction()
    kp.send(topic_name, value=b"kp-a-0")
    kp.abort_transaction()
    kp.close()

    async def aiokafka_side() -> None:
        import aiokafka

        ap = aiokafka.AIOKafkaProducer(bootstrap_servers=b, transactional_id=f"ak-{topic_name}")
        await ap.start()
        try:
            async with ap.transaction():
                for i in range(4):
                    await ap.send(topic_name, value=b"ak-c-%d" % i, partition=i % 2)
            await ap.begin_transaction()
            await ap.send(topic_name, value=b"ak-a-0", partition=0)
            await ap.abort_transaction()
        finally:
            await ap.stop()
        consumer = aiokafka.AIOKafkaConsumer(topic_name, bootstrap_servers=b, isolation_level="read_committed",
                                             auto_offset_reset="earliest", group_id=f"akr-{topic_name}")
        await consumer.start()
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(got) < 10 and time.monotonic() < deadline:
            for msgs in (await consumer.getmany(timeout_ms=500)).values():
                got += [m.value for m in msgs]
        await consumer.stop()
        assert sorted(got) == sorted([b"kp-c-%d" % i for i in range(6)] + [b"ak-c-%d" % i for i in range(4)])

    asyncio.run(aiokafka_side())
    offsets = Consumer({"bootstrap.servers": b, "group.id": f"kpg-{topic_name}"})
    assert offsets.committed([TopicPartition(topic_name, 0)], 15)[0].offset == 3
    offsets.close()


def test_a_second_instance_fences_the_first(broker: BrokerProcess, topic_name: str):
    b = broker.bootstrap
    create(b, topic_name)
    txn_id = f"fence-{topic_name}"
    first = txn_producer(b, txn_id)
    first.begin_transaction()
    first.produce(topic_name, b"zombie")
    first.flush(15)
    second = txn_producer(b, txn_id)  # aborts the first one's open transaction, bumps the epoch
    with pytest.raises(KafkaException) as fenced:
        first.commit_transaction(15)
    assert fenced.value.args[0].code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                           KafkaError.INVALID_PRODUCER_EPOCH)
    second.begin_transaction()
    second.produce(topic_name, b"live")
    second.commit_transaction(30)
    assert read_all(b, topic_name, "read_committed") == [b"live"]


def metric_value(text: str, name: str) -> float:
    line = next(line for line in text.splitlines() if line.startswith(name + " "))
    return float(line.split()[1])


def test_a_hung_transaction_is_aborted_at_its_timeout(tmp_path: Path):
    overrides = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": 200}
    with BrokerProcess(tmp_path / "data", overrides) as broker:
        b = broker.bootstrap
        create(b, "hung")
        p = txn_producer(b, "hung-txn", **{"transaction.timeout.ms": 2000})
        p.begin_transaction()
        p.produce("hung", b"never-committed")
        p.flush(15)
        after = Producer({"bootstrap.servers": b})
        after.produce("hung", b"after")
        after.flush(15)
        # what an operator alerting on hung transactions sees meanwhile
        metrics = broker.http_get("/metrics")[1]
        assert 'dm_transactions{state="Ongoing"} 1.0' in metrics
        assert 'dm_unstable_offsets{partition="0",topic="hung"} 2.0' in metrics
        assert metric_value(metrics, "dm_transaction_oldest_open_seconds") > 0
        wait_for(lambda: no_open_transactions(b, "hung", 1), 60, what="the coordinator aborting it")
        assert read_all(b, "hung", "read_committed") == [b"after"]
        metrics = broker.http_get("/metrics")[1]
        assert 'dm_unstable_offsets{partition="0",topic="hung"} 0.0' in metrics
        assert metric_value(metrics, "dm_transaction_oldest_open_seconds") == 0
        with pytest.raises(KafkaException):
            p.commit_transaction(10)


def test_bad_transactional_requests_get_kafkas_errors(broker: BrokerProcess, topic_name: str):
    create(broker.bootstrap, topic_name)
    host, port = broker.bootstrap.split(":")

    async def go() -> None:
        txn = await RawTxnProducer.open(host, int(port), f"bad-{topic_name}", topic_name)
        conn = txn.conn
        try:
            # A timeout above transaction.max.timeout.ms; an empty transactional id.
            assert int((await conn.request(init_producer_id(txn.txn_id, timeout_ms=10**8))).error_code) == 50
            assert int((await conn.request(init_producer_id("", version=4))).error_code) == 42
            # Wrong epoch (older: fenced), unknown producer id, unknown partition.
            assert await txn.add([0]) == [0]
            stale = add_partitions(txn.txn_id, txn.producer_id, txn.epoch - 1 if txn.epoch else 32000, topic_name, [0])
            codes = [int(p.partition_error_code) for t in (await conn.request(stale)).results_by_topic_v3_and_below
                     for p in t.results_by_partition]
            assert codes[0] in (90, 47)
            wrong_pid = add_partitions(txn.txn_id, txn.producer_id + 1000, txn.epoch, topic_name, [0])
            codes = [int(p.partition_error_code) for t in (await conn.request(wrong_pid)).results_by_topic_v3_and_below
                     for p in t.results_by_partition]
            assert codes == [49]
            assert sorted(await txn.add([0, 7])) == [3, 55]  # UNKNOWN_TOPIC_OR_PARTITION, OPERATION_NOT_ATTEMPTED
            # A transactional batch without a transactional id; a client's control batch.
            naked = produce(None, topic_name, 0, txn_records([b"x"], txn.producer_id, txn.epoch, 0))
            assert produce_error(await conn.request(naked)) == 87  # INVALID_RECORD
            # EndTxn with no transaction open for another id.
            other = await RawTxnProducer.open(host, int(port), f"bad2-{topic_name}", topic_name)
            assert (await other.end(commit=True))[0] == 48  # INVALID_TXN_STATE
            await other.close()
            resp = await conn.request(end_txn(txn.txn_id, txn.producer_id + 1000, txn.epoch, True))
            assert int(resp.error_code) == 49  # INVALID_PRODUCER_ID_MAPPING
        finally:
            await txn.close()

    asyncio.run(go())


def test_a_retried_epoch_bump_is_answered_again_and_a_replaced_instance_is_fenced(broker: BrokerProcess,
                                                                                  topic_name: str):
    """KIP-360 over the wire: a producer names its epoch to have it bumped; asked again with the same epoch
    (the first answer lost), the coordinator answers the bumped epoch again instead of fencing the producer,
    as Kafka's does. Once a new instance initialised the id naming no epoch, neither epoch passes."""
    create(broker.bootstrap, topic_name)
    host, port = broker.bootstrap.split(":")

    async def go() -> None:
        txn = await RawTxnProducer.open(host, int(port), f"retry-{topic_name}", topic_name)
        try:
            pid, first = txn.producer_id, txn.epoch
            answers = []
            for _ in range(3):  # the bump, then two retries of it
                resp = await txn.conn.request(init_producer_id(txn.txn_id, producer_id=pid, epoch=first))
                answers.append((int(resp.error_code), resp.producer_id, resp.producer_epoch))
            assert answers == [(0, pid, first + 1)] * 3
            assert await txn.init() == 0 and txn.epoch == first + 2  # a new instance
            for named in (first, first + 1):
                resp = await txn.conn.request(init_producer_id(txn.txn_id, producer_id=pid, epoch=named))
                assert int(resp.error_code) == 90, (named, resp)  # PRODUCER_FENCED
        finally:
            await txn.close()

    asyncio.run(go())


@pytest.mark.parametrize("version", ["classic", "kip-890"])
def test_a_delayed_write_of_an_ended_transaction_never_lands(broker: BrokerProcess, topic_name: str, version: str):
    """The anomaly Jepsen found in Kafka-compatible systems: a Produce of transaction N held back by the
    network, released after N ended (here: aborted), must not be appended — not to the log, not into
    transaction N+1 — and read_committed shows only what N+1 committed."""
    create(broker.bootstrap, topic_name)
    host, port = broker.bootstrap.split(":")
    tv2 = version == "kip-890"

    async def go() -> None:
        txn = await RawTxnProducer.open(host, int(port), f"late-{version}-{topic_name}", topic_name)
        if tv2:
            txn.produce_version = 12  # the partition is added by the Produce itself
        try:
            if not tv2:
                assert await txn.add([0]) == [0]
            assert await txn.send(txn.batch(0, [b"n-0"])) == 0
            held = txn.batch(0, [b"n-late"])  # in flight, delayed
            error, _ = await txn.end(commit=False, version=5 if tv2 else 3)
            assert error == 0
            await asyncio.sleep(0.5)  # the markers are written
            late = await txn.send(held)
            assert late != 0, "a write of an ended transaction was appended"
            if not tv2:
                assert await txn.init(producer_id=txn.producer_id, epoch=txn.epoch) == 0  # KIP-360: a new epoch
                assert await txn.add([0]) == [0]
            assert await txn.send(txn.batch(0, [b"n1-0"])) == 0
            assert await txn.send(held) != 0, "a write of an ended transaction landed in the next one"
            assert (await txn.end(commit=True, version=5 if tv2 else 3))[0] == 0
        finally:
            await txn.close()

    asyncio.run(go())
    assert read_all(broker.bootstrap, topic_name, "read_committed") == [b"n1-0"]
    assert b"n-late" not in read_all(broker.bootstrap, topic_name, "read_uncommitted")
