"""Consumer groups with real clients: assignment, exactly-once with commits, rebalances,
eviction, static membership, mixed clients, restart recovery."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import pytest
from clients import ConfluentClient, Rec
from group_clients import (
    GROUP_CONSUMERS,
    AioKafkaGroupConsumer,
    ConfluentGroupConsumer,
    KafkaPythonGroupConsumer,
    Seen,
    stop_all,
    wait_for,
)
from harness import BrokerProcess, running_broker

pytestmark = pytest.mark.timeout(240)

GROUP_BROKER = {"group.initial.rebalance.delay.ms": 200, "group.min.session.timeout.ms": 1000}


@pytest.fixture(scope="module")
def gbroker(tmp_path_factory):
    with running_broker(tmp_path_factory.mktemp("groups") / "data", GROUP_BROKER) as proc:
        yield proc


def produce(bootstrap: str, topic: str, n: int, start: int = 0) -> None:
    ConfluentClient(bootstrap).produce(topic, [Rec(b"k%d" % i, b"%06d" % i) for i in range(start, start + n)],
                                       acks="all")


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize("consumer_cls", GROUP_CONSUMERS, ids=lambda c: c.client)
def test_three_consumers_split_six_partitions_and_consume_exactly_once(gbroker, consumer_cls):
    topic, group = unique("split"), unique("g")
    ConfluentClient(gbroker.bootstrap).create_topic(topic, 6)
    seen: list[Seen] = []
    consumers = [consumer_cls(gbroker.bootstrap, group, topic, f"c{i}", seen) for i in range(3)]
    for c in consumers:
        c.start()
    try:
        wait_for(lambda: sorted(p for c in consumers for p in c.assigned) == list(range(6))
                 and all(len(c.assigned) == 2 for c in consumers), what="a stable 2/2/2 assignment")
        assigned = [c.assigned for c in consumers]
        assert set.union(*assigned) == set(range(6))
        assert sum(len(a) for a in assigned) == 6  # disjoint
        produce(gbroker.bootstrap, topic, 10_000)
        wait_for(lambda: len(seen) >= 10_000, what="10 000 records")
        time.sleep(1)  # nothing more should arrive
    finally:
        stop_all(consumers)
    values = [s.value for s in seen]
    assert len(values) == 10_000 and len(set(values)) == 10_000
    # each partition was read by exactly one consumer
    owners: dict[int, set[str]] = {}
    for s in seen:
        owners.setdefault(s.partition, set()).add(s.consumer)
    assert all(len(o) == 1 for o in owners.values())


@pytest.mark.parametrize("consumer_cls", GROUP_CONSUMERS, ids=lambda c: c.client)
def test_join_and_leave_rebalance_without_skipping(gbroker, consumer_cls):
    topic, group = unique("churn"), unique("g")
    ConfluentClient(gbroker.bootstrap).create_topic(topic, 4)
    seen: list[Seen] = []
    first = consumer_cls(gbroker.bootstrap, group, topic, "first", seen)
    first.start()
    try:
        wait_for(lambda: len(first.assigned) == 4, what="first consumer owning all partitions")
        produce(gbroker.bootstrap, topic, 1000)
        second = consumer_cls(gbroker.bootstrap, group, topic, "second", seen)
        second.start()
        wait_for(lambda: len(first.assigned) == 2 and len(second.assigned) == 2, what="rebalance to 2+2")
        produce(gbroker.bootstrap, topic, 1000, start=1000)
        wait_for(lambda: len({s.value for s in seen}) >= 2000, what="2000 records")
        second.stop()
        assert second.error is None, second.error
        wait_for(lambda: len(first.assigned) == 4, what="partitions back to the first consumer")
        produce(gbroker.bootstrap, topic, 1000, start=2000)
        wait_for(lambda: len({s.value for s in seen}) >= 3000, what="3000 records")
    finally:
        stop_all([first])
    assert {s.value for s in seen} == {b"%06d" % i for i in range(3000)}


CRASHY_CONSUMER = """
import sys
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "auto.offset.reset": "earliest",
              "enable.auto.commit": False, "session.timeout.ms": 3000, "heartbeat.interval.ms": 500})
c.subscribe([sys.argv[3]])
while True:
    msgs = c.consume(100, 0.2)
    if c.assignment():
        print("assigned", ",".join(str(tp.partition) for tp in c.assignment()), flush=True)
    if [m for m in msgs if not m.error()]:
        c.commit(asynchronous=False)
"""


def test_sigkilled_consumer_is_evicted_after_session_timeout(gbroker):
    topic, group = unique("evict"), unique("g")
    ConfluentClient(gbroker.bootstrap).create_topic(topic, 4)
    victim = subprocess.Popen([sys.executable, "-c", CRASHY_CONSUMER, gbroker.bootstrap, group, topic],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    seen: list[Seen] = []
    survivor = ConfluentGroupConsumer(gbroker.bootstrap, group, topic, "survivor", seen, session_ms=3000)
    try:
        assert victim.stdout is not None
        line = victim.stdout.readline()  # the victim has partitions before the survivor joins
        assert line.startswith(b"assigned")
        survivor.start()
        wait_for(lambda: len(survivor.assigned) == 2, what="survivor getting half")
        victim.kill()
        victim.wait(10)
        killed_at = time.monotonic()
        wait_for(lambda: len(survivor.assigned) == 4, timeout=20, what="survivor taking the victim's partitions")
        evicted_after = time.monotonic() - killed_at
        assert evicted_after >= 2.0  # not before the 3 s session timeout (minus poll slack)
        produce(gbroker.bootstrap, topic, 400)
        wait_for(lambda: len({s.value for s in seen}) >= 400, what="all records through the survivor")
    finally:
        victim.kill()
        stop_all([survivor])
    assert "session timed out" in gbroker.log_tail(400)


def generation(broker: BrokerProcess, group: str) -> float:
    return broker.metric("dm_group_generation", group=group)


def leader_member(broker: BrokerProcess, group: str) -> str:
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(broker.http_get("/metrics")[1]):
        for sample in family.samples:
            if sample.name == "dm_group_leader_info" and sample.labels["group"] == group:
                return sample.labels["member"]
    raise AssertionError("no leader reported")


@pytest.mark.parametrize("leader_restarts", [False, True], ids=["follower", "leader"])
@pytest.mark.parametrize("consumer_cls", [ConfluentGroupConsumer, KafkaPythonGroupConsumer],
                         ids=lambda c: c.client)
def test_static_member_restart_does_not_rebalance(gbroker, consumer_cls, leader_restarts):
    if leader_restarts and consumer_cls is KafkaPythonGroupConsumer:
        pytest.skip("kafka-python's leader rejoins whenever its metadata snapshot differs from the one it "
                    "assigned with (ConsumerCoordinator.need_rejoin), which a restart causes; Kafka rebalances "
                    "then too")
    topic, group = unique("static"), unique("g")
    ConfluentClient(gbroker.bootstrap).create_topic(topic, 4)
    seen: list[Seen] = []
    members = {name: consumer_cls(gbroker.bootstrap, group, topic, name, seen, session_ms=10000,
                                  instance_id=f"instance-{name}") for name in ("a", "b")}
    for c in members.values():
        c.start()
    try:
        wait_for(lambda: all(len(c.assigned) == 2 for c in members.values()), what="2+2")
        before = generation(gbroker, group)
        leader_name = leader_member(gbroker, group).split("-")[0]
        name = leader_name if leader_restarts else ({"a", "b"} - {leader_name}).pop()
        restarting, staying = members[name], members[({"a", "b"} - {name}).pop()]
        owned = set(restarting.assigned)
        # a static member's close does not send LeaveGroup, so the restart is seamless
        restarting.stop()
        again = consumer_cls(gbroker.bootstrap, group, topic, name, seen, session_ms=10000,
                             instance_id=f"instance-{name}")
        again.start()
        wait_for(lambda: again.assigned == owned, what="the restarted member getting its partitions back")
        time.sleep(1.5)
        assert generation(gbroker, group) == before, "a static rejoin caused a rebalance"
        assert staying.assigned | again.assigned == set(range(4))
        stop_all([again])
    finally:
        stop_all([members["a"], members["b"]])


def test_mixed_clients_share_a_group_with_the_range_assignor(gbroker):
    topic, group = unique("mixed"), unique("g")
    ConfluentClient(gbroker.bootstrap).create_topic(topic, 6)
    seen: list[Seen] = []
    consumers = [
        ConfluentGroupConsumer(gbroker.bootstrap, group, topic, "confluent", seen, assignor="range"),
        KafkaPythonGroupConsumer(gbroker.bootstrap, group, topic, "kafka-python", seen, assignor="range"),
        AioKafkaGroupConsumer(gbroker.bootstrap, group, topic, "aiokafka", seen, assignor="range"),
    ]
    for c in consumers:
        c.start()
    try:
        wait_for(lambda: all(len(c.assigned) == 2 for c in consumers), what="2/2/2 across three clients")
        produce(gbroker.bootstrap, topic, 3000)
        wait_for(lambda: len(seen) >= 3000, what="3000 records")
        time.sleep(1)
    finally:
        stop_all(consumers)
    assert sorted(s.value for s in seen) == [b"%06d" % i for i in range(3000)]
    assert {s.consumer for s in seen} == {"confluent", "kafka-python", "aiokafka"}


def test_cooperative_sticky_rebalances(gbroker):
    topic, group = unique("coop"), unique("g")
    ConfluentClient(gbroker.bootstrap).create_topic(topic, 6)
    seen: list[Seen] = []
    first = ConfluentGroupConsumer(gbroker.bootstrap, group, topic, "c1", seen, assignor="cooperative-sticky")
    first.start()
    try:
        wait_for(lambda: len(first.assigned) == 6, what="c1 owning all")
        second = ConfluentGroupConsumer(gbroker.bootstrap, group, topic, "c2", seen, assignor="cooperative-sticky")
        second.start()
        wait_for(lambda: len(first.assigned) == 3 and len(second.assigned) == 3, what="incremental 3+3")
        assert first.assigned | second.assigned == set(range(6))
        produce(gbroker.bootstrap, topic, 600)
        wait_for(lambda: len(seen) >= 600, what="600 records")
        stop_all([second])
        wait_for(lambda: len(first.assigned) == 6, what="c1 owning all again")
    finally:
        stop_all([first])
    assert sorted({s.value for s in seen}) == [b"%06d" % i for i in range(600)]


def test_offsets_and_groups_survive_broker_restart(tmp_path):
    broker = BrokerProcess(tmp_path / "data", GROUP_BROKER)
    broker.start()
    topic, group = "restart", "restart-group"
    try:
        ConfluentClient(broker.bootstrap).create_topic(topic, 3)
        produce(broker.bootstrap, topic, 300)
        seen: list[Seen] = []
        c = ConfluentGroupConsumer(broker.bootstrap, group, topic, "c", seen)
        c.start()
        wait_for(lambda: len(seen) >= 300, what="first 300")
        stop_all([c])
        broker.kill()  # SIGKILL: offsets must come back from __consumer_offsets
        broker.start()
        produce(broker.bootstrap, topic, 200, start=300)
        seen2: list[Seen] = []
        c2 = ConfluentGroupConsumer(broker.bootstrap, group, topic, "c2", seen2)
        c2.start()
        wait_for(lambda: len(seen2) >= 200, what="the 200 new records")
        time.sleep(1)
        stop_all([c2])
        assert sorted(s.value for s in seen2) == [b"%06d" % i for i in range(300, 500)]
    finally:
        broker.stop()
