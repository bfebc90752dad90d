"""The metrics alerts are written on (issue 29) mean what their names say when a broker dies, on a real
3-broker cluster: the leader's under-replicated and under-min-ISR partitions and ISR shrinks, offline
partitions in the cluster, and back to whole with an ISR expansion; log directory space; the expiry of a
TLS listener's certificate."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from harness import BrokerProcess, ControllerProcess
from secure import DAY, Pki, secure_broker

pytestmark = pytest.mark.timeout(240)
FAST = {"broker.session.timeout.ms": 2000, "broker.heartbeat.interval.ms": 200, "replica.lag.time.max.ms": 3000}


def wait_for(check, what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.3)
    raise AssertionError(f"not within {timeout_s} s: {what}")


@pytest.fixture
def cluster(tmp_path) -> Iterator[tuple[ControllerProcess, list[BrokerProcess]]]:
    controller = ControllerProcess(tmp_path / "controller", FAST)
    brokers = [BrokerProcess(tmp_path / f"broker-{i}", FAST, node_id=i, controller_url=controller.url)
               for i in range(3)]
    controller.start()
    for b in brokers:
        b.start()
    yield controller, brokers
    for b in brokers:
        b.stop()
    controller.stop()


def test_partition_health_follows_a_dead_broker(cluster) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    _, brokers = cluster
    admin = AdminClient({"bootstrap.servers": brokers[0].bootstrap})
    admin.create_topics([NewTopic("strict", 1, 3, config={"min.insync.replicas": "3"})])["strict"].result(15)
    wait_for(lambda: sum(b.metric("dm_leader_partitions") for b in brokers) == 1, "strict led")
    strict_leader = next(b for b in brokers if b.metric("dm_leader_partitions") == 1)
    victim = next(b for b in brokers if b is not strict_leader)  # a follower of strict; it alone holds single
    admin.create_topics([NewTopic("single", 1, replica_assignment=[[victim.node_id]])])["single"].result(15)
    wait_for(lambda: victim.metric("dm_leader_partitions") == 1, "single led by its one replica")
    assert sum(b.metric("dm_partitions") for b in brokers) == 4
    assert all(b.metric("dm_under_replicated_partitions") == 0 for b in brokers)
    assert all(b.metric("dm_offline_partitions") == 0 for b in brokers)
    assert all(b.metric("dm_controller_unreachable_seconds") == 0 for b in brokers)

    victim.kill()
    survivors = [b for b in brokers if b is not victim]
    wait_for(lambda: all(b.metric("dm_offline_partitions") == 1 for b in survivors), "single offline everywhere")
    wait_for(lambda: strict_leader.metric("dm_under_replicated_partitions") == 1, "strict under-replicated")
    assert strict_leader.metric("dm_under_min_isr_partitions") == 1
    assert strict_leader.metric("dm_isr_shrinks_total") >= 1

    victim.start()
    wait_for(lambda: all(b.metric("dm_offline_partitions") == 0 for b in brokers), "nothing offline again")
    wait_for(lambda: strict_leader.metric("dm_under_replicated_partitions") == 0, "strict's ISR whole again")
    assert strict_leader.metric("dm_under_min_isr_partitions") == 0
    assert strict_leader.metric("dm_isr_expands_total") >= 1
    for b in brokers:
        directory = str(b.data_dir)
        free, total = b.metric("dm_log_dir_free_bytes", dir=directory), b.metric("dm_log_dir_total_bytes",
                                                                                   dir=directory)
        assert 0 < free <= total, (free, total)


def test_certificate_expiry_of_a_tls_listener(tmp_path) -> None:
    ca = Pki(tmp_path / "pki")
    broker, _ = secure_broker(tmp_path / "data", {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL"},
                              {"ssl.keystore.location": ca.server(validity=3 * DAY),
                               "ssl.truststore.location": ca.ca_file})
    with broker:
        left = broker.metric("dm_certificate_expiry_seconds", listener="SSL")
        assert 2.9 * 86400 < left <= 3 * 86400, left
        assert broker.metric("dm_certificate_expiry_seconds", listener="PLAINTEXT") == 0  # no such series


def test_per_partition_series_can_be_summed_per_topic_at_run_time(tmp_path) -> None:
    """metrics.per.partition.enabled=false (dynamic) keeps the same metric names, summed per topic, so
    a dashboard's `sum by (topic)` reads either form; the group's lag sums per topic the same way."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

    with BrokerProcess(tmp_path / "data") as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("wide", 3, 1)])["wide"].result(15)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for partition, count in enumerate((5, 7, 9)):
            for _ in range(count):
                producer.produce("wide", b"v", partition=partition)
        assert producer.flush(15) == 0
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "readers"})
        consumer.commit(offsets=[TopicPartition("wide", p, 1) for p in range(3)], asynchronous=False)
        consumer.close()
        assert [broker.metric("dm_log_end_offset", topic="wide", partition=str(p)) for p in range(3)] == [5, 7, 9]
        assert [broker.metric("dm_group_lag", group="readers", topic="wide", partition=str(p))
                for p in range(3)] == [4, 6, 8]

        off = ConfigResource("BROKER", "0", incremental_configs=[
            ConfigEntry("metrics.per.partition.enabled", "false", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([off])[off].result(15)
        wait_for(lambda: broker.metric("dm_log_end_offset", topic="wide") == 21, "log end offsets summed per topic")
        assert broker.metric("dm_log_end_offset", topic="wide", partition="0") == 0  # no partition series left
        assert broker.metric("dm_group_lag", group="readers", topic="wide") == 18
        assert broker.metric("dm_log_size_bytes", topic="wide") > 0
