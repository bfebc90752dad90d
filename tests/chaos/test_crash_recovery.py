"""SIGKILL the broker under acks=all load; every acknowledged record must survive exactly once.
Damaged segment tails (torn writes, flipped bits) are repaired on start."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest
from chaos_tools import SequenceProducer, verify
from clients import ConfluentClient, Rec
from harness import BrokerProcess

pytestmark = pytest.mark.timeout(300)

KILL_ROUNDS = int(os.environ.get("DM_CHAOS_ROUNDS", "6"))


def test_sigkill_under_acks_all_load_loses_nothing(tmp_path: Path):
    broker = BrokerProcess(tmp_path / "data", {"log.flush.interval.messages": 1, "log.segment.bytes": 256 * 1024,
                                               "log.flush.offset.checkpoint.interval.ms": 500})
    broker.start()
    topic = "chaos"
    ConfluentClient(broker.bootstrap).create_topic(topic, 3)
    producer = SequenceProducer(broker.bootstrap, topic, 3)
    producer.start()
    rng = random.Random(7)
    recovery_times = []
    try:
        deadline = time.monotonic() + 60
        while not producer.acked and time.monotonic() < deadline:  # a loaded machine starts slowly
            time.sleep(0.1)
        assert producer.acked, "the producer got no acknowledgement before the first kill"
        for _ in range(KILL_ROUNDS):
            time.sleep(rng.uniform(0.4, 1.2))
            broker.kill()
            started = time.monotonic()
            broker.start()
            recovery_times.append(time.monotonic() - started)
        time.sleep(1)
    finally:
        producer.stop.set()
        producer.join(150)
    report = verify(broker.bootstrap, topic, producer, 3)
    print(f"\nchaos report: {report}, rounds={KILL_ROUNDS}, restart seconds={[round(t, 2) for t in recovery_times]}")
    broker.stop()
    assert producer.remaining == 0 and not producer.errors, producer.errors[:5]
    assert report["acked"] > 1000
    assert report == {**report, "lost": 0, "duplicated": 0, "reordered": 0, "misplaced": 0}


def _segments(data: Path, topic: str) -> list[Path]:
    return sorted((data / f"{topic}-0").glob("*.log"))


def _produce_batches(bootstrap: str, topic: str, count: int) -> None:
    # one record per batch (linger 0, acks=all, waiting each) so tails are whole batches
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(count):
        producer.produce(topic, b"rec-%04d" % i + b"x" * 200)
        producer.flush(10)


@pytest.mark.parametrize("damage", ["torn-tail", "flipped-bit", "garbage-appended"])
def test_damaged_tail_is_repaired_on_start(tmp_path: Path, damage: str):
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    topic = "repair"
    ConfluentClient(broker.bootstrap).create_topic(topic, 1)
    _produce_batches(broker.bootstrap, topic, 50)
    broker.kill()
    segment = _segments(broker.data_dir, topic)[-1]
    size = segment.stat().st_size
    expected = 49  # the last batch is damaged and dropped
    if damage == "torn-tail":
        os.truncate(segment, size - 17)
    elif damage == "flipped-bit":
        with segment.open("r+b") as fh:
            fh.seek(size - 40)
            byte = fh.read(1)
            fh.seek(size - 40)
            fh.write(bytes([byte[0] ^ 0x10]))
    else:
        with segment.open("ab") as fh:
            fh.write(os.urandom(300))
        expected = 50
    broker.start()
    try:
        got = ConfluentClient(broker.bootstrap).consume(topic, expected, timeout=15)
        assert [g.value[:8] for g in got] == [b"rec-%04d" % i for i in range(expected)]
        assert [g.offset for g in got] == list(range(expected))
        # the repaired log accepts new writes right after the last good batch
        acked = ConfluentClient(broker.bootstrap).produce(topic, [Rec(None, b"after-repair")])
        assert acked.offsets == [(0, expected)]
        assert "truncated" in broker.log_tail(200)
    finally:
        broker.stop()


def test_missing_indexes_are_rebuilt(tmp_path: Path):
    broker = BrokerProcess(tmp_path / "data", {"log.segment.bytes": 8192, "log.index.interval.bytes": 512})
    broker.start()
    topic = "reindex"
    ConfluentClient(broker.bootstrap).create_topic(topic, 1)
    _produce_batches(broker.bootstrap, topic, 120)
    broker.stop()
    for index in (broker.data_dir / f"{topic}-0").glob("*index"):
        index.unlink()
    (broker.data_dir / "recovery-point-offset-checkpoint").unlink()
    broker.start()
    try:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "x"})
        consumer.assign([TopicPartition(topic, 0, 77)])
        msg = consumer.poll(10)
        assert msg is not None and msg.error() is None
        assert (msg.offset(), msg.value()[:8]) == (77, b"rec-0077")
        consumer.close()
        part_dir = broker.data_dir / f"{topic}-0"
        logs = {p.stem for p in part_dir.glob("*.log")}
        assert len(logs) > 3
        assert {p.stem for p in part_dir.glob("*.index")} == logs
    finally:
        broker.stop()


def test_clean_restart_keeps_data_and_skips_rescan(tmp_path: Path):
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    client = ConfluentClient(broker.bootstrap)
    client.create_topic("clean", 2)
    sent = [Rec(b"k%d" % i, b"v%d" % i) for i in range(500)]
    client.produce("clean", sent)
    assert broker.stop() == 0
    assert "stopped cleanly" in broker.log_tail()
    broker.start()
    try:
        assert "previous shutdown clean" in broker.log_tail()
        got = ConfluentClient(broker.bootstrap).consume("clean", 500)
        assert sorted(g.value for g in got) == sorted(r.value for r in sent)
    finally:
        broker.stop()
