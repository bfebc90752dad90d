"""Segment rolling by size and age, retention by size and time, through a real broker."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from clients import ConfluentClient, Rec
from harness import running_broker

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def fast_retention_broker(tmp_path_factory: pytest.TempPathFactory):
    with running_broker(tmp_path_factory.mktemp("retention") / "data",
                        {"log.retention.check.interval.ms": 200}) as proc:
        yield proc


def watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "w"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        consumer.close()


def segments(data: Path, topic: str) -> list[Path]:
    return sorted((data / f"{topic}-0").glob("*.log"))


def closed_segments_size(data: Path, topic: str) -> int:
    total = 0
    for f in segments(data, topic)[:-1]:
        try:
            total += f.stat().st_size
        except FileNotFoundError:  # deleted by a retention pass since the listing
            pass
    return total


def size_retention_done(data: Path, topic: str, retention_bytes: int) -> bool:
    """No size retention pass would delete another segment: what is kept, less its oldest segment, is under
    retention.bytes (the broker's own rule, active segment included). Until then a pass can still move the
    log start between two reads of it."""
    sizes = []
    for f in segments(data, topic):
        try:
            sizes.append(f.stat().st_size)
        except FileNotFoundError:  # deleted by a retention pass since the listing
            return False
    return bool(sizes) and sum(sizes) - sizes[0] < retention_bytes


def wait_until(predicate, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError("condition not reached")


def produce_one_per_batch(bootstrap: str, topic: str, records: list[Rec]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for r in records:
        producer.produce(topic, r.value, timestamp=r.timestamp or 0)
        producer.flush(10)


def test_size_rolling_and_size_retention(fast_retention_broker, topic_name):
    b = fast_retention_broker
    ConfluentClient(b.bootstrap).create_topic(topic_name, 1, {"segment.bytes": "2048", "retention.bytes": "6000"})
    produce_one_per_batch(b.bootstrap, topic_name, [Rec(None, b"%04d" % i + b"x" * 250) for i in range(100)])
    # retention passes run while the records arrive, so wait for the one after the last record, and for the
    # last one due (a make test at b44fb27 read the log start one pass early: records 72..77 were deleted
    # between the watermarks and the consume)
    wait_until(lambda: closed_segments_size(b.data_dir, topic_name) <= 6000 + 2048
               and size_retention_done(b.data_dir, topic_name, 6000))
    low, high = watermarks(b.bootstrap, topic_name)
    assert high == 100 and low > 0
    files = segments(b.data_dir, topic_name)
    sizes = [f.stat().st_size for f in files]
    assert all(s <= 2048 for s in sizes)
    assert int(files[0].stem) == low  # log start offset is the first kept segment's base offset
    got = ConfluentClient(b.bootstrap).consume(topic_name, high - low, timeout=10)
    assert [g.offset for g in got] == list(range(low, high))


def test_time_retention_deletes_expired_segments(fast_retention_broker, topic_name):
    b = fast_retention_broker
    # segment.ms makes the first new record (an hour younger) start its own segment, so every old
    # segment holds only expired records
    ConfluentClient(b.bootstrap).create_topic(topic_name, 1, {"segment.bytes": "4096", "retention.ms": "60000",
                                                              "segment.ms": "60000"})
    old = int(time.time() * 1000) - 3_600_000
    produce_one_per_batch(b.bootstrap, topic_name, [Rec(None, b"old-%03d" % i + b"y" * 200, (), old + i)
                                                    for i in range(60)])
    produce_one_per_batch(b.bootstrap, topic_name, [Rec(None, b"new-%03d" % i, (), None) for i in range(5)])
    wait_until(lambda: watermarks(b.bootstrap, topic_name)[0] == 60, timeout=30)
    got = ConfluentClient(b.bootstrap).consume(topic_name, 5, timeout=10)
    assert [g.value for g in got] == [b"new-%03d" % i for i in range(5)]


def test_age_rolling_uses_record_time(fast_retention_broker, topic_name):
    b = fast_retention_broker
    ConfluentClient(b.bootstrap).create_topic(topic_name, 1, {"segment.ms": "1000"})
    base = int(time.time() * 1000) - 100_000
    # records 2 s apart in record time: every batch starts a segment
    produce_one_per_batch(b.bootstrap, topic_name, [Rec(None, b"%d" % i, (), base + i * 2000) for i in range(5)])
    assert len(segments(b.data_dir, topic_name)) == 5


def test_retention_config_change_applies_at_run_time(fast_retention_broker, topic_name):
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    b = fast_retention_broker
    ConfluentClient(b.bootstrap).create_topic(topic_name, 1, {"segment.bytes": "2048"})
    produce_one_per_batch(b.bootstrap, topic_name, [Rec(None, b"z" * 300) for _ in range(40)])
    assert watermarks(b.bootstrap, topic_name)[0] == 0
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    resource = ConfigResource("topic", topic_name,
                              incremental_configs=[ConfigEntry("retention.bytes", "3000",
                                                               incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(10)
    wait_until(lambda: watermarks(b.bootstrap, topic_name)[0] > 0)
    described = admin.describe_configs([ConfigResource("topic", topic_name)])
    configs = next(iter(described.values())).result(10)
    assert configs["retention.bytes"].value == "3000"


def test_empty_cleanup_policy_keeps_every_record(fast_retention_broker, topic_name):
    """cleanup.policy="" (reached by SUBTRACTing "delete", as Kafka allows) means neither retention nor
    compaction: a retention.ms that would delete everything deletes nothing."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    b = fast_retention_broker
    ConfluentClient(b.bootstrap).create_topic(topic_name, 1, {"segment.bytes": "1024", "retention.ms": "1000"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    resource = ConfigResource("topic", topic_name, incremental_configs=[
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT)])
    admin.incremental_alter_configs([resource])[resource].result(10)
    configs = next(iter(admin.describe_configs([ConfigResource("topic", topic_name)]).values())).result(10)
    assert configs["cleanup.policy"].value == ""
    old = int(time.time() * 1000) - 3_600_000
    produce_one_per_batch(b.bootstrap, topic_name, [Rec(None, b"%03d" % i + b"q" * 200, (), old + i)
                                                    for i in range(30)])
    assert len(segments(b.data_dir, topic_name)) > 3
    time.sleep(1.5)  # several retention passes (log.retention.check.interval.ms=200)
    assert watermarks(b.bootstrap, topic_name) == (0, 30)
    got = ConfluentClient(b.bootstrap).consume(topic_name, 30, timeout=10)
    assert [g.offset for g in got] == list(range(30))
