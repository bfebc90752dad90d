"""Replication under failure (RF=3, min.insync.replicas=2, acks=all, idempotent producer): no
acknowledged record lost, duplicated or reordered; replicas never diverge."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import pytest
from chaos_tools import (
    FAST_FAILURE,
    TOPIC_CONFIG,
    assert_nothing_lost,
    create_topic,
    fully_replicated,
    kill_leaders_in_turn,
    replica_batches,
    sequence_load,
    verify,
    wait_replicas_identical,
)
from clients import ConfluentClient, Rec
from group_clients import wait_for
from harness import Cluster, netns_available
from measurements import note

pytestmark = pytest.mark.timeout(600)

ROUNDS = int(os.environ.get("DM_CHAOS_ROUNDS", "20"))


def report(name: str, result: dict, failovers: list[float]) -> None:
    extra = ""
    if failovers:
        extra = (f", kill→next ack: median {statistics.median(failovers):.2f}s, max {max(failovers):.2f}s over "
                 f"{len(failovers)} kills")
    note(f"[{name}] acknowledged {result['acked']}, lost {result['lost']}, duplicated {result['duplicated']}, "
          f"reordered {result['reordered']}, misplaced {result['misplaced']}{extra}")


def test_leader_sigkill_rounds(tmp_path: Path):
    with Cluster(tmp_path, 3, FAST_FAILURE) as cluster:
        create_topic(cluster, "ha", 3)
        with sequence_load(cluster.bootstrap, "ha", 3, warmup=500) as producer:
            failovers = kill_leaders_in_turn(cluster, "ha", 3, ROUNDS, producer)
        result = verify(cluster.bootstrap, "ha", producer, 3)
        report("leader SIGKILL", result, failovers)
        assert_nothing_lost(result, producer)
        dirs = [b.data_dir for b in cluster.brokers]
        for p in range(3):
            assert wait_replicas_identical(dirs, "ha", p) > 0


def test_follower_sigkill_and_catch_up(tmp_path: Path):
    with Cluster(tmp_path, 3, FAST_FAILURE) as cluster:
        create_topic(cluster, "fol", 1)
        with sequence_load(cluster.bootstrap, "fol", 1) as producer:
            leader = cluster.leader("fol", 0)
            follower = next(i for i in range(3) if i != leader)
            cluster.brokers[follower].kill()
            acked = len(producer.acked)
            wait_for(lambda: len(producer.acked) > acked + 1000, what="acks continuing with 2 of 3")
            wait_for(lambda: follower not in cluster.isr("fol", 0), timeout=20, what="the ISR without the follower")
            cluster.brokers[follower].start()
            wait_for(lambda: fully_replicated(cluster, "fol", 1), timeout=60, what="the follower back in the ISR")
        result = verify(cluster.bootstrap, "fol", producer, 1)
        report("follower SIGKILL", result, [])
        assert_nothing_lost(result, producer)
        wait_replicas_identical([b.data_dir for b in cluster.brokers], "fol", 0)


def test_controller_sigkill(tmp_path: Path):
    with Cluster(tmp_path, 3, FAST_FAILURE) as cluster:
        create_topic(cluster, "ctl", 2)
        with sequence_load(cluster.bootstrap, "ctl", 2) as producer:
            before = cluster.metadata()["topics"]["ctl"]
            cluster.controller.kill()
            acked = len(producer.acked)
            # brokers keep serving their current leaderships without a controller
            wait_for(lambda: len(producer.acked) > acked + 1000, timeout=30, what="acks without a controller")
            cluster.controller.start()
            after = cluster.metadata()["topics"]["ctl"]
            assert after["topic_id"] == before["topic_id"]
            assert [p["replicas"] for p in after["partitions"]] == [p["replicas"] for p in before["partitions"]]
            # and the restarted controller still fails leaders over
            wait_for(lambda: fully_replicated(cluster, "ctl", 2), timeout=30, what="brokers re-registered")
            victim = cluster.leader("ctl", 0)
            killed_at = time.monotonic()
            cluster.brokers[victim].kill()
            failover = producer.first_ack_after(0, killed_at)
            cluster.brokers[victim].start()
            wait_for(lambda: fully_replicated(cluster, "ctl", 2), timeout=60, what="ISR back to 3")
        result = verify(cluster.bootstrap, "ctl", producer, 2)
        report("controller SIGKILL", result, [failover])
        assert_nothing_lost(result, producer)


DIRECT_PRODUCE = """
import asyncio, sys
sys.path.insert(0, sys.argv[3])
from wire import batch, produce_request
from dm_broker.protocol.client import KafkaConnection

async def main():
    conn = await KafkaConnection.open(sys.argv[1], int(sys.argv[2]))
    resp = await conn.request(produce_request("iso", 0, batch([b"never-acknowledged"]), acks=-1), timeout=60)
    print(resp.responses[0].partition_responses[0].error_code.name)

asyncio.run(main())
"""


def produce_on_the_isolated_side(cluster: Cluster, broker: int) -> str:
    """An acks=all write from a client that can still reach the old leader (same side of the cut)."""
    import subprocess
    import sys

    b = cluster.brokers[broker]
    prefix = b.prefix if cluster.isolation == "netns" else []
    out = subprocess.run([*prefix, sys.executable, "-c", DIRECT_PRODUCE, b.host, str(b.port),
                          str(Path(__file__).parent.parent)], capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip()


ISOLATION = os.environ.get("DM_CHAOS_ISOLATION") or ("netns" if netns_available() else "proxy")


def test_isolated_leader_cannot_commit_and_truncates_when_back(tmp_path: Path):
    """Network partition of the leader: real network namespaces when running as root (a veth link
    taken down), fault-injecting proxies otherwise."""
    from kafka.admin import KafkaAdminClient, NewTopic

    with Cluster(tmp_path, 3, FAST_FAILURE, isolation=ISOLATION) as cluster:
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        # broker 0 leads (it is the one that can sit in its own namespace)
        admin.create_topics([NewTopic("iso", -1, -1, replica_assignments={0: [0, 1, 2]}, topic_configs=TOPIC_CONFIG)])
        admin.close()
        with sequence_load(cluster.bootstrap, "iso", 1) as producer:
            old = cluster.leader("iso", 0)
            assert old == 0
            cluster.isolate(old)
            isolated_at = time.monotonic()
            error = produce_on_the_isolated_side(cluster, old)
            assert error in ("request_timed_out", "not_enough_replicas", "not_leader_or_follower"), error
            wait_for(lambda: cluster.leader("iso", 0) not in (old, -1), timeout=20, what="a new leader")
            failover = producer.first_ack_after(0, isolated_at)
            acked = len(producer.acked)
            wait_for(lambda: len(producer.acked) > acked + 500, what="acks from the new leader")
            cluster.heal(old)
            wait_for(lambda: fully_replicated(cluster, "iso", 1), timeout=60, what="the old leader back in the ISR")
        result = verify(cluster.bootstrap, "iso", producer, 1)
        report(f"isolated leader ({ISOLATION})", result, [failover])
        assert_nothing_lost(result, producer)
        assert "truncating" in cluster.brokers[old].log_tail(2000), "the old leader kept its divergent tail"
        wait_replicas_identical([b.data_dir for b in cluster.brokers], "iso", 0)
        got = ConfluentClient(cluster.bootstrap).consume("iso", len(producer.acked) + 10, timeout=10)
        assert b"never-acknowledged" not in {g.value for g in got}


def test_group_coordinator_moves_with_its_partition_leader(tmp_path: Path):
    from dm_broker.partitioners import murmur2_partition
    from group_clients import ConfluentGroupConsumer, Seen

    overrides = {**FAST_FAILURE, "offsets.topic.num.partitions": 3}
    with Cluster(tmp_path, 3, overrides) as cluster:
        create_topic(cluster, "work", 3)
        ConfluentClient(cluster.bootstrap).produce("work", [Rec(None, b"%05d" % i, partition=i % 3)
                                                            for i in range(3000)])
        seen: list[Seen] = []
        consumer = ConfluentGroupConsumer(cluster.bootstrap, "movers", "work", "c1", seen, session_ms=6000)
        consumer.start()
        try:
            wait_for(lambda: len(seen) >= 3000, timeout=60, what="the first 3000 records")
            offsets_partition = murmur2_partition(b"movers", 3)
            coordinator = cluster.leader("__consumer_offsets", offsets_partition)
            cluster.brokers[coordinator].kill()
            wait_for(lambda: cluster.leader("__consumer_offsets", offsets_partition) not in (coordinator, -1),
                     timeout=20, what="a new coordinator")
            ConfluentClient(cluster.bootstrap).produce("work", [Rec(None, b"%05d" % i, partition=i % 3)
                                                                for i in range(3000, 4000)])
            wait_for(lambda: len({s.value for s in seen}) >= 4000, timeout=60, what="records after the move")
            cluster.brokers[coordinator].start()
        finally:
            consumer.stop()
        assert consumer.error is None, consumer.error
        # a new member of the group resumes at the offsets committed through both coordinators
        resumed: list[Seen] = []
        again = ConfluentGroupConsumer(cluster.bootstrap, "movers", "work", "c2", resumed, session_ms=6000)
        again.start()
        time.sleep(8)
        again.stop()
        assert len(resumed) < 50, f"{len(resumed)} records re-read: committed offsets were lost"


def test_controlled_shutdown_hands_leadership_over(tmp_path: Path):
    with Cluster(tmp_path, 3, {**FAST_FAILURE, "broker.session.timeout.ms": 6000}) as cluster:
        create_topic(cluster, "calm", 1)
        with sequence_load(cluster.bootstrap, "calm", 1) as producer:
            leader = cluster.leader("calm", 0)
            stopped_at = time.monotonic()
            assert cluster.brokers[leader].stop() == 0
            handover = producer.first_ack_after(0, stopped_at)
            # much sooner than the 6 s session timeout a crash would need
            assert handover < 4, handover
            assert cluster.leader("calm", 0) != leader
            assert "stopped cleanly" in cluster.brokers[leader].log_tail(50)
            cluster.brokers[leader].start()
            wait_for(lambda: fully_replicated(cluster, "calm", 1), timeout=60, what="ISR back to 3")
        result = verify(cluster.bootstrap, "calm", producer, 1)
        report("controlled shutdown", result, [handover])
        assert_nothing_lost(result, producer)


def test_a_follower_in_controlled_shutdown_is_not_asked_back_into_the_isr_at_every_fetch(tmp_path: Path):
    """Between its controlled shutdown and its exit a broker still fetches, caught up; the leader
    must not ask the controller to add it to the ISR at every one of those fetches (the controller
    refuses a replica that is shutting down). Seen as a hot loop when a shutdown was slow."""
    import urllib.request

    with Cluster(tmp_path, 3, FAST_FAILURE) as cluster:
        create_topic(cluster, "leaving", 1)
        with sequence_load(cluster.bootstrap, "leaving", 1):
            leader = cluster.leader("leaving", 0)
            follower = next(b for b in cluster.isr("leaving", 0) if b != leader)
            epoch = next(b["epoch"] for b in cluster.metadata()["brokers"] if b["node_id"] == follower)
            # The controller's half of a controlled shutdown, with the follower's process kept running.
            shutdown = urllib.request.Request(f"{cluster.controller.url}/v1/brokers/{follower}/shutdown?epoch={epoch}",
                                              method="POST")
            with urllib.request.urlopen(shutdown, timeout=10) as resp:
                assert resp.status == 200
            wait_for(lambda: follower not in cluster.isr("leaving", 0), timeout=20, what="follower out of the ISR")
            time.sleep(4)
        leader_log = cluster.brokers[cluster.leader("leaving", 0)].log_path.read_text()
        refusals = leader_log.count("refused: ineligible_replica")
        assert 1 <= refusals <= 8, f"{refusals} refused ISR expansions in 4 s"


def test_deleted_records_stay_deleted_when_the_leader_is_killed_right_after(tmp_path: Path):
    """DeleteRecords answers once every live replica's log starts past the offset (the low watermark),
    so a new leader elected right after the answer does not bring the deleted records back."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient

    with Cluster(tmp_path, 3, FAST_FAILURE) as cluster:
        create_topic(cluster, "purge", 1)
        wait_for(lambda: fully_replicated(cluster, "purge", 1), timeout=30, what="the ISR at 3")
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for i in range(200):
            producer.produce("purge", value=b"%d" % i, partition=0)
        assert producer.flush(30) == 0
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        deleted = admin.delete_records([TopicPartition("purge", 0, 150)], request_timeout=30)
        result = deleted[TopicPartition("purge", 0, 150)].result(30)
        assert result.low_watermark == 150
        victim = cluster.leader("purge", 0)
        cluster.brokers[victim].kill()  # at once: the followers must already have dropped the records
        wait_for(lambda: cluster.leader("purge", 0) not in (victim, -1), timeout=30, what="a new leader")
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "purge-check",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.assign([TopicPartition("purge", 0, -2)])  # OFFSET_BEGINNING
        got = []
        deadline = time.monotonic() + 60
        while len(got) < 50 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.append((msg.offset(), msg.value()))
        consumer.close()
        assert got and got[0] == (150, b"150"), f"the first record read after the failover: {got[:3]}"
        low, _ = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "x"}).get_watermark_offsets(
            TopicPartition("purge", 0), timeout=10)
        assert low == 150


def test_a_follower_back_after_a_sigkill_truncates_thousands_of_partitions(tmp_path: Path):
    """A follower of ~1,200 partitions (two leaders, ~600 each) comes back: its OffsetForLeaderEpoch
    requests go out in batches (fetcher.TRUNCATION_BATCH), and every partition must be truncated,
    fetched and back in the ISR with what the others acknowledged while it was down."""
    from confluent_kafka import Producer

    partitions = 1800
    # Sessions and ISR lag long enough for a starved testbed: with FAST_FAILURE's 2 s session, brokers of
    # 1,800 partitions at a low CPU priority beside the e2e lane were fenced and unfenced over and over
    # (the event loop not scheduled for 1 to 2 s at a time), and the ISRs never held all three at once
    slow_to_fence = {**FAST_FAILURE, "broker.session.timeout.ms": 10000, "replica.lag.time.max.ms": 30000}
    with Cluster(tmp_path, 3, slow_to_fence) as cluster:
        create_topic(cluster, "many", partitions)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 20})

        def one_record_each(round_: int) -> None:
            failed: list[str] = []
            for p in range(partitions):
                producer.produce("many", f"r{round_}-p{p}".encode(), partition=p,
                                 on_delivery=lambda err, _m: failed.append(str(err)) if err else None)
                producer.poll(0)
            assert producer.flush(120) == 0 and not failed, failed[:3]

        one_record_each(0)
        cluster.brokers[2].kill()
        wait_for(lambda: all(2 not in p["isr"] for p in cluster.metadata()["topics"]["many"]["partitions"]),
                 timeout=60, what="broker 2 out of every ISR")
        one_record_each(1)
        cluster.brokers[2].start()
        wait_for(lambda: fully_replicated(cluster, "many", partitions), timeout=120,
                 what="broker 2 back in all 1,800 ISRs")
        for p in (0, partitions // 2, partitions - 1):
            assert wait_replicas_identical([b.data_dir for b in cluster.brokers], "many", p) == 2


def test_a_new_leader_whose_high_watermark_lags_answers_offset_not_available(tmp_path: Path):
    """KIP-207: a follower elected leader knows the high watermark only as the old leader last told it.
    While that is below the start of its epoch, ListOffsets from a client is answered OFFSET_NOT_AVAILABLE
    (LEADER_NOT_AVAILABLE before v5), not with an offset that would move back; once the ISR has fetched
    from it, the answer is the log end again."""
    import asyncio
    import signal

    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from dm_broker.protocol.client import KafkaConnection
    from wire import list_offsets_request

    def list_offsets(broker: int, version: int, timestamp: int = -1) -> tuple[int, int]:
        """(error code, offset) of partition 0 from `broker`, asked as a client (replica -1) would."""
        async def ask() -> tuple[int, int]:
            conn = await KafkaConnection.open("127.0.0.1", cluster.brokers[broker].port)
            try:
                response = await conn.request(list_offsets_request("lag", 0, timestamp, version))
                answer = response.topics[0].partitions[0]
                return int(answer.error_code), answer.offset
            finally:
                await conn.close()
        return asyncio.run(ask())

    # C's session and its place in the ISR outlast the test: the new leader's high watermark waits for it
    # (60 s: the steps while C is stopped take seconds, more under a loaded testbed)
    slow_to_drop = {**FAST_FAILURE, "broker.session.timeout.ms": 60000, "replica.lag.time.max.ms": 60000}
    with Cluster(tmp_path, 3, slow_to_drop) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("lag", 1, replica_assignment=[[0, 1, 2]])])["lag"].result(15)  # 0 leads, then 1
        wait_for(lambda: fully_replicated(cluster, "lag", 1), timeout=30, what="the ISR at 3")
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1"})
        for i in range(10):
            producer.produce("lag", b"%d" % i, partition=0)
        assert producer.flush(30) == 0
        wait_for(lambda: list_offsets(0, 7) == (0, 10), timeout=10, what="the high watermark at 10")
        c = cluster.brokers[2].proc
        c.send_signal(signal.SIGSTOP)  # C stays in the ISR but fetches nothing: the high watermark stays at 10
        try:
            for i in range(10, 30):
                producer.produce("lag", b"%d" % i, partition=0)
            assert producer.flush(30) == 0
            wait_for(lambda: (replica_batches(cluster.brokers[1].data_dir, "lag", 0) or [(0, -1, 0)])[-1][1] == 29,
                     timeout=10, what="broker 1 holding all 30 records")
            assert list_offsets(0, 7) == (0, 10)
            assert cluster.brokers[0].stop() == 0  # controlled shutdown: broker 1 leads from its log end, 30
            wait_for(lambda: cluster.leader("lag", 0) == 1, timeout=15, what="broker 1 leading")
            for version, lagging in ((7, 78), (5, 78), (4, 5)):  # OFFSET_NOT_AVAILABLE, LEADER_NOT_AVAILABLE
                for timestamp in (-1, -2):
                    assert list_offsets(1, version, timestamp) == (lagging, -1), (version, timestamp)
        finally:
            c.send_signal(signal.SIGCONT)
        wait_for(lambda: list_offsets(1, 7) == (0, 30), timeout=60, what="the log end once C fetched")
        assert list_offsets(1, 4, -2) == (0, 0)
