"""A broker whose disk is wiped comes back empty (ADR 0047). Before, it was elected leader of every
partition it had been the last in-sync replica of, with an empty log: the 100 acknowledged records of an
RF 1 topic were gone, and on an RF 2 topic whose ISR had shrunk to it, the other replica truncated its own
100 records to match the empty leader when it came back. Now those partitions stay offline until an
unclean election, which takes the most advanced log the live replicas reported: the other replica's 100
records survive, and only what the wiped disk alone held is lost, by an explicit decision."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ElectionType, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from group_clients import wait_for
from harness import Cluster

pytestmark = pytest.mark.timeout(300)


def produce(bootstrap: str, topic: str, values: range) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 30000})
    for i in values:
        producer.produce(topic, b"%d" % i)
    assert producer.flush(60) == 0


def read_all(bootstrap: str, topic: str) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{topic}", "enable.auto.commit": False})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        consumer.assign([TopicPartition(topic, 0, low)])
        values: list[bytes] = []
        while len(values) < high - low:
            msg = consumer.poll(10)
            assert msg is not None, f"{topic}: {len(values)} of {high - low} records read"
            if msg.error() is None:
                values.append(msg.value())
        return values
    finally:
        consumer.close()


def test_a_wiped_last_in_sync_replica_leads_nothing_until_someone_decides(tmp_path: Path):
    cluster = Cluster(tmp_path, brokers=2, overrides={"broker.session.timeout.ms": 3000}).start()
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for future in admin.create_topics([NewTopic("rf1", 1, 1), NewTopic("rf2", 1, 2)]).values():
            future.result(30)
        wait_for(lambda: cluster.leader("rf1", 0) >= 0 and len(cluster.isr("rf2", 0)) == 2, 30, what="leaders")
        wiped = cluster.leader("rf1", 0)
        other = 1 - wiped
        produce(cluster.bootstrap, "rf1", range(100))
        produce(cluster.bootstrap, "rf2", range(100))
        cluster.brokers[other].kill()
        wait_for(lambda: cluster.isr("rf2", 0) == [wiped], 30, what="rf2's ISR down to the broker to be wiped")
        produce(cluster.bootstrap, "rf2", range(100, 150))  # acknowledged by the wiped broker alone

        cluster.brokers[wiped].kill()
        shutil.rmtree(cluster.brokers[wiped].data_dir)
        cluster.brokers[wiped].start()
        cluster.brokers[other].start()
        wait_for(lambda: all(cluster.brokers[i].metric("dm_offline_partitions") == 2 for i in (0, 1)), 30,
                 what="both brokers seeing the two partitions offline")
        for topic in ("rf1", "rf2"):
            assert (cluster.leader(topic, 0), cluster.isr(topic, 0)) == (-1, []), topic
        log = cluster.controller.log_path.read_text()
        assert f"broker {wiped} came back with new log directories" in log
        assert "rf2-0 has no in-sync replica left" in log

        # The decision: accept what is lost. rf2's leader is the replica that kept 100 records.
        results = admin.elect_leaders(ElectionType.UNCLEAN, [TopicPartition("rf1", 0), TopicPartition("rf2", 0)])
        results.result(30)
        wait_for(lambda: cluster.leader("rf2", 0) == other and cluster.leader("rf1", 0) == wiped, 30,
                 what="leaders elected")
        assert read_all(cluster.bootstrap, "rf2") == [b"%d" % i for i in range(100)]
        assert read_all(cluster.bootstrap, "rf1") == []  # held by the wiped disk alone: gone, by decision
        wait_for(lambda: sorted(cluster.isr("rf2", 0)) == [0, 1], 60, what="the wiped broker caught up")
        produce(cluster.bootstrap, "rf2", range(150, 160))
        assert read_all(cluster.bootstrap, "rf2") == [b"%d" % i for i in [*range(100), *range(150, 160)]]
    finally:
        cluster.stop()
