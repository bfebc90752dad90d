"""Exactly-once holds with one disk gone (issue 30, ADR 0026): a consume-transform-produce loop (a
confluent-kafka consumer in group `eos` reads `in`, a transactional producer writes each record,
transformed, to `out` and commits the consumer's offsets in the same transaction) runs on 3 brokers
(RF 3, min.insync.replicas 2, __transaction_state and __consumer_offsets RF 3) while the followers of
the internal partitions it uses are SIGKILLed and restarted, then the leader of its
__transaction_state partition is SIGKILLed, its whole data directory deleted (the disk is gone) and it
is started again, empty. Read back with read_committed: every input record is in `out` exactly once
(nothing committed lost, nothing duplicated, no transaction torn), and the group's committed offset
never went back."""

from __future__ import annotations

import shutil
import sys
import threading
import time
import traceback
import uuid
from pathlib import Path

import pytest
from chaos_tools import FAST_FAILURE, create_topic, fully_replicated
from clients import committed_after_failures
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from dm_broker.partitioners import murmur2_partition
from group_clients import wait_for
from harness import Cluster
from measurements import note

pytestmark = pytest.mark.timeout(900)
RECORDS = 12000
PER_TXN = 10
PAUSE_S = 0.02  # between transactions: the workload outlasts the failures
GROUP = "eos"
TXN_ID = "eos-loop"


class CopyLoop(threading.Thread):
    """in -> out, exactly once, until every input record is copied or stopped."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.commits = 0
        self.position = -1  # the consumer's position when it last found nothing to copy
        self.committed_offsets: list[int] = []  # the group's committed offset after each commit we know of
        self.errors: list[str] = []
        self.stop_flag = threading.Event()
        self.done = threading.Event()

    def _clients(self) -> tuple[Consumer, Producer]:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": GROUP, "enable.auto.commit": False,
                             "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                             "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
        consumer.assign([TopicPartition("in", 0)])
        committed = consumer.committed([TopicPartition("in", 0)], 30)[0].offset
        consumer.seek(TopicPartition("in", 0, committed if committed >= 0 else OFFSET_BEGINNING))
        producer = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": TXN_ID,
                             "transaction.timeout.ms": 20000, "message.timeout.ms": 20000,
                             "retry.backoff.ms": 50, "reconnect.backoff.max.ms": 500})
        producer.init_transactions(60)
        return consumer, producer

    def run(self) -> None:
        try:
            self._copy()
        except BaseException as exc:  # the thread ends: the failure message says with what
            self.errors.append(f"the loop died: {exc!r}")
            raise

    def _copy(self) -> None:
        consumer, producer = self._retrying(self._clients)
        while not self.stop_flag.is_set() and not self.done.is_set():
            try:
                records = consumer.consume(PER_TXN, 1.0)
                # kept for the failure message: a consumer that only ever gets errors would stall silently
                self.errors += [f"consume: {r.error()}" for r in records if r.error()]
                records = [r for r in records if not r.error()]
                if not records:
                    self.position = consumer.position([TopicPartition("in", 0)])[0].offset
                    if self.position >= RECORDS:
                        self.done.set()
                    continue
                producer.begin_transaction()
                for r in records:
                    producer.produce("out", b"copy:" + r.value())
                next_offset = records[-1].offset() + 1
                producer.send_offsets_to_transaction([TopicPartition("in", 0, next_offset)],
                                                     consumer.consumer_group_metadata(), 30)
                producer.commit_transaction(30)
                self.commits += 1
                self.committed_offsets.append(next_offset)
                time.sleep(PAUSE_S)
            except KafkaException as exc:
                self.errors.append(str(exc.args[0]))
                # whatever the transaction's fate, start again from what the group committed
                consumer.close()
                consumer, producer = self._retrying(self._clients)
        consumer.close()

    def _retrying(self, make):
        while True:
            try:
                return make()
            except KafkaException as exc:
                self.errors.append(f"setup: {exc.args[0]}")
                time.sleep(0.5)


def partition_of(cluster: Cluster, topic: str, key: str) -> int:
    count = len(cluster.metadata()["topics"][topic]["partitions"])
    return murmur2_partition(key.encode(), count)


def committed_offset(bootstrap: str) -> int:
    """The group's committed offset, asked again while the coordinator moves (a preferred election right
    after a broker is lost)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        return committed_after_failures(c, [TopicPartition("in", 0)])[0].offset
    finally:
        c.close()


def test_exactly_once_survives_killed_followers_and_a_lost_leader_disk(tmp_path: Path):
    with Cluster(tmp_path, 3, {**FAST_FAILURE, "offsets.topic.num.partitions": 4,
                               "transaction.state.log.num.partitions": 4}) as cluster:
        create_topic(cluster, "in", 1)
        create_topic(cluster, "out", 1)
        seed = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
        for i in range(RECORDS):
            seed.produce("in", b"%06d" % i, partition=0)
        assert seed.flush(60) == 0
        loop = CopyLoop(cluster.bootstrap)
        loop.start()

        def progressing(done: int, timeout: float, what: str) -> None:
            try:
                wait_for(lambda: loop.commits > done or loop.done.is_set(), timeout=timeout, what=what)
            except AssertionError as exc:
                # where the copy loop is waiting, or that it died: nothing else tells a stall apart
                frame = sys._current_frames().get(loop.ident or -1)
                where = "".join(traceback.format_stack(frame)[-4:]) if frame is not None else "(not running)\n"
                raise AssertionError(f"{exc}: {loop.commits} commits, the consumer at {loop.position} when it "
                                     f"last found nothing, client errors {loop.errors[-8:]}; the loop is at:\n"
                                     f"{where}") from None

        progressing(4, 90, "the first transactions")
        txn_part = partition_of(cluster, "__transaction_state", TXN_ID)
        group_part = partition_of(cluster, "__consumer_offsets", GROUP)
        seen_offsets: list[int] = []
        killed = []
        for topic, part in (("__transaction_state", txn_part), ("__consumer_offsets", group_part)):
            leader = cluster.leader(topic, part)
            follower = next(b for b in range(3) if b != leader)
            killed.append((topic, follower))
            cluster.brokers[follower].kill()
            done = loop.commits
            time.sleep(3)
            seen_offsets.append(committed_offset(cluster.bootstrap))
            cluster.brokers[follower].start()
            wait_for(lambda: fully_replicated(cluster, "out", 1), timeout=90, what="the ISR back to 3")
            progressing(done + 3, 90, f"transactions after {topic}'s follower {follower} came back")
        # the disk of the transaction coordinator's leader is lost, mid-workload
        assert not loop.done.is_set(), "the workload ended before the failures: make it longer"
        victim = cluster.leader("__transaction_state", txn_part)
        done = loop.commits
        cluster.brokers[victim].kill()
        shutil.rmtree(cluster.brokers[victim].data_dir)
        seen_offsets.append(committed_offset(cluster.bootstrap))
        cluster.brokers[victim].start()
        progressing(done + 3, 120, "transactions after the disk loss")
        wait_for(lambda: loop.done.is_set(), timeout=300, what="every input record copied")
        loop.stop_flag.set()
        loop.join(60)
        seen_offsets.append(committed_offset(cluster.bootstrap))
        wait_for(lambda: fully_replicated(cluster, "out", 1), timeout=120, what="the ISR back to 3")
        reader = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"v-{uuid.uuid4().hex[:6]}",
                           "isolation.level": "read_committed", "enable.auto.commit": False})
        reader.assign([TopicPartition("out", 0, OFFSET_BEGINNING)])
        copies: list[bytes] = []
        last = time.monotonic()
        while time.monotonic() - last < 5:
            m = reader.poll(0.2)
            if m is not None and not m.error():
                copies.append(m.value())
                last = time.monotonic()
        reader.close()

    expected = [b"copy:%06d" % i for i in range(RECORDS)]
    missing = sorted(set(expected) - set(copies))
    duplicated = len(copies) - len(set(copies))
    assert not missing, f"{len(missing)} input records never committed to out (first {missing[:5]})"
    assert duplicated == 0, f"{duplicated} records copied twice"
    assert copies == expected, "out is not in input order"
    assert seen_offsets == sorted(seen_offsets), f"the group's committed offset went back: {seen_offsets}"
    assert seen_offsets[-1] == RECORDS
    note(f"[exactly-once with a disk lost] {loop.commits} transactions committed; followers killed: {killed}; "
         f"broker {victim} lost its disk; committed offsets seen {seen_offsets}; client errors {len(loop.errors)}")
