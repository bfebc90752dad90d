"""Client quotas (KIP-13, KIP-124, KIP-546, KIP-599; issue 31) on a real broker with real clients: the
admin APIs and `dm quotas`, a greedy producer held to its producer_byte_rate while a well-behaved one
keeps its latency, a consumer held to consumer_byte_rate without losing a record, request_percentage
and controller_mutation_rate answered with throttle times and THROTTLING_QUOTA_EXCEEDED."""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from dm_broker.protocol.access import empty
from dm_broker.protocol.build import make, nested
from dm_broker.protocol.client import KafkaConnection
from dm_broker.protocol.codec import request_class
from harness import BrokerProcess, run_dm
from kio.schema.errors import ErrorCode
from measurements import note
from wire import create_topics_request

pytestmark = pytest.mark.timeout(240)
MB = 1_000_000
# A short quota window: the bucket holds two seconds of a quota, so a test sees the steady rate soon.
SETTINGS = {"quota.window.num": 2, "quota.window.size.seconds": 1}


@pytest.fixture(scope="module")
def quota_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path_factory.mktemp("quotas") / "data", SETTINGS)
    broker.start()
    yield broker
    broker.stop()


def alter(entity: list[tuple[str, str | None]], ops: dict[str, float | None], validate_only: bool = False):
    cls = request_class(49, 1)
    return empty(cls, entries=(empty(nested(cls, "EntryData"), entity=tuple(
        empty(nested(cls, "EntityData"), entity_type=t, entity_name=n) for t, n in entity), ops=tuple(
        empty(nested(cls, "OpData"), key=k, value=0.0 if v is None else v, remove=v is None)
        for k, v in ops.items())),), validate_only=validate_only)


def describe(components: list[tuple[str, int, str | None]], strict: bool = False):
    cls = request_class(48, 1)
    return empty(cls, components=tuple(empty(nested(cls, "ComponentData"), entity_type=t, match_type=m, match=n)
                                       for t, m, n in components), strict=strict)


def described(resp) -> dict[tuple, dict[str, float]]:
    assert resp.error_code == ErrorCode.none, resp.error_message
    return {tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)): {v.key: v.value for v in entry.values}
            for entry in resp.entries}


async def test_quotas_are_altered_described_and_refused_like_kafka(quota_broker):
    conn = await KafkaConnection.open("127.0.0.1", quota_broker.port)
    ok = await conn.request(alter([("user", "ann")], {"producer_byte_rate": 2048.0, "request_percentage": 25.0}))
    assert [e.error_code for e in ok.entries] == [ErrorCode.none]
    await conn.request(alter([("user", None), ("client-id", None)], {"consumer_byte_rate": 4096.0}))
    await conn.request(alter([("client-id", "app")], {"controller_mutation_rate": 5.0}))
    everything = described(await conn.request(describe([])))
    assert everything[(("user", "ann"),)] == {"producer_byte_rate": 2048.0, "request_percentage": 25.0}
    assert everything[(("client-id", None), ("user", None))] == {"consumer_byte_rate": 4096.0}
    # Kafka's filters: exact names, defaults, any; strict leaves out entities with other parts.
    assert list(described(await conn.request(describe([("user", 0, "ann")])))) == [(("user", "ann"),)]
    assert list(described(await conn.request(describe([("user", 1, None)])))) == [(("client-id", None), ("user", None))]
    assert len(described(await conn.request(describe([("user", 2, None)])))) == 2
    assert described(await conn.request(describe([("user", 2, None)], strict=True))) == {
        (("user", "ann"),): {"producer_byte_rate": 2048.0, "request_percentage": 25.0}}
    bad_filter = await conn.request(describe([("user", 0, None)]))
    assert bad_filter.error_code == ErrorCode.invalid_request

    refused = {
        "unknown key": alter([("user", "ann")], {"bytes_per_fortnight": 1.0}),
        "negative": alter([("user", "ann")], {"producer_byte_rate": -1.0}),
        "no entity": alter([], {"producer_byte_rate": 1.0}),
        "ip": alter([("ip", "10.0.0.1")], {"connection_creation_rate": 1.0}),
        "repeated type": alter([("user", "a"), ("user", "b")], {"producer_byte_rate": 1.0}),
    }
    for why, request in refused.items():
        resp = await conn.request(request)
        assert resp.entries[0].error_code == ErrorCode.invalid_request, why
        assert resp.entries[0].error_message, why
    # validate_only changes nothing; removing a quota removes the entity once it has none left.
    await conn.request(alter([("user", "zed")], {"producer_byte_rate": 1.0}, validate_only=True))
    await conn.request(alter([("user", "ann")], {"request_percentage": None}))
    everything = described(await conn.request(describe([])))
    assert (("user", "zed"),) not in everything
    assert everything[(("user", "ann"),)] == {"producer_byte_rate": 2048.0}
    await conn.request(alter([("user", "ann")], {"producer_byte_rate": None}))
    await conn.request(alter([("user", None), ("client-id", None)], {"consumer_byte_rate": None}))
    await conn.request(alter([("client-id", "app")], {"controller_mutation_rate": None}))
    assert described(await conn.request(describe([]))) == {}
    await conn.close()


def test_dm_quotas_cli_and_quotas_survive_a_restart(tmp_path: Path):
    with BrokerProcess(tmp_path / "data") as broker:
        out = run_dm("quotas", "set", "--bootstrap", broker.bootstrap, "--user", "carol", "--client-id", "<default>",
                     "producer_byte_rate=1048576", "consumer_byte_rate=2097152")
        assert out.returncode == 0, out.stderr
        bad = run_dm("quotas", "set", "--bootstrap", broker.bootstrap, "--user", "carol", "producer_byte_rate=0")
        assert bad.returncode != 0 and "must be positive" in bad.stderr
        broker.stop()
        broker.start()
        listed = run_dm("quotas", "list", "--bootstrap", broker.bootstrap)
        assert listed.returncode == 0, listed.stderr
        assert "user=carol client-id=<default>\tconsumer_byte_rate=2097152 producer_byte_rate=1048576" in listed.stdout
        gone = run_dm("quotas", "delete", "--bootstrap", broker.bootstrap, "--user", "carol", "--client-id",
                      "<default>", "producer_byte_rate", "consumer_byte_rate")
        assert gone.returncode == 0, gone.stderr
        assert "no client quotas" in run_dm("quotas", "list", "--bootstrap", broker.bootstrap).stdout


def p99_ms(latencies: list[float]) -> float:
    return statistics.quantiles(latencies, n=100)[98] * 1000


def polite_producer(bootstrap: str, topic: str, seconds: float) -> list[float]:
    """1 KB records, 200 a second, acks=all: the delivery latency of each."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "polite", "linger.ms": 0, "acks": "all"})
    latencies: list[float] = []
    sends = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sends += 1
        sent = time.monotonic()
        producer.produce(topic, b"p" * 1000, on_delivery=lambda err, _, sent=sent: err is None and latencies.append(
            time.monotonic() - sent))
        producer.poll(0)
        time.sleep(0.005)
    assert producer.flush(30) == 0
    assert len(latencies) == sends, "every polite record is delivered"
    return latencies


def test_a_greedy_producer_is_held_to_its_quota_and_a_polite_one_is_not_throttled(quota_broker):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": quota_broker.bootstrap})
    for future in admin.create_topics([NewTopic("greedy", 1, 1), NewTopic("polite", 1, 1)]).values():
        future.result(15)
    assert run_dm("quotas", "set", "--bootstrap", quota_broker.bootstrap, "--client-id", "greedy",
                  f"producer_byte_rate={MB}").returncode == 0
    solo = polite_producer(quota_broker.bootstrap, "polite", 5)

    acked: list[float] = []
    started = time.monotonic()
    stop = started + 16

    def greedy() -> None:
        producer = Producer({"bootstrap.servers": quota_broker.bootstrap, "client.id": "greedy", "linger.ms": 5,
                             "acks": "all", "queue.buffering.max.kbytes": 4096})
        while time.monotonic() < stop:
            try:
                producer.produce("greedy", b"g" * 1000,
                                 on_delivery=lambda err, _: err is None and acked.append(time.monotonic()))
            except BufferError:
                producer.poll(0.01)
            producer.poll(0)
        producer.flush(30)

    thread = threading.Thread(target=greedy)
    thread.start()
    busy = polite_producer(quota_broker.bootstrap, "polite", 15)
    thread.join()
    # After the bucket's first two seconds: the steady rate, counted in record values (the quota counts
    # whole requests, a few percent more).
    steady = [t for t in acked if started + 4 <= t < started + 14]
    rate = len(steady) * 1000 / 10
    note(f"[quotas] greedy producer with producer_byte_rate={MB}: {rate:,.0f} B/s of values in its steady "
                   f"10 s; polite p99 {p99_ms(solo):.1f} ms alone, {p99_ms(busy):.1f} ms beside it")
    assert 0.9 * MB <= rate <= 1.1 * MB
    # The polite producer's latency is reported, not asserted (a wall-clock bound flakes on a loaded CI
    # machine, where the greedy thread shares this process): what the quota guarantees is that only the
    # greedy client is throttled and every polite record is delivered beside it.
    assert quota_broker.metric("dm_throttle_time_seconds_total", quota="producer_byte_rate", user="",
                               client_id="greedy") > 0
    assert quota_broker.metric("dm_throttle_time_seconds_total", quota="producer_byte_rate", user="",
                               client_id="polite") == 0


def test_a_consumer_is_held_to_its_quota_and_reads_everything(quota_broker):
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": quota_broker.bootstrap})
    admin.create_topics([NewTopic("slow-read", 1, 1)])["slow-read"].result(15)
    producer = Producer({"bootstrap.servers": quota_broker.bootstrap, "linger.ms": 5})
    for i in range(6000):
        producer.produce("slow-read", f"{i:08d}".encode() + b"r" * 992)
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    assert run_dm("quotas", "set", "--bootstrap", quota_broker.bootstrap, "--client-id", "reader",
                  f"consumer_byte_rate={MB}").returncode == 0
    consumer = Consumer({"bootstrap.servers": quota_broker.bootstrap, "client.id": "reader", "group.id": "slow",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(["slow-read"])
    seen: list[int] = []
    started = time.monotonic()
    while len(seen) < 6000 and time.monotonic() < started + 60:
        for m in consumer.consume(500, timeout=1):
            if m.error() is None:
                seen.append(int(m.value()[:8]))
    elapsed = time.monotonic() - started
    consumer.close()
    assert seen == list(range(6000))  # throttled, never skipped or lost
    note(f"[quotas] consumer with consumer_byte_rate={MB}: 6 MB read in {elapsed:.1f} s")
    # Two seconds of quota in the bucket, then 1 MB/s: 6 MB cannot take much less than 4 s.
    assert elapsed >= 3.5
    assert quota_broker.metric("dm_throttle_time_seconds_total", quota="consumer_byte_rate", user="",
                               client_id="reader") > 0


async def test_request_percentage_throttles_a_busy_client(quota_broker):
    conn = await KafkaConnection.open("127.0.0.1", quota_broker.port, client_id="chatty")
    await conn.request(alter([("client-id", "chatty")], {"request_percentage": 0.1}))
    metadata = empty(request_class(3, 12), topics=None, allow_auto_topic_creation=False,
                     include_topic_authorized_operations=False)
    throttles = [(await conn.request(metadata)).throttle_time.total_seconds() for _ in range(60)]
    assert max(throttles) > 0  # 0.1 % of a thread is a millisecond a second: sixty Metadata exceed it
    assert quota_broker.metric("dm_throttle_time_seconds_total", quota="request_percentage", user="",
                               client_id="chatty") > 0
    await conn.request(alter([("client-id", "chatty")], {"request_percentage": None}))
    await conn.close()


async def test_request_percentage_counts_what_a_large_request_costs_off_the_handler(quota_broker):
    """Issue 65: the CPU attacks of one request went unthrottled. A request of 20,000 partition indexes costs
    its parsing and its answer's encoding on the codec thread besides its handler: counted too, a client held to
    1 % of a thread is throttled by its first few such requests (each answer carries the throttle)."""
    conn = await KafkaConnection.open("127.0.0.1", quota_broker.port, client_id="heavy")
    await conn.request(alter([("client-id", "heavy")], {"request_percentage": 1.0}))
    cls = request_class(61, 0)
    heavy = make(cls, topics=(nested(cls, "TopicRequest")(name="nobody", partition_indexes=tuple(range(20_000))),))
    throttles = [(await conn.request(heavy, timeout=60)).throttle_time.total_seconds() for _ in range(3)]
    assert max(throttles) > 0, throttles
    await conn.request(alter([("client-id", "heavy")], {"request_percentage": None}))
    await conn.close()


async def test_controller_mutation_rate_refuses_with_throttling_quota_exceeded(quota_broker):
    conn = await KafkaConnection.open("127.0.0.1", quota_broker.port, client_id="creator")
    await conn.request(alter([("client-id", "creator")], {"controller_mutation_rate": 5.0}))
    # The bucket holds 10 partitions (2 s of 5/s): a topic of 20 goes through and leaves it in debt
    # (this connection is muted meanwhile); a creation by the same client id on another connection is
    # refused (v7 knows THROTTLING_QUOTA_EXCEEDED) and creates nothing.
    other = await KafkaConnection.open("127.0.0.1", quota_broker.port, client_id="creator")
    first = await conn.request(create_topics_request("mut-a", 20))
    assert first.topics[0].error_code == ErrorCode.none
    assert first.throttle_time.total_seconds() > 0
    second = await other.request(create_topics_request("mut-b", 1))
    assert second.topics[0].error_code == ErrorCode.throttling_quota_exceeded
    assert second.throttle_time.total_seconds() > 0
    assert "mut-b" not in run_dm("topics", "list", "--bootstrap", quota_broker.bootstrap).stdout
    await asyncio.sleep(second.throttle_time.total_seconds() + 0.5)
    third = await conn.request(create_topics_request("mut-b", 1))
    assert third.topics[0].error_code == ErrorCode.none
    await conn.request(alter([("client-id", "creator")], {"controller_mutation_rate": None}))
    await conn.close()
    await other.close()
