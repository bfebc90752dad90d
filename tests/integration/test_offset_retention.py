"""Committed offsets expire like Kafka's (KIP-211): `offsets.retention.minutes` after a consumer
group became empty, after the commit for groups that only commit; never while the group is
active. Expiry is written to __consumer_offsets, so it survives a restart."""

from __future__ import annotations

import time
import uuid

import pytest
from clients import ConfluentClient, Rec
from group_clients import wait_for
from harness import running_broker

pytestmark = pytest.mark.timeout(180)

RETENTION_S = 2.4
BROKER = {"offsets.retention.minutes": RETENTION_S / 60, "offsets.retention.check.interval.ms": 200,
          "group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 1000}


@pytest.fixture(scope="module")
def rbroker(tmp_path_factory):
    with running_broker(tmp_path_factory.mktemp("retention") / "data", BROKER) as proc:
        yield proc


def consumer(bootstrap: str, group: str):
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "session.timeout.ms": 3000, "heartbeat.interval.ms": 300})


def committed(bootstrap: str, group: str, topic: str) -> int:
    from confluent_kafka import TopicPartition

    c = consumer(bootstrap, group)
    try:
        return c.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
    finally:
        c.close()


def listed_groups(bootstrap: str) -> set[str]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    return {g.group_id for g in admin.list_consumer_groups().result(10).valid}


def test_offsets_of_an_empty_group_expire_and_the_group_goes(rbroker) -> None:
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    ConfluentClient(rbroker.bootstrap).create_topic(topic, 1)
    ConfluentClient(rbroker.bootstrap).produce(topic, [Rec(None, b"%d" % i) for i in range(5)])
    c = consumer(rbroker.bootstrap, group)
    c.subscribe([topic])
    got = 0
    deadline = time.time() + 30
    while got < 5 and time.time() < deadline:
        if (m := c.poll(0.5)) is not None and not m.error():
            got += 1
    c.commit(asynchronous=False)
    # While the group has a member, its offsets stay, however old they get.
    end = time.time() + RETENTION_S * 2
    while time.time() < end:
        c.poll(0.2)
    assert group in listed_groups(rbroker.bootstrap)
    c.close()  # leaves the group: Empty from now on
    assert committed(rbroker.bootstrap, group, topic) == 5
    wait_for(lambda: committed(rbroker.bootstrap, group, topic) < 0, timeout=30, what="offsets expired")
    wait_for(lambda: group not in listed_groups(rbroker.bootstrap), timeout=10, what="group removed")


def test_offsets_of_a_commit_only_group_expire_after_the_commit_and_stay_expired(rbroker) -> None:
    from confluent_kafka import TopicPartition

    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    ConfluentClient(rbroker.bootstrap).create_topic(topic, 1)
    c = consumer(rbroker.bootstrap, group)
    c.assign([TopicPartition(topic, 0)])
    c.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
    committed_at = time.time()
    c.close()
    assert committed(rbroker.bootstrap, group, topic) == 3
    wait_for(lambda: committed(rbroker.bootstrap, group, topic) < 0, timeout=30, what="offsets expired")
    assert time.time() - committed_at >= RETENTION_S * 0.9
    rbroker.stop()
    rbroker.start()  # the expiry was written to __consumer_offsets
    assert committed(rbroker.bootstrap, group, topic) < 0
    assert "offsets expired" in rbroker.log_path.read_text()


def test_offsets_of_a_deleted_topic_go_with_it_and_a_new_topic_of_its_name_is_read_from_its_start(tmp_path) -> None:
    """Kafka removes a deleted topic's committed offsets from every group at once. Kept, a group would
    resume a new topic of the same name at the old topic's position and skip its first records. With
    the default retention (7 days, checked every 10 minutes) only the deletion can remove them here."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    topic, other, group = f"t-{uuid.uuid4().hex[:8]}", f"u-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    defaults = {k: v for k, v in BROKER.items() if not k.startswith("offsets.retention")}  # 7 days, 10 minutes
    with running_broker(tmp_path / "data", defaults) as broker:
        client = ConfluentClient(broker.bootstrap)
        for name in (topic, other):
            client.create_topic(name, 1)
            client.produce(name, [Rec(None, b"old-%d" % i) for i in range(10)])
        c = consumer(broker.bootstrap, group)
        c.commit(offsets=[TopicPartition(topic, 0, 10), TopicPartition(other, 0, 4)], asynchronous=False)
        c.close()
        assert committed(broker.bootstrap, group, topic) == 10

        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.delete_topics([topic])[topic].result(15)
        wait_for(lambda: committed(broker.bootstrap, group, topic) < 0, 20, what="the deleted topic's offset removed")
        assert committed(broker.bootstrap, group, other) == 4  # another topic's offset stays

        client.create_topic(topic, 1)
        client.produce(topic, [Rec(None, b"new-%d" % i) for i in range(15)])
        c = consumer(broker.bootstrap, group)
        c.subscribe([topic])
        got: list[bytes] = []
        deadline = time.time() + 30
        while len(got) < 15 and time.time() < deadline:
            msg = c.poll(0.5)
            if msg is not None and not msg.error():
                got.append(msg.value())
        c.close()
        assert got == [b"new-%d" % i for i in range(15)]  # from the new topic's start, nothing skipped

        broker.stop()  # the removal was written to __consumer_offsets, not only forgotten in memory
        broker.start()
        assert committed(broker.bootstrap, group, topic) < 0
        assert committed(broker.bootstrap, group, other) == 4
