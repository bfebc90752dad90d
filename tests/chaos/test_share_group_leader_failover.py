"""A share group of 4 consumers on one partition while its leader is SIGKILLed: the new leader reads the
share-partition state from `__share_group_state`, so every acknowledged record stays acknowledged
(none is accepted twice), and every record the producer had acknowledged is eventually accepted."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from chaos_tools import FAST_FAILURE, create_topic, fully_replicated
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from group_clients import share_group_reads_from_earliest, wait_for
from harness import Cluster

pytestmark = pytest.mark.timeout(300)

OVERRIDES = {**FAST_FAILURE, "group.share.min.session.timeout.ms": 1000, "group.share.session.timeout.ms": 6000,
             "group.share.min.heartbeat.interval.ms": 100, "group.share.heartbeat.interval.ms": 500,
             "group.share.min.record.lock.duration.ms": 1000, "group.share.record.lock.duration.ms": 3000}


class Acker(threading.Thread):
    """Accepts every record; keeps the values whose acknowledgement the leader confirmed."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str, accepted: list, lock: threading.Lock):
        super().__init__(daemon=True, name=name)
        self.bootstrap, self.group, self.topic, self.accepted, self.lock = bootstrap, group, topic, accepted, lock
        self.stop_event = threading.Event()
        self.polled = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            consumer = ShareConsumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                                      "client.id": self.name, "share.acknowledgement.mode": "explicit"})
            consumer.subscribe([self.topic])
            try:
                while not self.stop_event.is_set():
                    msgs = [m for m in consumer.poll(0.3) if m.error() is None]
                    self.polled.set()
                    for m in msgs:
                        consumer.acknowledge(m, AcknowledgeType.ACCEPT)
                    if not msgs:
                        continue
                    try:
                        results = consumer.commit_sync(10)
                    except Exception:  # the leader went away mid-commit: those records come back
                        continue
                    if all(err is None for err in results.values()):
                        with self.lock:
                            self.accepted.extend(m.value() for m in msgs)
            finally:
                consumer.close()
        except BaseException as exc:  # surfaced by the test
            self.error = exc


def test_share_group_keeps_acknowledgements_across_a_leader_sigkill(tmp_path: Path):
    topic, group = "share-failover", "share-failover"
    with Cluster(tmp_path, overrides=OVERRIDES) as cluster:
        create_topic(cluster, topic, 1)
        wait_for(lambda: fully_replicated(cluster, topic, 1), 30, what="the topic fully replicated")
        share_group_reads_from_earliest(cluster.bootstrap, group)
        accepted: list[bytes] = []
        lock = threading.Lock()
        consumers = [Acker(cluster.bootstrap, group, topic, f"c{i}", accepted, lock) for i in range(4)]
        for c in consumers:
            c.start()
        wait_for(lambda: all(c.polled.is_set() for c in consumers), 60, what="four share consumers polling")

        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 5})
        delivered: list[bytes] = []

        def on_delivery(err, msg) -> None:
            if err is None:
                delivered.append(msg.value())

        def produce(start: int, n: int) -> None:
            for i in range(start, start + n):
                producer.produce(topic, b"%06d" % i, on_delivery=on_delivery)
                if i % 50 == 0:
                    producer.poll(0)
                    time.sleep(0.02)
            producer.flush(60)

        try:
            produce(0, 500)
            wait_for(lambda: len(set(accepted)) >= 200, 60, what="records accepted before the kill")
            victim = cluster.leader(topic, 0)
            cluster.brokers[victim].kill()
            wait_for(lambda: cluster.leader(topic, 0) not in (victim, -1), 30, what="a new leader")
            produce(500, 500)
            wait_for(lambda: set(delivered) <= set(accepted), 120, what="every delivered record accepted")
            time.sleep(4)  # anything accepted twice would show up within a lock duration
        finally:
            for c in consumers:
                c.stop_event.set()
            for c in consumers:
                c.join(30)
        assert not [c.error for c in consumers if c.error]
        twice = [v for v, n in Counter(accepted).items() if n > 1]
        assert not twice, f"{len(twice)} records accepted twice across the failover, e.g. {twice[:5]}"
        assert set(delivered) <= set(accepted)
        print(f"\nshare group across a leader SIGKILL: {len(delivered)} records delivered by the producer, all "
              f"accepted once")
